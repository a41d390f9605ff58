"""Queues as an operator sees them: depth, lag, rates and limits (scheduler/core/limits.py),
setting or clearing a limit (`Client.set_queue_limit`, `sched queues limit`), the weight of a
concurrency key in its queue's turns (`Client.set_key_weight`, `sched queues weight`), and a
queue's busiest concurrency keys (`Client.queue_keys`, `sched queues keys`)."""

from __future__ import annotations

from typing import Any

import msgspec

import scheduler.core.limits as limits
import scheduler.observe.keyed as keyed
from scheduler.core.errors import ValidationError
from scheduler.core.keys import check_concurrency_key, check_name, key_shard
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
                    rate: float | str | None = None,
                    per_key_concurrency: int | None = None,
                    per_key_rate: float | str | None = None) -> Op[QueueLimit | None]:
    """At most `concurrency` runs of `queue` at once across all workers, at most `rate`
    starts per second, at most `per_key_concurrency` runs at once and `per_key_rate` starts
    per second of any one concurrency key (the docs' "Many tenants on one queue" guide). A
    rate is starts per second, or text as the CLI takes it ("10/s", "300/m", "1000/h"). All
    None clears the limit, and each one left None is not limited.

    The limit applies to every claim made after this call returns, by every worker: the
    scripts that claim read it in Redis, so no worker is waited for, and one that is
    unreachable cannot claim past it either. Runs already going are counted against a
    per-key limit, not against a queue-wide one. Slots over the limit stay queued (over a
    key's limit, they never hold up other keys). Returns the limit now in force (None:
    none)."""
    check_name("queue", queue)
    limit = limits.check_limit(concurrency, rate, per_key_concurrency, per_key_rate)
    yield from ready(core)
    keys, pipe = core.keys, Pipe()
    # Every copy a script reads is written in this one round trip.
    limits.write_copies(pipe, keys, core.shards, queue, limit)
    if not limit.queue_wide and not limit.per_key:
        pipe.hdel(keys.limits, queue)
        yield pipe
        return None
    pipe.hset(keys.limits, queue, limits.encode(limit))  # listed from now on
    yield pipe
    return limit


MAX_KEY_WEIGHT = 1000
DEFAULT_KEY_WEIGHT = 1  # a key with no weight set: one turn a round


def check_key_weight(weight: Any) -> int:
    if weight is None:
        return DEFAULT_KEY_WEIGHT
    if type(weight) is not int or not 1 <= weight <= MAX_KEY_WEIGHT:
        raise ValidationError("weight", f"{weight!r} is not allowed; use a whole number from 1 "
                                        f"to {MAX_KEY_WEIGHT} (turns per round; 1, the "
                                        f"default, or None resets it)")
    return weight


def _weights_key(core: ClientState, queue: str, key: str) -> str:
    return core.keys.key_weights(key_shard(key, core.shards), queue)


def set_key_weight(core: ClientState, queue: str, key: str, weight: int | None) -> Op[int]:
    """How many turns concurrency key `key` gets in each round of `queue`'s turns (keys with
    ready work take turns; a turn starts one run): a whole number from 1 to 1000, 1 (or None)
    being the default. Stored where the key's jobs live (its home shard, keys.key_shard), for
    the script that hands out the turns. Returns the weight now in force."""
    check_name("queue", queue)
    check_concurrency_key(key)
    weight = check_key_weight(weight)
    yield from ready(core)
    pipe = Pipe()
    if weight == DEFAULT_KEY_WEIGHT:
        pipe.hdel(_weights_key(core, queue, key), key)
    else:
        pipe.hset(_weights_key(core, queue, key), key, weight)
    yield pipe
    return weight


def key_weight(core: ClientState, queue: str, key: str) -> Op[int]:
    """Concurrency key `key`'s weight in `queue`'s turns (set_key_weight): 1 when none is
    set."""
    check_name("queue", queue)
    check_concurrency_key(key)
    yield from ready(core)
    pipe = Pipe()
    pipe.hget(_weights_key(core, queue, key), key)
    raw: Any = (yield pipe)[0]
    try:
        return int(raw) if raw is not None else DEFAULT_KEY_WEIGHT
    except ValueError:  # written past the SDK: fails no read
        return DEFAULT_KEY_WEIGHT


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
    10,000 keys and running slots (observe/keyed.py: past that the counts are lower
    bounds, `truncated`)."""
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
    return keyed.queue_keys(queue, limit, replies, top)
