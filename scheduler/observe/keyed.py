"""Concurrency keys as status shows them: each shard's read (lua/key_stats.lua), decoded,
and the busiest keys of a queue over its shards.

A keyed slot waits in its key's queue (`kq:<queue>:<key>`, keys.py), not in the queue's
dispatch streams, so a queue's depth is its streams' undelivered entries plus its keys'
queued slots. All of a key's slots live in its home shard, so a key is counted by one
shard's read, and the busiest keys of a queue are the busiest of each shard's busiest.

The work is bounded whatever the number of keys: a read takes at most `KEY_BUDGET` keys of
a shard's rings (past that its counts are lower bounds, `truncated`), and names the `top`
busiest keys of each queue; status and the exporter name `TOP_KEYS` per queue, so the
exporter's per-key series stay few (a key that leaves the top stops being exported).
A key whose slots all run, none queued, is in no ring: its running slots name it (the
shard's `leases`, with what the budget leaves).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.core.limits import QueueLimit
from scheduler.observe.records import KeyStatus, QueueKeys

KEY_BUDGET = 10_000  # ring and lease entries a shard's read takes, over all its queues
TOP_KEYS = 10  # busiest keys per queue named by status and exported as metrics
MAX_TOP = 1000  # the most a caller may ask for (`Client.queue_keys(top=)`)


class ShardKeys(NamedTuple):
    """One queue's keys in one shard (one entry of key_stats.lua's reply)."""

    queue: str
    waiting: int
    keys: int
    truncated: bool
    top: list[KeyStatus]


def calls(keys: Keys, shards: int, top: int, queue: str = "") -> list[scripts.Call]:
    """One key_stats call per shard; `queue`: that queue's keys only."""
    return [scripts.key_stats(keys.prefix(s), top, KEY_BUDGET, queue) for s in range(shards)]


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _weight(value: Any) -> int:
    try:
        return int(float(_s(value)))
    except ValueError:  # written past the SDK: fails no read
        return 1


def decode(reply: list[Any]) -> list[ShardKeys]:
    """A shard's key_stats reply."""
    return [ShardKeys(queue=_s(q), waiting=int(waiting), keys=int(keys),
                      truncated=bool(int(truncated)),
                      top=[KeyStatus(key=_s(k), waiting=int(w), running=int(r),
                                     weight=_weight(weight)) for k, w, r, weight in top])
            for q, waiting, keys, _read, truncated, top in reply]


def busiest(found: Iterable[KeyStatus], top: int) -> list[KeyStatus]:
    """The `top` busiest (running + waiting), ties by key: key_stats.lua's order."""
    return sorted(found, key=lambda k: (-(k.waiting + k.running), k.key))[:top]


def queue_keys(queue: str, limit: QueueLimit | None, replies: list[Any], top: int
               ) -> QueueKeys:
    """A queue's keys from each shard's key_stats reply (called with that queue only)."""
    shards = [s for reply in replies for s in decode(reply) if s.queue == queue]
    limit = limit or QueueLimit()
    return QueueKeys(queue=queue, per_key_concurrency=limit.per_key_concurrency,
                     per_key_rate=limit.per_key_rate,
                     waiting=sum(s.waiting for s in shards), keys=sum(s.keys for s in shards),
                     truncated=any(s.truncated for s in shards),
                     busiest=busiest((k for s in shards for k in s.top), top))
