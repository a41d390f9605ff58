"""The namespace at a glance (`status`), its workers (`workers`) and the supervisors of
those started by `sched worker --processes N` (`supervisors`), read by
scheduler/observe/status.py's readers in either client.
"""

from __future__ import annotations

from scheduler.observe.status import (
    Status,
    Supervisor,
    WorkerStatus,
    group_supervisors,
    read_status,
    read_status_async,
    read_workers,
    read_workers_async,
)
from scheduler.sdk.requests import Io, Op
from scheduler.sdk.state import ClientState


def status(core: ClientState) -> Op[Status]:
    """The namespace at a glance: queues (depth, lag, rates), due backlog, dead letters,
    workers, shard owners. Read-only; a few pipelined round trips (scheduler/observe/status.py)."""
    return (yield Io(lambda r, *a: read_status(r, *a)[0], read_status_async,  # type: ignore[no-any-return]
                     (core.keys, core.clock)))


def workers(core: ClientState) -> Op[list[WorkerStatus]]:
    """The most recently seen workers (alive first), with heartbeats and in-flight counts."""
    return (yield Io(read_workers, read_workers_async,  # type: ignore[no-any-return]
                     (core.keys, core.clock)))


def supervisors(core: ClientState) -> Op[list[Supervisor]]:
    """The supervisors (`sched worker --processes N`) of the most recently seen workers, each
    with its host, pid, children alive, restarts and its children (one `workers()` read,
    grouped). Workers started on their own are in none (their `supervisor` is None)."""
    return group_supervisors((yield from workers(core)))
