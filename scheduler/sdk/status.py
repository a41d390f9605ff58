"""The namespace at a glance (`status`), its workers (`workers`) and the supervisors of
those started by `sched worker --processes N` (`supervisors`), read by
scheduler/observe/status.py's readers in either client; the last `sched verify` runs
(`verify_runs`).
"""

from __future__ import annotations

from scheduler.core import canary
from scheduler.core.canary import VerifyRun
from scheduler.core.errors import ValidationError
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
from scheduler.sdk.requests import Io, Op, Pipe
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


def verify_runs(core: ClientState, limit: int = canary.RUNS_KEPT) -> Op[list[VerifyRun]]:
    """The last `sched verify` runs on this namespace, newest first (at most `limit`, and
    at most the 20 a namespace keeps): each one's start, duration, exit code, chaos and seed,
    and every invariant with its figure."""
    if type(limit) is not int or not 1 <= limit <= canary.RUNS_KEPT:
        raise ValidationError("limit", f"{limit!r} is not allowed; must be an integer from 1 "
                                       f"to {canary.RUNS_KEPT}")
    pipe = Pipe()
    pipe.lrange(core.keys.verify_runs(), 0, limit - 1)
    (lines,) = yield pipe
    return canary.decode_runs(lines)
