"""Queues as an operator sees them: depth, lag, rates and queue-wide limits
(scheduler/core/limits.py), and setting or clearing a limit (`Client.set_queue_limit`,
`sched queues limit`)."""

from __future__ import annotations

from typing import Any

import msgspec

import scheduler.core.limits as limits
from scheduler.core.keys import check_name
from scheduler.core.limits import QueueLimit
from scheduler.observe.status import Status
from scheduler.sdk.requests import Op, Pipe
from scheduler.sdk.state import ClientState, ready
from scheduler.sdk.status import status


class QueueInfo(msgspec.Struct, kw_only=True):
    queue: str
    depth: int  # entries ready, not yet read by any worker
    pending: int  # read by a worker, not finished
    oldest_ready_age_s: float  # how long the oldest ready entry has waited (the lag)
    succeeded_per_s: float
    failed_per_s: float
    limit: QueueLimit | None = None
    permits_held: int | None = None  # runs holding a permit now (a concurrency limit only)


def set_queue_limit(core: ClientState, queue: str, concurrency: int | None = None,
                    rate: float | None = None) -> Op[QueueLimit | None]:
    """At most `concurrency` runs of `queue` at once across all workers, and at most `rate`
    starts per second; both None clears the limit. Workers apply a change within about two
    seconds; slots over the limit stay queued. Returns the limit now in force (None: none)."""
    check_name("queue", queue)
    limit = limits.check_limit(concurrency, rate)
    yield from ready(core)
    pipe = Pipe()
    if limit.concurrency is None and limit.rate is None:
        pipe.hdel(core.keys.limits, queue)
        yield pipe
        return None
    pipe.hset(core.keys.limits, queue, limits.encode(limit))  # listed from now on
    yield pipe
    return limit


def queue_limits(core: ClientState) -> Op[dict[str, QueueLimit]]:
    """The limits set with `set_queue_limit`, by queue."""
    yield from ready(core)
    pipe = Pipe()
    pipe.hgetall(core.keys.limits)
    raw: Any = (yield pipe)[0]
    return limits.parse(raw)


def queues(core: ClientState, now: Status | None = None) -> Op[list[QueueInfo]]:
    """Every queue with its depth, lag, rates and limit. `now`: a status just read
    (`status()`), to take the queues' figures from instead of reading them again."""
    if now is None:
        now = yield from status(core)
    set_limits = yield from queue_limits(core)
    limited = [q for q, lim in sorted(set_limits.items()) if lim.concurrency is not None]
    held: dict[str, int] = {}
    if limited:
        pipe = Pipe()
        for name in limited:
            pipe.zcount(core.keys.permits(name), now.now_ms + 1, "+inf")
        held = dict(zip(limited, (yield pipe), strict=True))
    names = sorted({q.queue for q in now.queues} | set(set_limits))
    by_name = {q.queue: q for q in now.queues}
    out = []
    for name in names:
        q = by_name.get(name)
        out.append(QueueInfo(
            queue=name, depth=q.depth if q else 0, pending=q.pending if q else 0,
            oldest_ready_age_s=q.oldest_ready_age_s if q else 0.0,
            succeeded_per_s=q.succeeded_per_s if q else 0.0,
            failed_per_s=q.failed_per_s if q else 0.0,
            limit=set_limits.get(name), permits_held=held.get(name)))
    return out
