"""The asyncio connections pack commands with hiredis (scheduler/redis/packing.py): the same bytes
redis-py's own packing sends, the same error for what cannot be sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions
from redis.asyncio.connection import Connection

from scheduler.redis import packing
from scheduler.redis.clients import async_redis, process_redis

COMMANDS: list[tuple[Any, ...]] = [
    ("SET", "k", "v"),
    ("SET", b"k", b"\x00\xff binary"),
    ("ZADD", "sched:{s03}:retain", 1733212345678, "a:1", 0.1, "b:2", -3, "c", 1e20, "d"),
    ("SET", "k", 2 ** 70),
    ("SET", "k", 1 / 3),
    ("SET", "unicode", "é ✓"),
    ("SET", "k", bytearray(b"array")),
    ("SET", "k", memoryview(b"view")),
    ("CONFIG GET", "maxmemory"),
    (b"CLIENT SETNAME", "x"),
    ("EVALSHA", "a" * 40, 1, "sched:{s00}:", *(f"slot-{i}" for i in range(300))),
    ("SET", "big", "x" * 200_000),  # past redis-py's buffer cutoff: it sends it in chunks
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: str(a[0]))
def test_the_bytes_are_redis_pys(args: tuple[Any, ...]) -> None:
    ours = b"".join(packing.fast(Connection)().pack_command(*args))
    assert ours == b"".join(Connection().pack_command(*args))


@pytest.mark.parametrize("bad", [True, None, object(), [1]])
def test_what_cannot_be_sent_raises_data_error(bad: Any) -> None:
    with pytest.raises(redis.exceptions.DataError):
        packing.fast(Connection)().pack_command("SET", "k", bad)


def test_another_encoding_keeps_redis_pys_packing() -> None:
    conn = packing.fast(Connection)(encoding="latin-1")
    assert b"".join(conn.pack_command("SET", "k", "é")) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n\xe9\r\n"


def test_the_clients_of_ours_use_it_and_round_trip(redis_url: str) -> None:
    async def scenario() -> None:
        for client in (async_redis(redis_url), process_redis(redis_url, 30.0)):
            try:
                pool: Any = getattr(client, "connection_pool", None)
                if pool is not None:  # a cluster's nodes go through cluster.adopt's clients
                    assert issubclass(pool.connection_class, packing._HiredisPacked)
                await client.set("packing:k", memoryview(b"value \xe2\x9c\x93"))
                assert await client.get("packing:k") == "value ✓".encode()
                await client.delete("packing:k")
            finally:
                await client.aclose()

    asyncio.run(scenario())


def test_fast_is_made_once_per_class() -> None:
    assert packing.fast(Connection) is packing.fast(Connection)
    assert packing.fast(packing.fast(Connection)) is packing.fast(Connection)
    assert issubclass(packing.fast(redis.asyncio.connection.SSLConnection),
                      redis.asyncio.connection.SSLConnection)
