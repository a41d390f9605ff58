"""The task catalog (`tasks`): every task a worker has started with, and its defaults, as the
workers published them (scheduler/worker/catalog.py). SDK operations: generators that yield
requests (scheduler/sdk/requests.py), driven by Client and AsyncClient alike."""

from __future__ import annotations

from scheduler.core import catalog
from scheduler.core.catalog import TaskInfo
from scheduler.sdk.requests import Op, Pipe
from scheduler.sdk.state import ClientState


def tasks(core: ClientState) -> Op[list[TaskInfo]]:
    """The catalog's tasks by name: each one's defaults (queue, timeout, retry, delivery,
    priority, dedupe_ttl, debounce; None where it declares none), its typed payload's
    class, its pool, and the last worker that started with it and when (`seen_ms`). An
    entry stays after its workers stop; the latest start's defaults are the ones listed."""
    pipe = Pipe()
    pipe.hgetall(core.keys.tasks)
    raw = (yield pipe)[0]
    found = (catalog.decode(value) for value in raw.values())
    return sorted((info for info in found if info is not None), key=lambda i: i.task)
