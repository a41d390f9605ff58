"""Lua calls written to Redis as they are made: the ScriptStream request (sdk_core.py).

A pipeline sends its commands once all are built, so Redis waits while the client packs
and the client waits while Redis runs. Here each call goes out on the connection as soon
as the iterator yields it, and the iterator packs the next one (submit_batch.Batch.calls)
while Redis runs it: the two processes overlap. Replies are read once more than AHEAD
calls are unanswered, so Redis always has a call queued behind the one it runs while the
client's reads stay bounded; a WAIT (durability) follows the last call, as in a pipeline.

What stays as in scripts.run_sync_waiting: a call's error reply is its result (the others
ran); NOSCRIPT loads the scripts and runs the calls it refused again, once; WAIT counts the
fewest confirmations of any round trip that wrote. A broken connection (or a reply that
did not come within the timeout) sends every call again through that pipeline path, which
retries as redis-py does: a call that ran already finds its jobs written and writes
nothing (submit.lua's EXISTS, or its marker). A Redis Cluster and clients that are not a
plain redis-py client take that pipeline path directly, with every call made first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis
import redis.asyncio
import redis.exceptions

import scheduler.redis.cluster as cluster
import scheduler.scripts.calls as scripts
from scheduler.scripts.replies import confirmed
from scheduler.scripts.source import SOURCES

AHEAD = 2  # calls sent but unanswered before the client reads a reply
_BROKEN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def _command(call: scripts.Call) -> tuple[Any, ...]:
    return ("EVALSHA", SOURCES[call.script].sha, len(call.keys), *call.keys, *call.args)


def _streams(client: Any) -> bool:
    return isinstance(client, redis.Redis | redis.asyncio.Redis) and not cluster.is_cluster(
        client)


def run_sync(client: redis.Redis, calls: Iterator[scripts.Call],
             wait: tuple[Any, ...] | None) -> tuple[list[Any], int]:
    if not _streams(client):
        return scripts.run_sync_waiting(client, list(calls), False, wait)
    pool: Any = client.connection_pool
    conn: Any = pool.get_connection()
    sent: list[scripts.Call] = []
    out: list[Any] = []
    waited = None
    try:
        for call in calls:
            sent.append(call)  # before sending: a send that breaks may have reached Redis
            conn.send_packed_command(conn.pack_command(*_command(call)), check_health=False)
            while len(sent) - len(out) > AHEAD:
                out.append(_read_sync(conn))
        if wait is not None and sent:
            conn.send_packed_command(conn.pack_command(*wait), check_health=False)
        while len(out) < len(sent):
            out.append(_read_sync(conn))
        if wait is not None and sent:
            waited = _read_sync(conn)
    except _BROKEN:
        conn.disconnect()
        return scripts.run_sync_waiting(client, [*sent, *calls], False, wait)
    except BaseException:
        conn.disconnect()  # replies may be on their way: the connection is out of step
        raise
    finally:
        pool.release(conn)
    results, acked, again = _absorb(sent, out, waited, wait)
    if again:
        scripts.load_sync(client)
        retried = scripts.run_sync_waiting(client, [sent[i] for i in again], False, wait)
        acked = _merge(results, again, retried, acked)
    return results, acked


async def run_async(client: redis.asyncio.Redis, calls: Iterator[scripts.Call],
                    wait: tuple[Any, ...] | None) -> tuple[list[Any], int]:
    """Async twin of run_sync."""
    if not _streams(client):
        return await scripts.run_async_waiting(client, list(calls), False, wait)
    pool: Any = client.connection_pool
    conn: Any = await pool.get_connection()
    sent: list[scripts.Call] = []
    out: list[Any] = []
    waited = None
    try:
        for call in calls:
            sent.append(call)
            await conn.send_packed_command(conn.pack_command(*_command(call)),
                                           check_health=False)
            while len(sent) - len(out) > AHEAD:
                out.append(await _read_async(conn))
        if wait is not None and sent:
            await conn.send_packed_command(conn.pack_command(*wait), check_health=False)
        while len(out) < len(sent):
            out.append(await _read_async(conn))
        if wait is not None and sent:
            waited = await _read_async(conn)
    except _BROKEN:
        await conn.disconnect()
        return await scripts.run_async_waiting(client, [*sent, *calls], False, wait)
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    results, acked, again = _absorb(sent, out, waited, wait)
    if again:
        await scripts.load_async(client)
        retried = await scripts.run_async_waiting(client, [sent[i] for i in again], False,
                                                  wait)
        acked = _merge(results, again, retried, acked)
    return results, acked


def _read_sync(conn: Any) -> Any:
    try:
        return conn.read_response()
    except redis.exceptions.ResponseError as exc:  # the reply is an error: it is read
        return exc


async def _read_async(conn: Any) -> Any:
    try:
        return await conn.read_response()
    except redis.exceptions.ResponseError as exc:
        return exc


def _absorb(sent: list[scripts.Call], out: list[Any], waited: Any,
            wait: tuple[Any, ...] | None) -> tuple[list[Any], int, list[int]]:
    """The results, the confirmations (-1: none asked, or nothing written), and the calls
    that NOSCRIPT refused."""
    again = [i for i, r in enumerate(out) if isinstance(r, redis.exceptions.NoScriptError)]
    acked = -1
    if wait is not None and len(again) < len(sent):  # something was written: WAIT counts
        acked = confirmed(waited, False)
    return out, acked, again


def _merge(results: list[Any], again: list[int], retried: tuple[list[Any], int],
           acked: int) -> int:
    for i, r in zip(again, retried[0], strict=True):
        results[i] = r
    if retried[1] < 0:
        return acked
    return retried[1] if acked < 0 else min(acked, retried[1])
