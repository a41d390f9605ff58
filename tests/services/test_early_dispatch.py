"""Slots dispatched ahead of their time (promoter.py, reader.py) start at their time, never
before: measured by the handlers' own clock, outside Redis (Redis TIME is this host's clock)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from conftest import is_cluster_url
from scheduler import Client, Context, Registry
from scheduler.connection import async_redis
from scheduler.keys import Keys
from scheduler.node import NodeConfig, SchedulerNode
from scheduler.worker import Worker, WorkerConfig


def _redis_ms(client: Client) -> int:
    return client.now_ms()


def _registry(started: dict[str, tuple[float, int]]) -> Registry:
    registry = Registry()

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        started[ctx.slot_id] = (time.time() * 1000, ctx.fire_ms)

    return registry


def _submit_at(client: Client, n: int, lead_ms: int) -> tuple[int, list[str]]:
    """n jobs due together lead_ms from now: (their fire time, their ids)."""
    fire = _redis_ms(client) + lead_ms
    at = datetime.fromtimestamp(fire / 1000, UTC)
    return fire, client.submit_many([{"task": "t", "payload": i, "at": at} for i in range(n)])


async def _until(done: Any, timeout: float, *tasks: asyncio.Task[Any]) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for task in tasks:
            if task.done():
                task.result()
        await asyncio.sleep(0.005)


def test_slots_due_soon_are_dispatched_before_their_time_and_start_at_it(
        redis_url: str, ns: str) -> None:
    started: dict[str, tuple[float, int]] = {}
    n = 400
    with Client(redis_url, ns) as client:
        fire, ids = _submit_at(client, n, 1500)

        async def main() -> None:
            conns = [async_redis(redis_url) for _ in range(3)]
            node = SchedulerNode(conns[0], namespace=ns, config=NodeConfig(promote_ahead_s=2))
            workers = [Worker(c, _registry(started), namespace=ns,
                              config=WorkerConfig(block_ms=1000)) for c in conns[1:]]
            tasks = [asyncio.create_task(s.run()) for s in (node, *workers)]
            try:
                # Every slot leaves `due` for the workers' hands before its time...
                await _until(lambda: sum(w.reader.in_hand() for w in workers) == n, 5, *tasks)
                assert _redis_ms(client) < fire and not started
                await _until(lambda: len(started) == n, 10, *tasks)
            finally:
                for s in (node, *workers):
                    s.stop()
                await asyncio.gather(*tasks)
                for c in conns:
                    await c.aclose()

        asyncio.run(main())
        slots = [s for j in ids for s in client.slots(j)]
    lags = sorted(at - fire_ms for at, fire_ms in started.values())
    print(f"start lag by the handlers' clock: min {lags[0]:.1f} ms, max {lags[-1]:.1f} ms")
    assert {fire_ms for _, fire_ms in started.values()} == {fire}
    assert lags[0] >= 0, f"{sum(1 for x in lags if x < 0)} started before their time"
    assert lags[-1] < 1000
    assert {s.status.value for s in slots} == {"succeeded"}


def test_held_entries_handed_back_by_a_stopping_worker_still_wait_for_their_time(
        redis_url: str, ns: str) -> None:
    """A stopping worker requeues what it holds under new entries that carry no time: the
    next worker's claim is refused until the slot's own not-before time (claim.lua's guard),
    and it holds them until then."""
    started: dict[str, tuple[float, int]] = {}
    n = 50
    with Client(redis_url, ns) as client:
        fire, ids = _submit_at(client, n, 2000)

        async def main() -> None:
            conns = [async_redis(redis_url) for _ in range(3)]
            node = SchedulerNode(conns[0], namespace=ns, config=NodeConfig(promote_ahead_s=3))
            first = Worker(conns[1], _registry(started), namespace=ns,
                           config=WorkerConfig(block_ms=1000))
            tasks = [asyncio.create_task(s.run()) for s in (node, first)]
            second = None
            try:
                await _until(lambda: first.reader.in_hand() == n, 5, *tasks)
                first.stop()
                await tasks.pop()
                assert _redis_ms(client) < fire - 500, "too slow to test before the fire time"
                second = Worker(conns[2], _registry(started), namespace=ns,
                                config=WorkerConfig(block_ms=1000))
                tasks.append(asyncio.create_task(second.run()))
                await _until(lambda: len(second.reader.early) == n, 3, *tasks)
                assert not started
                await _until(lambda: len(started) == n, 10, *tasks)
            finally:
                for s in (node, first, *([second] if second else [])):
                    s.stop()
                await asyncio.gather(*tasks)
                for c in conns:
                    await c.aclose()

        asyncio.run(main())
        assert {s.status.value for j in ids for s in client.slots(j)} == {"succeeded"}
    lags = sorted(at - fire_ms for at, fire_ms in started.values())
    assert lags[0] >= 0, f"{sum(1 for x in lags if x < 0)} started before their time"


def test_keys_of_held_slots(redis_url: str, ns: str) -> None:
    """The not-before mark lives on the slot hash, where claim.lua reads it."""
    if is_cluster_url(redis_url):
        return
    with Client(redis_url, ns, shards=1) as client:
        fire, [job] = _submit_at(client, 1, 5000)
        slot = client.slots(job)[0]

        async def promote() -> None:
            conn = async_redis(redis_url)
            node = SchedulerNode(conn, namespace=ns, config=NodeConfig(promote_ahead_s=7.5))
            await node.setup()
            node.promoter.prefixes = [Keys(ns).prefix(0)]
            await node.promoter.run_once()
            await conn.aclose()

        asyncio.run(promote())
        key = Keys(ns).slot(0, slot.slot_id)
        assert client.redis.hget(key, "nb") == str(fire).encode()
        assert client.redis.hget(key, "status") == b"queued"
