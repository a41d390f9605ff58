"""The worker's round trips on connections of their own (scheduler/redis/transport.py): the same
results as redis-py's pipeline, error replies in their place, a script cache flushed under
it, a connection killed under it, a round trip cancelled in the middle or past its timeout
(after which no reply of it is read as the next one's), and a connection class's own read
kept (Sentinel's)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

from scheduler.core.keys import Keys
from scheduler.redis import transport
from scheduler.redis.clients import async_redis, process_redis
from scheduler.scripts import calls as scripts


def _calls(client: Any, ns: str) -> list[scripts.Call]:
    """Two calls on a namespace that exists (client), each answering for a slot it lacks."""
    prefix = Keys(ns).prefix(0)
    return [scripts.heartbeat(prefix, 1, 1000, "w", [("nope:1", 1)]),
            scripts.complete(prefix, 1, 1000, "w", [scripts.Succeeded("nope:1", "1", 1, 2)])]


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_replies_are_the_pipelines_own(redis_url: str, ns: str, client: Any) -> None:
    async def scenario() -> tuple[list[Any], list[Any], int]:
        conn = async_redis(redis_url)
        calls = _calls(client, ns)
        plain = await scripts.run_async(conn, calls, raise_errors=False)
        transport.enable(conn)
        mine = await scripts.run_async(conn, calls, raise_errors=False)
        kept = len(transport._LINKS[conn.connection_pool].free)
        await transport.close(conn)
        await conn.aclose()
        return plain, mine, kept

    plain, mine, kept = _run(scenario())
    assert mine == plain
    assert kept == 1  # the round trip went over a connection of its own


def test_an_error_reply_takes_its_place_and_the_rest_still_run(redis_url: str, ns: str,
                                                                client: Any) -> None:
    async def scenario() -> list[Any]:
        conn = async_redis(redis_url)
        transport.enable(conn)
        pipe = conn.pipeline(transaction=False)
        pipe.set(f"{ns}:direct:a", "1")
        pipe.hset(f"{ns}:direct:a", "f", "v")  # WRONGTYPE
        pipe.get(f"{ns}:direct:a")
        out = await transport.execute(conn, pipe)
        await transport.close(conn)
        await conn.aclose()
        return out

    out = _run(scenario())
    assert out[0] is True and out[2] == b"1"
    assert isinstance(out[1], redis.exceptions.ResponseError) and "WRONGTYPE" in str(out[1])


def test_a_flushed_script_cache_is_loaded_again(ns: str, flushable: tuple[Any, Any, str]
                                                ) -> None:
    r, client, url = flushable

    async def scenario() -> list[Any]:
        conn = async_redis(url)
        transport.enable(conn)
        await scripts.run_async(conn, _calls(client, ns))
        r.script_flush()
        out = await scripts.run_async(conn, _calls(client, ns))
        await transport.close(conn)
        await conn.aclose()
        return out

    out = _run(scenario())
    assert all(isinstance(x, list) for x in out)


def _own_addr(conn: Any) -> str:
    [link] = transport._LINKS[conn.connection_pool].free
    host, port = link._writer.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


@pytest.mark.parametrize("retries", [0, 3])
def test_a_killed_connection_fails_or_is_retried_as_the_clients_policy_says(
        redis_url: str, ns: str, client: Any, r: redis.Redis, retries: int) -> None:
    async def scenario() -> Any:
        conn = async_redis(redis_url, retries=retries)
        transport.enable(conn)
        await scripts.run_async(conn, _calls(client, ns))
        r.client_kill(_own_addr(conn))
        try:
            return await scripts.run_async(conn, _calls(client, ns))
        except redis.exceptions.ConnectionError as exc:
            return exc
        finally:
            await transport.close(conn)
            await conn.aclose()

    out = _run(scenario())
    if retries:
        assert isinstance(out, list) and all(isinstance(x, list) for x in out)
    else:  # a worker's client: nothing sent twice behind its back
        assert isinstance(out, redis.exceptions.ConnectionError)


@pytest.mark.parametrize("how", ["cancelled", "past its socket timeout"])
def test_a_round_trip_cut_short_leaves_no_reply_for_the_next(redis_url: str, ns: str,
                                                             how: str) -> None:
    """Cancelled in flight, or past the socket timeout (one deadline for the whole round
    trip, raised as redis-py's TimeoutError): the reply still on its way is never read as
    the next round trip's."""
    key = f"{ns}:direct:list"

    async def scenario() -> list[Any]:
        conn = (process_redis(redis_url, 30) if how == "cancelled"
                else async_redis(redis_url, timeout_s=0.2, retries=0))
        transport.enable(conn)
        pipe = conn.pipeline(transaction=False)
        pipe.echo("first")
        pipe.blpop([key], timeout=0.3)  # its reply comes 0.3 s later, after the cut
        if how == "cancelled":
            task = asyncio.create_task(transport.execute(conn, pipe))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            with pytest.raises(redis.exceptions.TimeoutError):
                await transport.execute(conn, pipe)
        await asyncio.sleep(0.4)  # the blocked reply has been sent by now
        pipe = conn.pipeline(transaction=False)
        pipe.echo("next")
        out = await transport.execute(conn, pipe)
        await transport.close(conn)
        await conn.aclose()
        return out

    assert _run(scenario()) == [b"next"]


def test_a_connection_class_with_a_read_of_its_own_keeps_it(redis_url: str) -> None:
    """Sentinel's connection turns a READONLY reply into a disconnect in its read_response
    (its primary was demoted): the round trips here must read through it."""
    reads: list[bool] = []

    class Counted(redis.asyncio.Connection):
        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            reads.append(True)
            return await super().read_response(*args, **kwargs)

    async def scenario() -> list[Any]:
        base = async_redis(redis_url)
        kwargs = {**base.connection_pool.connection_kwargs}
        await base.aclose()
        conn = redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(
            connection_class=Counted, **kwargs))
        transport.enable(conn)
        pipe = conn.pipeline(transaction=False)
        pipe.echo("connects")  # the handshake's reads are not the round trip's
        await transport.execute(conn, pipe)
        reads.clear()
        pipe = conn.pipeline(transaction=False)
        pipe.echo("a")
        pipe.execute_command("NO-SUCH-COMMAND")
        pipe.echo("b")
        out = await transport.execute(conn, pipe)
        await transport.close(conn)
        await conn.aclose()
        return out

    out = _run(scenario())
    assert out[0] == b"a" and isinstance(out[1], redis.exceptions.ResponseError)
    assert out[2] == b"b" and len(reads) == 3


def test_close_disconnects_what_it_kept_once_the_last_user_is_done(redis_url: str, ns: str,
                                                                   client: Any) -> None:
    async def scenario() -> tuple[bool, bool]:
        conn = async_redis(redis_url)
        transport.enable(conn)
        transport.enable(conn)  # two workers on one client
        await scripts.run_async(conn, _calls(client, ns))
        [link] = transport._LINKS[conn.connection_pool].free
        await transport.close(conn)
        after_one = link.is_connected
        await transport.close(conn)
        after_both = link.is_connected
        await conn.aclose()
        return after_one, after_both

    assert _run(scenario()) == (True, False)


def test_more_round_trips_than_links_at_once_take_the_pipeline_path(redis_url: str,
                                                                    ns: str) -> None:
    """Commands collected in a Stack (no redis-py pipeline built) past MAX_LINKS round trips
    in flight go by the client's own pipeline, with the same replies."""
    key = f"{ns}:direct:idle"

    async def scenario() -> tuple[list[Any], int]:
        conn = async_redis(redis_url)
        transport.enable(conn)

        async def one(i: int) -> Any:
            stack = transport.stack(conn)
            assert isinstance(stack, transport.Stack)
            stack.execute_command("BLPOP", key, 0.2)  # holds its link while the rest start
            stack.execute_command("ECHO", str(i))
            return await transport.execute(conn, stack)

        out = await asyncio.gather(*(one(i) for i in range(transport.MAX_LINKS + 3)))
        kept = len(transport._LINKS[conn.connection_pool].free)
        await transport.close(conn)
        await conn.aclose()
        return list(out), kept

    out, kept = _run(scenario())
    assert out == [[None, str(i).encode()] for i in range(transport.MAX_LINKS + 3)]
    assert kept == transport.MAX_LINKS
