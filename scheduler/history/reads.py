"""The snapshotter's read of Redis state: the slot and job hashes a batch touches, with the
shard's last events-stream id, read atomically (one MULTI/EXEC per read), so a hash read at
version V holds the effect of every event up to V and of none after it.

Why MULTI and not a Lua script: a script's HGETALL turns the reply into a Lua table and the
table back into a reply, which costs Redis several times the CPU of the same HGETALLs in a
MULTI (`bench snapshot`), and Redis's CPU is what the whole stack runs short of. Why raw I/O
(transport.raw): redis-py reads a MULTI's QUEUED replies one coroutine call each; hiredis
parses the EXEC's reply in one call, decoding to text in C.

Between `start(client)` and `stop(client)` (the snapshotter's run) reads go raw, on a Redis
Cluster to each primary's plain client (enabled on first use); otherwise, and for clients the
transport keeps no connections for (fakeredis), the same MULTI goes as a transaction
pipeline: slower for the client, the same to Redis. On a cluster, each read goes to the
primary serving its shard's hash tag.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import redis.exceptions

import scheduler.redis.cluster as cluster
import scheduler.redis.transport as transport

_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"


# Cluster clients between start() and stop() -> the node clients enabled for them.
_NODES: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


def start(client: Any) -> None:
    if cluster.is_cluster(client):
        _NODES.setdefault(client, [])
    else:
        transport.enable(client)


async def stop(client: Any) -> None:
    if cluster.is_cluster(client):
        for node in _NODES.pop(client, []):
            await transport.close(node)
    else:
        await transport.close(client)


class Read(NamedTuple):
    prefix: str  # the shard's key prefix, e.g. "sched:{s03}:"
    slots: Sequence[str]  # slot ids
    jobs: Sequence[str]  # job ids


class State(NamedTuple):
    """Replies as the connection gives them: text from a raw read (every field the scheduler
    writes is UTF-8), bytes from a pipeline; store.text_hash takes either."""

    top: Any  # the events stream's newest entry id, or "0-0" when it is empty
    slots: list[Any]  # per slot id, its hash: a dict or a flat field/value list, empty if gone
    jobs: list[Any]


async def read(client: Any, reads: Sequence[Read]) -> list[State]:
    """Each read's hashes at one version, in order; one round trip per Redis node."""
    if cluster.is_cluster(client):
        await cluster.ensure_async(client)
        await cluster.refresh_async(client)
        groups: dict[int, tuple[Any, list[int]]] = {}
        for i, r in enumerate(reads):
            node = cluster.node_client(client, r.prefix + "events")
            enabled = _NODES.get(client)
            if enabled is not None and not transport.enabled(node):
                transport.enable(node)
                enabled.append(node)
            groups.setdefault(id(node), (node, []))[1].append(i)
        try:
            parts = await asyncio.gather(*(_on_node(node, [reads[i] for i in idxs])
                                           for node, idxs in groups.values()))
        except (redis.exceptions.ConnectionError, redis.exceptions.ResponseError):
            cluster.mark_stale(client)  # a node failed, or a slot moved (MOVED)
            raise
        out: list[State | None] = [None] * len(reads)
        for (_, idxs), states in zip(groups.values(), parts, strict=True):
            for i, state in zip(idxs, states, strict=True):
                out[i] = state
        return [s for s in out if s is not None]
    return await _on_node(client, reads)


async def _on_node(client: Any, reads: Sequence[Read]) -> list[State]:
    if transport.enabled(client):
        data = b"".join(_packed(r) for r in reads)
        # Per read: MULTI's OK, a QUEUED per command, then EXEC's reply.
        counts = [len(r.slots) + len(r.jobs) + 3 for r in reads]
        # A value that is not UTF-8 (written straight to a script, past the SDK) is read
        # with U+FFFD in place of its bad bytes: one such job must not stop every read.
        replies = await transport.raw(client, data, sum(counts), encoding="utf-8",
                                   errors="replace")
        states, at = [], 0
        for r, n in zip(reads, counts, strict=True):
            states.append(_state(r, replies[at + n - 1]))
            at += n
        return states
    states = []
    for r in reads:
        pipe = transport.transaction(client)
        pipe.xrevrange(r.prefix + "events", "+", "-", count=1)
        for slot in r.slots:
            pipe.execute_command("HGETALL", r.prefix + "slot:" + slot)
        for job in r.jobs:
            pipe.execute_command("HGETALL", r.prefix + "job:" + job)
        states.append(_state(r, await transport.send(pipe)))
    return states


def _state(r: Read, replies: Any) -> State:
    if isinstance(replies, BaseException):
        raise replies
    if not isinstance(replies, list) or len(replies) != 1 + len(r.slots) + len(r.jobs):
        raise redis.exceptions.ResponseError(f"the hash read of {r.prefix} was aborted")
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    top = replies[0]
    n = len(r.slots)
    return State(top[0][0] if top else "0-0", replies[1:1 + n], replies[1 + n:])


def _bulk(text: str) -> bytes:
    b = text.encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)


def _packed(r: Read) -> bytes:
    events = _bulk(r.prefix + "events")
    out = [_MULTI, b"*6\r\n$9\r\nXREVRANGE\r\n", events,
           b"$1\r\n+\r\n$1\r\n-\r\n$5\r\nCOUNT\r\n$1\r\n1\r\n"]
    slot_key, job_key = r.prefix + "slot:", r.prefix + "job:"
    out += [b"*2\r\n$7\r\nHGETALL\r\n" + _bulk(slot_key + s) for s in r.slots]
    out += [b"*2\r\n$7\r\nHGETALL\r\n" + _bulk(job_key + j) for j in r.jobs]
    out.append(_EXEC)
    return b"".join(out)
