"""The snapshotter's read of slot and job hashes (scheduler/history/reads.py): the raw MULTI and
redis-py's transaction pipeline read the same state, with the events stream's newest id as
its version; a hash that is gone reads empty; an error reply, or a connection killed under
the raw read, fails the read and the next one works. Runs on a Redis Cluster too (slow)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

from scheduler import Client
from scheduler.core.keys import Keys, shard_of
from scheduler.history import reads as hash_read
from scheduler.history.intake import version_of
from scheduler.history.store import text_hash
from scheduler.redis import cluster, transport
from scheduler.redis.clients import async_redis


def _reads(client: Client, ns: str, ids: list[str]) -> list[hash_read.Read]:
    keys = Keys(ns)
    by_shard: dict[int, tuple[list[str], list[str]]] = {}
    for job_id in ids:
        slots, jobs = by_shard.setdefault(shard_of(job_id, client.shards), ([], []))
        slots.append(client.slots(job_id)[0].slot_id)
        jobs.append(job_id)
    by_shard.setdefault(0, ([], []))[0].append("gone:1")  # no such slot
    return [hash_read.Read(keys.prefix(s), slots, jobs) for s, (slots, jobs) in
            sorted(by_shard.items())]


def _text(states: list[hash_read.State]) -> list[Any]:
    return [(version_of(s.top), [text_hash(h) for h in s.slots], [text_hash(h) for h in s.jobs])
            for s in states]


def test_raw_and_pipeline_reads_agree_and_carry_the_streams_newest_id(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    with Client(redis_url, ns, shards=2) as client:
        ids = client.submit_many([{"task": "t", "payload": i} for i in range(6)])
        reads = _reads(client, ns, ids)

    async def scenario() -> tuple[list[Any], list[Any], bool]:
        conn = async_redis(redis_url)
        try:
            plain = await hash_read.read(conn, reads)
            hash_read.start(conn)
            raw = await hash_read.read(conn, reads)
            nodes = hash_read._NODES.get(conn, [conn])
            went_raw = all(transport.enabled(n) for n in nodes) and bool(nodes)
            await hash_read.stop(conn)
            return _text(plain), _text(raw), went_raw
        finally:
            await conn.aclose()

    plain, raw, went_raw = asyncio.run(scenario())
    assert raw == plain and went_raw
    for read, (top, slots, jobs) in zip(reads, raw, strict=True):
        newest = r.xrevrange(read.prefix + "events", count=1)
        assert top == version_of(newest[0][0] if newest else b"0-0")
        for slot_id, h in zip(read.slots, slots, strict=True):
            assert h == ({} if slot_id == "gone:1" else {**h, "status": "queued"})
        assert all(h["task"] == "t" for h in jobs)
    assert sum(len(s) for _, s, _ in raw) == 7


@pytest.mark.parametrize("raw", [False, True])
def test_an_error_reply_fails_the_read(redis_url: str, ns: str, r: redis.Redis,
                                       raw: bool) -> None:
    prefix = Keys(ns).prefix(0)
    r.set(prefix + "slot:x:1", "not a hash")

    async def scenario() -> BaseException | None:
        conn = async_redis(redis_url)
        if raw:
            hash_read.start(conn)
        try:
            await hash_read.read(conn, [hash_read.Read(prefix, ["x:1"], [])])
        except redis.exceptions.ResponseError as exc:
            return exc
        finally:
            await hash_read.stop(conn)
            await conn.aclose()
        return None

    assert "WRONGTYPE" in str(asyncio.run(scenario()))


def test_a_connection_killed_under_the_raw_read_fails_it_and_the_next_works(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    if cluster.is_cluster(async_redis(redis_url)):
        pytest.skip("the kill names one node's connection")
    prefix = Keys(ns).prefix(0)
    r.hset(prefix + "slot:a:1", "status", "queued")

    async def scenario() -> tuple[Any, Any]:
        conn = async_redis(redis_url)
        hash_read.start(conn)
        try:
            read = [hash_read.Read(prefix, ["a:1"], [])]
            await hash_read.read(conn, read)
            [link] = transport._LINKS[conn.connection_pool].raw_free
            host, port = link._writer.get_extra_info("sockname")[:2]
            r.client_kill(f"{host}:{port}")
            try:
                first: Any = await hash_read.read(conn, read)
            except redis.exceptions.ConnectionError as exc:
                first = exc
            return first, await hash_read.read(conn, read)
        finally:
            await hash_read.stop(conn)
            await conn.aclose()

    first, second = asyncio.run(scenario())
    assert isinstance(first, redis.exceptions.ConnectionError)
    assert text_hash(second[0].slots[0]) == {"status": "queued"}
