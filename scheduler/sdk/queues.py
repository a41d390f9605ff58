"""Queues as an operator sees them: depth, lag, rates and queue-wide limits
(scheduler/core/limits.py), setting or clearing a limit (`Client.set_queue_limit`,
`sched queues limit`), and a queue's busiest concurrency keys (`Client.queue_keys`,
`sched queues keys`)."""

from __future__ import annotations

from typing import Any

import msgspec

import scheduler.core.limits as limits
import scheduler.observe.keyed as keyed
from scheduler.core.errors import ValidationError
from scheduler.core.keys import check_name
from scheduler.core.limits import QueueLimit
from scheduler.observe.records import QueueKeys
from scheduler.observe.status import Status
from scheduler.sdk.requests import Op, Pipe, Scripts
from scheduler.sdk.state import ClientState, ready
from scheduler.sdk.status import status


class QueueInfo(msgspec.Struct, kw_only=True):
    queue: str
    depth: int  # entries ready, not yet read by any worker, and keyed slots queued
    pending: int  # read by a worker, not finished
    oldest_ready_age_s: float  # how long the oldest ready entry has waited (the lag)
    succeeded_per_s: float
    failed_per_s: float
    limit: QueueLimit | None = None
    permits_held: int | None = None  # runs holding a permit now (a concurrency limit only)
    keys_waiting: int = 0  # concurrency keys with a queued slot (`queue_keys` names them)


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
            limit=set_limits.get(name), permits_held=held.get(name),
            keys_waiting=q.keys_waiting if q else 0))
    return out


def queue_keys(core: ClientState, queue: str, top: int = keyed.TOP_KEYS) -> Op[QueueKeys]:
    """The queue's `top` busiest concurrency keys (by running + waiting: KeyStatus with
    its queued slots, its runs now and its weight), its per-key limit, and how many keys
    have a queued slot. Read-only: one script call per shard, each reading at most
    10,000 keys (observe/keyed.py: past that the counts are lower bounds, `truncated`)."""
    check_name("queue", queue)
    if type(top) is not int or not 1 <= top <= keyed.MAX_TOP:
        raise ValidationError("top", f"{top!r} is not allowed; use a whole number from 1 to "
                                     f"{keyed.MAX_TOP}")
    yield from ready(core)
    pipe = Pipe()
    pipe.hget(core.keys.limits, queue)
    raw: Any = (yield pipe)[0]
    limit = limits.parse({queue.encode(): raw}).get(queue) if raw else None
    replies = yield Scripts(keyed.calls(core.keys, core.shards, top, queue))
    return keyed.queue_keys(queue, limit.per_key_concurrency if limit else None, replies, top)
