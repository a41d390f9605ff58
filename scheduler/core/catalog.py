"""The task catalog's record: what a worker publishes of each task it runs (`<ns>:tasks`,
keys.py), and what `Client.tasks()` and `sched tasks` list. Its option fields are the
submit options a task may declare defaults for (jobspec.TASK_OPTIONS), by the same names.

Also the one rule by which a submit takes a task's defaults (`TaskDefaults`): an option the
submit leaves at None takes the catalog entry's, else the built-in one (queue "default",
delivery at_least_once; the others stay None and the job's own defaults apply); a
`dedupe_ttl` or `debounce` default holds only for a job with a dedupe key. A client merges
each entry once, when it reads the catalog, so a submit pays one dict lookup for it.

Which defaults win while two versions of a task run (a rolling deploy): the latest worker
start's. Each start overwrites its tasks' entries, and a client's copy follows within its
clock's re-sync interval. Each live worker also says, in its heartbeat, which tasks it serves
and a digest of the defaults it started with (`served`): `TaskInfo.versions` counts the
distinct ones, so a deploy that is still mixed shows as such."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from scheduler.core.jobspec import DEFAULT_DELIVERY, DEFAULT_QUEUE, TASK_OPTIONS
from scheduler.core.models import RetryPolicy

# Options whose default holds only for a job with a dedupe key (the key they hold).
WINDOW_OPTIONS = ("dedupe_ttl", "debounce")


class TaskInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One task of the catalog: its defaults (None: none declared, submit's own apply),
    `payload_type` (the module and name of its typed payload's class; None: untyped),
    `pool` ("thread" or "process"), and `worker` / `seen_ms`: the last worker that started
    with it and when (ms on the scheduler's clock). Workers of two versions write in turn:
    the entry is the latest start's.

    Read from the live workers' heartbeats when listed, never stored: `workers`, the live
    workers that serve the task now (their ids, sorted); `versions`, how many distinct sets
    of defaults those workers started with (2 or more: a deploy of two versions is under
    way, and submits get the latest start's); `succeeded_per_s` and `failed_per_s`, the
    task's runs per second summed over those workers' last heartbeat interval."""

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
    workers: list[str] = []
    versions: int = 0
    succeeded_per_s: float = 0.0
    failed_per_s: float = 0.0

    def declares_defaults(self) -> bool:
        return any(getattr(self, option) is not None for option in TASK_OPTIONS)


class TaskDefaults(msgspec.Struct, frozen=True):
    """What a submit of one task takes for the options it leaves at None: `queue` and
    `delivery` always (the entry's, else the built-in ones); `timeout`, `retry`, `priority`
    and the window options only where the entry declares them (None otherwise)."""

    queue: str = DEFAULT_QUEUE
    delivery: str = DEFAULT_DELIVERY
    timeout: float | None = None
    retry: RetryPolicy | None = None
    priority: int | None = None
    dedupe_ttl: float | None = None
    debounce: float | None = None

    def fill(self, given: dict[str, Any], dedupe_key: object) -> dict[str, Any]:
        """The options of `given` (option -> the submit's value) it leaves at None that
        these defaults fill, as option -> value."""
        out: dict[str, Any] = {}
        for option, value in given.items():
            if value is None and (option not in WINDOW_OPTIONS or dedupe_key is not None):
                default = getattr(self, option)
                if default is not None:
                    out[option] = default
        return out

    @property
    def windowed(self) -> bool:
        """It declares a dedupe window or a debounce."""
        return self.dedupe_ttl is not None or self.debounce is not None


BUILT_IN = TaskDefaults()  # a task the catalog does not list, or that declares nothing


def defaults_of(info: TaskInfo) -> TaskDefaults:
    """An entry's defaults merged with the built-in ones: the rule, in one place."""
    if not info.declares_defaults():
        return BUILT_IN
    return TaskDefaults(queue=DEFAULT_QUEUE if info.queue is None else info.queue,
                        delivery=DEFAULT_DELIVERY if info.delivery is None else info.delivery,
                        timeout=info.timeout, retry=info.retry, priority=info.priority,
                        dedupe_ttl=info.dedupe_ttl, debounce=info.debounce)


def digest(info: TaskInfo) -> str:
    """A short digest of what an entry declares (its defaults, payload type and pool, not
    who wrote it when): two workers with the same digest for a task run the same version
    of it, as far as a submit can tell."""
    declared = msgspec.structs.replace(info, worker="", seen_ms=0, workers=[], versions=0,
                                       succeeded_per_s=0.0, failed_per_s=0.0)
    return hashlib.blake2b(_encoder.encode(declared), digest_size=6).hexdigest()


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(TaskInfo)
_served = msgspec.json.Decoder(dict[str, str])
_rates = msgspec.json.Decoder(dict[str, tuple[float, float]])


def encode(info: TaskInfo) -> bytes:
    return _encoder.encode(info)


def decode(raw: Any) -> TaskInfo | None:
    """An entry as Redis holds it; None for one that is not an entry (written by hand, or
    by a later version with a field this one does not know the type of)."""
    try:
        return _decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def served(entries: list[TaskInfo]) -> bytes:
    """What a worker's heartbeat says of the tasks it serves: task -> digest (JSON)."""
    return _encoder.encode({info.task: digest(info) for info in entries})


def decode_served(raw: Any) -> dict[str, str]:
    """A heartbeat's `tasks` field; {} for none or one that does not parse."""
    try:
        return _served.decode(raw) if raw else {}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return {}


def decode_rates(raw: Any) -> dict[str, tuple[float, float]]:
    """A heartbeat's `task_rates` field (task -> [succeeded/s, failed/s]); {} for none or
    one that does not parse."""
    try:
        return _rates.decode(raw) if raw else {}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return {}
