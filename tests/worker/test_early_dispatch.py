"""Slots dispatched ahead of their time (promoter.py, reader.py) start at their time, never
before: measured by the handlers' own clock, outside Redis (Redis TIME is this host's clock)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from conftest import is_cluster_url
from scheduler import Client, Context, Registry
from scheduler.core.keys import Keys
from scheduler.node.node import NodeConfig, SchedulerNode
from scheduler.redis.clients import async_redis
from scheduler.worker.worker import Worker, WorkerConfig


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


class _Fleet:
    """A node and workers on their own connections, run until the test leaves the block."""

    def __init__(self, redis_url: str, ns: str, ahead_s: float,
                 started: dict[str, tuple[float, int]]) -> None:
        self.url, self.ns, self.started = redis_url, ns, started
        self.conns = [async_redis(redis_url)]
        self.services: list[Any] = [SchedulerNode(self.conns[0], namespace=ns,
                                                  config=NodeConfig(promote_ahead_s=ahead_s))]
        self.tasks = [asyncio.create_task(self.services[0].run())]

    def worker(self) -> Worker:
        self.conns.append(async_redis(self.url))
        w = Worker(self.conns[-1], _registry(self.started), namespace=self.ns,
                   config=WorkerConfig(block_ms=1000))
        self.services.append(w)
        self.tasks.append(asyncio.create_task(w.run()))
        return w

    async def until(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "timed out"
            for task in self.tasks:
                if task.done():
                    task.result()
            await asyncio.sleep(0.005)

    async def stop(self, service: Any) -> None:
        service.stop()
        await self.tasks.pop(self.services.index(service))
        self.services.remove(service)

    async def __aenter__(self) -> _Fleet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for s in self.services:
            s.stop()
        await asyncio.gather(*self.tasks)
        for c in self.conns:
            await c.aclose()


def test_slots_due_soon_are_dispatched_before_their_time_and_start_at_it(
        redis_url: str, ns: str) -> None:
    started: dict[str, tuple[float, int]] = {}
    n = 400
    with Client(redis_url, ns) as client:
        fire, ids = _submit_at(client, n, 1500)

        async def main() -> None:
            async with _Fleet(redis_url, ns, 2, started) as fleet:
                workers = [fleet.worker(), fleet.worker()]
                # Every slot leaves `due` for the workers' hands before its time...
                await fleet.until(lambda: sum(w.reader.in_hand() for w in workers) == n, 5)
                assert _redis_ms(client) < fire and not started
                await fleet.until(lambda: len(started) == n, 10)

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
            async with _Fleet(redis_url, ns, 3, started) as fleet:
                first = fleet.worker()
                await fleet.until(lambda: first.reader.in_hand() == n, 5)
                await fleet.stop(first)
                assert _redis_ms(client) < fire - 500, "too slow to test before the fire time"
                second = fleet.worker()
                await fleet.until(lambda: len(second.reader.early) == n, 3)
                assert not started
                await fleet.until(lambda: len(started) == n, 10)

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


def test_jobs_due_now_start_on_time_while_held_entries_keep_falling_due(
        redis_url: str, ns: str) -> None:
    """Delayed jobs due every 15 ms for 3 s keep the worker holding entries due within the
    next 100 ms the whole time; jobs submitted for now meanwhile are read and started at
    once, not after the held run ends (on a Cluster, each shard keeps its read in flight)."""
    started: dict[str, tuple[float, int]] = {}
    with Client(redis_url, ns) as client:
        # Soon enough that the node's first pass holds the run's start (promote_ahead_s=2).
        first = _redis_ms(client) + 500
        delayed = client.submit_many([
            {"task": "t", "payload": i, "at": datetime.fromtimestamp((first + 15 * i) / 1000, UTC)}
            for i in range(200)])

        async def main() -> list[str]:
            async with _Fleet(redis_url, ns, 2, started) as fleet:
                fleet.worker()
                await fleet.until(lambda: len(started) > 0, 5)
                now: list[str] = []
                for i in range(50):  # through the held run: one due now every 50 ms
                    now += await asyncio.to_thread(client.submit_many,
                                                   [{"task": "t", "payload": -i}])
                    await asyncio.sleep(0.05)
                await fleet.until(lambda: len(started) == len(delayed) + len(now), 15)
                return now

        now = asyncio.run(main())
        slots = {s.slot_id for j in now for s in client.slots(j)}
    lags = sorted(at - fire_ms for slot, (at, fire_ms) in started.items() if slot in slots)
    print(f"due-now start lag by the handlers' clock: median {lags[len(lags) // 2]:.1f} ms, "
          f"max {lags[-1]:.1f} ms")
    assert len(lags) == 50 and lags[-1] < 500, lags[-5:]
