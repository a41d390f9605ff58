"""Operator actions on slots: cancel, and the dead-letter queue (list, replay, purge).

Functions over a blocking `Client`; `Client.cancel`, `Client.dead_letters`, `Client.replay`
and `Client.purge` call them. Each action is one Lua transition per shard, all shards in one
pipelined round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from . import scripts
from .keys import shard_of, split_slot_id
from .models import Slot, slot_from_hash

if TYPE_CHECKING:
    from .client import Client

CANCEL_RESULTS = {
    scripts.Cancelled.CANCELLED: "cancelled",
    scripts.Cancelled.REQUESTED: "cancel requested (running: the worker stops it at its next "
                                 "heartbeat)",
    scripts.Cancelled.TERMINAL: "already finished",
    scripts.Cancelled.MISSING: "not found",
}


class DeadLetter(msgspec.Struct, frozen=True):
    slot: Slot
    died_ms: int

    @property
    def error(self) -> str | None:
        return self.slot.attempts[-1].error if self.slot.attempts else None


def _by_shard(client: Client, slot_ids: Iterable[str]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for slot in slot_ids:
        job_id, _ = split_slot_id(slot)
        out.setdefault(shard_of(job_id, client.shards), []).append(slot)
    return out


def cancel(client: Client, ids: Iterable[str], reason: str) -> dict[str, str]:
    """Slot ids, or job ids (every slot of the job); returns what happened to each slot."""
    slot_ids: list[str] = []
    for item in ids:
        if ":" in item:
            slot_ids.append(item)
        else:
            slot_ids += [s.slot_id for s in client.slots(item)]
    groups = _by_shard(client, slot_ids)
    now = client.now_ms()
    calls = [scripts.cancel(client.keys.prefix(s), now, client.events_maxlen, reason, slots)
             for s, slots in groups.items()]
    replies = scripts.run_sync(client.redis, calls)
    result: dict[str, str] = {}
    for slots, reply in zip(groups.values(), replies, strict=True):
        for slot, code in zip(slots, scripts.codes(reply, scripts.Cancelled), strict=True):
            result[slot] = CANCEL_RESULTS[code]
    return result


def dead_letters(client: Client, limit: int = 100) -> list[DeadLetter]:
    """The most recent dead slots across all shards, newest first."""
    pipe = client.redis.pipeline(transaction=False)
    for shard in range(client.shards):
        pipe.zrevrange(client.keys.dlq(shard), 0, limit - 1, withscores=True)
    entries: list[tuple[int, str, int]] = []
    for shard, rows in enumerate(pipe.execute()):
        entries += [(shard, member.decode(), int(score)) for member, score in rows]
    entries.sort(key=lambda e: -e[2])
    entries = entries[:limit]
    pipe = client.redis.pipeline(transaction=False)
    for shard, slot, _ in entries:
        pipe.hgetall(client.keys.slot(shard, slot))
    raws: list[Any] = pipe.execute()
    return [DeadLetter(slot_from_hash(slot, raw), died)
            for (_, slot, died), raw in zip(entries, raws, strict=True) if raw]


def _all_dead(client: Client) -> list[str]:
    pipe = client.redis.pipeline(transaction=False)
    for shard in range(client.shards):
        pipe.zrange(client.keys.dlq(shard), 0, -1)
    return [m.decode() for rows in pipe.execute() for m in rows]


def _on_dead(client: Client, build: Callable[..., scripts.Call],
             slot_ids: Iterable[str] | None) -> int:
    groups = _by_shard(client, _all_dead(client) if slot_ids is None else slot_ids)
    now = client.now_ms()
    calls = [build(client.keys.prefix(s), now, client.events_maxlen, slots)
             for s, slots in groups.items()]
    return sum(int(c) for reply in scripts.run_sync(client.redis, calls) for c in reply)


def replay(client: Client, slot_ids: Iterable[str] | None) -> int:
    """Dispatch dead slots again (None: every dead slot); returns how many were replayed."""
    return _on_dead(client, scripts.replay, slot_ids)


def purge(client: Client, slot_ids: Iterable[str] | None) -> int:
    """Drop slots from the dead-letter queue (None: all); the slots keep their history."""
    return _on_dead(client, scripts.purge, slot_ids)
