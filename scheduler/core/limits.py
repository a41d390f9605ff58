"""Queue limits: at most `concurrency` runs of a queue at once across every worker, at most
`rate` starts per second, at most `per_key_concurrency` runs at once of any one concurrency
key of the queue, and at most `per_key_rate` starts per second of any one key. The one
definition of a limit and of how it is stored.

The rule: a limit applies to every claim made after the call that set it returns. Not "within
a second", and whatever the workers are doing: the scripts that claim read the limit
themselves, at claim time, from keys in their own hash slot, and `set_queue_limit` writes
every one of those copies before it returns. So no worker is waited for, and a worker that is
dead, partitioned or slow to notice cannot claim past a limit, because the claim is refused
in Redis. Where each script reads it (on one Redis, Sentinel and a Cluster alike, as each
copy lives in the slot of the script that reads it):

  * `<ns>:limits`, field = queue, the limit as JSON: what is listed (`queues`), and what
    workers read about once a second (limiter.py) to choose which reader takes the queue;
    no script reads it;
  * `<ns>:{lim:<queue>}:limit` (concurrency, rate): acquire.lua grants permits under it;
  * `<ns>:{sNN}:klimit:<queue>` in every shard (per-key concurrency and rate): take.lua;
  * `<ns>:{sNN}:limited` in every shard, the queues with a queue-wide part: claim.lua and
    take.lua refuse a claim of such a queue that comes without a permit (answer LIMITED,
    nothing written). A worker that has not yet noticed the limit hands those entries back
    and reads the limits at once: the permit path takes over from there. The unlimited
    path pays one EXISTS per claim call for this while no queue of the namespace has a
    queue-wide limit (bench burndown).

A limit set by a version whose workers read the hash themselves has no copies: the first
worker to start writes them (limiter.py's copy_missing).

Runs already going when a limit is set are counted against a per-key limit (take.lua counts
a key's running slots) but not against a queue-wide one (they hold no permit). A cleared or
raised limit is likewise read by the next claim. Two calls setting the same queue's limit at
once may leave copies of either (the writes are not one transaction across slots): the last
call to return decides only if the two do not overlap.

Enforcement of the queue-wide parts is acquire.lua's: permits in
`<ns>:{lim:<queue>}:permits`, one per run in flight, expiring with the workers' lease unless
renewed. The per-key part is take.lua's: a key's running slots in its home shard (its members of
`kruns:<queue>`, keys.py), each one given back when its attempt ends, whatever ends it.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from scheduler.core.errors import ValidationError
from scheduler.core.keys import Keys

MAX_CONCURRENCY = 1_000_000
MAX_RATE = 1_000_000.0
# The slowest rate: one start an hour. Slower is a quota, not a rate; and a bucket of a slower
# rate would have to outlive the hours it takes to refill (_bucket.lua keeps it that long).
MIN_RATE = 1 / 3600


class QueueLimit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A queue-wide limit across all workers (`Client.set_queue_limit`): at most
    `concurrency` runs at once, at most `rate` starts per second; None is no limit."""

    concurrency: int | None = None  # runs at once, across all workers
    rate: float | None = None  # starts per second, across all workers
    per_key_concurrency: int | None = None  # runs at once of one concurrency key
    per_key_rate: float | None = None  # starts per second of one concurrency key

    @property
    def per_key(self) -> bool:
        """Whether any concurrency key of the queue is limited (take.lua applies it)."""
        return self.per_key_concurrency is not None or self.per_key_rate is not None

    @property
    def queue_wide(self) -> bool:
        """Whether the queue as a whole is limited (workers then take permits: limiter.py)."""
        return self.concurrency is not None or self.rate is not None

    def text(self) -> str:
        parts = []
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} at once")
        if self.rate is not None:
            parts.append(f"{self.rate:g}/s")
        if self.per_key_concurrency is not None:
            parts.append(f"{self.per_key_concurrency} at once per key")
        if self.per_key_rate is not None:
            parts.append(f"{self.per_key_rate:g}/s per key")
        return ", ".join(parts) or "none"


def _check_rate(field: str, rate: Any) -> float | None:
    """A rate as starts per second: a number, or text as the CLI takes it ("10/s", "300/m")."""
    if isinstance(rate, str):
        rate = parse_rate(rate, field)
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                             or not math.isfinite(rate) or not MIN_RATE <= rate <= MAX_RATE):
        raise ValidationError(field, f"{rate!r} is not allowed; use starts per second, at "
                                     f"least one an hour (1/h, {MIN_RATE:.6g}) and at most "
                                     f"{MAX_RATE:,.0f} (or None for no rate limit)")
    return None if rate is None else float(rate)


def check_limit(concurrency: Any, rate: Any, per_key_concurrency: Any = None,
                per_key_rate: Any = None) -> QueueLimit:
    if concurrency is not None and (type(concurrency) is not int
                                    or not 1 <= concurrency <= MAX_CONCURRENCY):
        raise ValidationError("concurrency", f"{concurrency!r} is not allowed; use a whole "
                                             f"number from 1 to {MAX_CONCURRENCY:,} (or None "
                                             f"for no concurrency limit)")
    if per_key_concurrency is not None and (type(per_key_concurrency) is not int or not
                                            1 <= per_key_concurrency <= MAX_CONCURRENCY):
        raise ValidationError("per_key_concurrency", f"{per_key_concurrency!r} is not allowed; "
                                                     f"use a whole number from 1 to "
                                                     f"{MAX_CONCURRENCY:,} (or None for no "
                                                     f"per-key limit)")
    return QueueLimit(concurrency=concurrency, rate=_check_rate("rate", rate),
                      per_key_concurrency=per_key_concurrency,
                      per_key_rate=_check_rate("per_key_rate", per_key_rate))


def write_copies(pipe: Any, keys: Keys, shards: int, queue: str, limit: QueueLimit) -> None:
    """Add to `pipe` (a pipeline, or the SDK's Pipe) the writes that put the queue's limit
    where each script reads it (the module's docstring); not the `limits` hash. Each field
    is set or deleted on its own, so a claim meanwhile sees the old value or the new one,
    never none."""
    _write_pair(pipe, keys.limit(queue), limit.concurrency, limit.rate)
    for shard in range(shards):
        if limit.queue_wide:
            pipe.sadd(keys.limited(shard), queue)
        else:
            pipe.srem(keys.limited(shard), queue)
        _write_pair(pipe, keys.key_limit(shard, queue), limit.per_key_concurrency,
                    limit.per_key_rate)


def _write_pair(pipe: Any, key: str, concurrency: int | None, rate: float | None) -> None:
    fields = {"concurrency": concurrency, "rate": None if rate is None else repr(rate)}
    kept = {f: v for f, v in fields.items() if v is not None}
    if kept:
        pipe.hset(key, mapping=kept)
    if len(kept) < len(fields):
        pipe.hdel(key, *(f for f in fields if f not in kept))


_decoder = msgspec.json.Decoder(QueueLimit)


def encode(limit: QueueLimit) -> bytes:
    return msgspec.json.encode(limit)


def parse(raw: dict[bytes, bytes]) -> dict[str, QueueLimit]:
    """The `<ns>:limits` hash; a field that does not decode (written by hand) is skipped."""
    out: dict[str, QueueLimit] = {}
    for queue, value in raw.items():
        try:
            out[queue.decode()] = _decoder.decode(value)
        except (msgspec.DecodeError, UnicodeDecodeError):
            continue
    return out


def parse_rate(text: str, field: str = "rate") -> float:
    """`--rate` as the CLI takes it: "20", "20/s", "300/m", "1000/h"."""
    value, _, unit = text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(unit.strip().lower())
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if per is None or not math.isfinite(number):
        raise ValidationError(field, f"{text!r} is not a rate; write starts per second or "
                                     f"per minute or hour: 20, 20/s, 300/m, 1000/h")
    return number / per
