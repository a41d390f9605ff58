"""The task catalog's record: what a worker publishes of each task it runs (`<ns>:tasks`,
keys.py), and what `Client.tasks()` and `sched tasks` list. Its option fields are the
submit options a task may declare defaults for (jobspec.TASK_OPTIONS), by the same names."""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler.core.jobspec import TASK_OPTIONS
from scheduler.core.models import RetryPolicy


class TaskInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One task of the catalog: its defaults (None: none declared, submit's own apply),
    `payload_type` (the module and name of its typed payload's class; None: untyped),
    `pool` ("thread" or "process"), and `worker` / `seen_ms`: the last worker that started
    with it and when (ms on the scheduler's clock). Workers of two versions write in turn:
    the entry is the latest start's."""

    task: str
    queue: str | None = None
    timeout: float | None = None
    retry: RetryPolicy | None = None
    delivery: str | None = None
    priority: int | None = None
    dedupe_ttl: float | None = None
    debounce: float | None = None
    payload_type: str | None = None
    pool: str = "thread"
    worker: str = ""
    seen_ms: int = 0


    def declares_defaults(self) -> bool:
        return any(getattr(self, option) is not None for option in TASK_OPTIONS)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(TaskInfo)


def encode(info: TaskInfo) -> bytes:
    return _encoder.encode(info)


def decode(raw: Any) -> TaskInfo | None:
    """An entry as Redis holds it; None for one that is not an entry (written by hand, or
    by a later version with a field this one does not know the type of)."""
    try:
        return _decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
