"""The adapter to redis-py's unpublished parts (scheduler/redis/redispy_internals.py): the
releases it was written for, and each helper against a real connection, so a redis-py that
moved a name fails here, by name, rather than somewhere in a worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.exceptions

import scheduler.redis.redispy_internals as internals
from scheduler.redis.clients import async_redis


def test_the_installed_redis_py_is_one_the_adapter_was_written_for() -> None:
    (lo_major, lo_minor), (hi_major, hi_minor) = internals.SUPPORTED
    assert internals.supported(), (
        f"redis-py {redis.__version__} is installed, but scheduler/redis/redispy_internals.py "
        f"was written for redis-py >={lo_major}.{lo_minor},<{hi_major}.{hi_minor}: check "
        f"each helper there against the new release (this file's tests), then widen SUPPORTED")


def test_the_supported_range_is_the_one_the_package_declares() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml")
                            .read_text())["project"]
    [dep] = [d for d in project["dependencies"] if d.startswith("redis[")]
    (lo_major, lo_minor), (hi_major, hi_minor) = internals.SUPPORTED
    assert f">={lo_major}.{lo_minor}" in dep and f"<{hi_major}" in dep, dep


async def _connection(redis_url: str) -> tuple[Any, Any]:
    client = async_redis(redis_url)
    pool: Any = client.connection_pool
    conn = pool.make_connection()
    await conn.connect()
    return client, conn


def test_one_write_then_every_reply_in_one_loop_errors_in_their_places(
        redis_url: str, ns: str) -> None:
    async def scenario() -> tuple[bool, list[Any]]:
        client, conn = await _connection(redis_url)
        stack: list[Any] = [(("SET", f"{ns}:a", "1"), {}), (("HSET", f"{ns}:a", "f", "v"), {}),
                            (("GET", f"{ns}:a"), {})]
        try:
            await internals.write(conn, conn.pack_commands([args for args, _ in stack]))
            at_once = internals.readable_at_once(conn, stack)
            out = await (internals.read_all(conn, 3) if at_once
                         else internals.read_each(conn, stack))
        finally:
            await conn.disconnect()
            await client.aclose()
        return at_once, out

    at_once, out = asyncio.run(scenario())
    assert at_once  # hiredis is installed: the fast read is the one taken
    assert out[0] in (b"OK", "OK", True)
    assert isinstance(out[1], redis.exceptions.ResponseError)  # WRONGTYPE, read in its place
    assert out[2] == b"1"


def test_each_read_gives_what_one_loop_gives(redis_url: str, ns: str) -> None:
    async def scenario() -> list[Any]:
        client, conn = await _connection(redis_url)
        stack: list[Any] = [(("SET", f"{ns}:b", "2"), {}), (("LPUSH", f"{ns}:b", "x"), {}),
                            (("GET", f"{ns}:b"), {})]
        try:
            await internals.write(conn, conn.pack_commands([args for args, _ in stack]))
            return await internals.read_each(conn, stack)
        finally:
            await conn.disconnect()
            await client.aclose()

    out = asyncio.run(scenario())
    assert isinstance(out[1], redis.exceptions.ResponseError) and out[2] == b"2"


def test_raw_replies_are_decoded_in_c_and_errors_stay_in_place(redis_url: str, ns: str) -> None:
    async def scenario() -> list[Any]:
        client, conn = await _connection(redis_url)
        data = (b"*4\r\n$4\r\nHSET\r\n" + b"$%d\r\n%s\r\n" % (len(f"{ns}:h"), f"{ns}:h".encode())
                + b"$1\r\nf\r\n$2\r\n\xc3\xa9\r\n"
                + b"*2\r\n$7\r\nHGETALL\r\n" + b"$%d\r\n%s\r\n" % (len(f"{ns}:h"),
                                                                   f"{ns}:h".encode())
                + b"*1\r\n$5\r\nNOSUCH\r\n")
        try:
            await internals.write(conn, data)
            return await internals.read_raw(conn, 3, "utf-8", "strict")
        finally:
            await conn.disconnect()
            await client.aclose()

    out = asyncio.run(scenario())
    assert out[0] == 1
    assert out[1] in (["f", "é"], {"f": "é"})
    assert isinstance(out[2], redis.exceptions.ResponseError)


def test_the_options_a_pipeline_consumes_are_not_passed_to_callbacks() -> None:
    from redis.client import EMPTY_RESPONSE, NEVER_DECODE

    options = {"keys": ["k"], EMPTY_RESPONSE: [], NEVER_DECODE: True, "withscores": True}
    assert internals.callback_options(options) == {"withscores": True}
    error = redis.exceptions.ResponseError("x")
    assert internals.empty_response(options, error) == []
    assert internals.empty_response({}, error) is error


@pytest.mark.parametrize("version,ok", [("5.2.1", False), ("5.3.0", True), ("8.2.0", True),
                                        ("9.0.0", False)])
def test_the_version_check_reads_major_and_minor(
        monkeypatch: pytest.MonkeyPatch, version: str, ok: bool) -> None:
    monkeypatch.setattr(redis, "__version__", version)
    assert internals.supported() is ok
