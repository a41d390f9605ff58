"""A worker reads no more than it can start soon (Claims.read_ahead, slots.Pace): a burst
submitted while several workers wait is spread over them, not held by the first to read."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from helpers import running_workers, until
from scheduler import Client, Context, Registry
from scheduler.worker.slots import Pace
from scheduler.worker.worker import Worker


def test_the_pace_follows_the_runs_that_end_and_forgets_a_pause() -> None:
    pace = Pace()
    assert pace.ahead(100.0) == 0  # nothing measured yet
    for step in range(1, 41):  # 1,000 runs a second for 2 s, measured every 50 ms
        pace.ended += 50
        pace.ahead(100.0 + step * 0.05)
    assert 950 <= pace.rate <= 1000
    assert pace.ahead(102.0, horizon_s=0.2) == int(pace.rate * 0.2)
    pace.ahead(102.01)  # within a tick: not measured again
    assert 950 <= pace.rate <= 1000
    pace.ahead(104.0)  # two seconds without an end
    assert pace.rate < 5


def test_a_burst_is_shared_by_the_workers_waiting_for_it(redis_url: str, ns: str) -> None:
    """Two workers of 4 run slots wait; a burst of 20 ms jobs arrives in one submit_many.
    Each runs about half: the first to read takes its free slots and what it ends soon, and
    leaves the rest in the stream (reading a whole batch, it would run nearly all)."""
    jobs = 200
    registry = Registry()
    ran_by: Counter[int] = Counter()
    most_held = [0, 0]
    workers: list[Worker] = []

    @registry.task("burst")
    async def burst(ctx: Context, payload: Any) -> None:
        for i, w in enumerate(workers):
            most_held[i] = max(most_held[i], len(w.running) + len(w.reader.backlog))
            if ctx.slot_id in w.running:
                ran_by[i] += 1
        await asyncio.sleep(0.02)

    async def scenario() -> None:
        with Client(redis_url, ns) as client:
            client.create_namespace()
        async with running_workers(redis_url, ns, registry, 2, concurrency=4,
                                   block_ms=200) as started:
            workers.extend(started)

            async def registered() -> bool:
                return all(w.shards for w in workers)

            await until("both workers set up", registered)
            await asyncio.sleep(0.3)  # both in a blocking read
            with Client(redis_url, ns) as client:
                await asyncio.to_thread(client.submit_many,
                                        [{"task": "burst"} for _ in range(jobs)])

            async def all_ran() -> bool:
                return sum(ran_by.values()) == jobs

            await until("every run", all_ran, timeout=60)

    asyncio.run(scenario())
    print(f"runs per worker {dict(ran_by)}, most held {most_held}")
    assert sum(ran_by.values()) == jobs
    assert all(0.35 * jobs <= ran_by[i] <= 0.65 * jobs for i in range(2)), ran_by
    # Under twice the target (four free slots and what four slots of 20 ms jobs end in the
    # horizon, 40) and four runs: never a batch, nor the whole burst.
    assert max(most_held) < 2 * (4 + 40) + 4, most_held


@pytest.mark.slow  # it starts the pools' child processes
def test_a_worker_whose_tasks_run_in_its_process_pool_claims_what_its_children_can_start(
        redis_url: str, ns: str) -> None:
    """Two workers of 50 run slots and one process-pool child each: a burst of 30 runs of
    0.1 s is shared, as each claims no more than its child can start now or next (claiming
    up to its run slots, the first to read would hold them all, waiting for its one child)."""
    import pool_tasks

    jobs = 30
    ran_by: Counter[int] = Counter()

    async def scenario() -> None:
        with Client(redis_url, ns) as client:
            client.create_namespace()
            async with running_workers(redis_url, ns, pool_tasks.registry, 2, concurrency=50,
                                       process_pool=1, block_ms=200) as workers:

                async def ready() -> bool:
                    return all(w.shards and w.pool is not None for w in workers)

                await until("both workers and their pools up", ready, timeout=60)
                await asyncio.sleep(0.3)  # both in a blocking read
                ids = await asyncio.to_thread(client.submit_many,
                                              [{"task": "pool.nap", "payload": 0.1}] * jobs)

                # A result waits for its run; a sync client, off the workers' event loop.
                pids = await asyncio.to_thread(lambda: [client.result(i, 60) for i in ids])
                child_of = {pid: i for i, w in enumerate(workers) if w.pool is not None
                            for pid in w.pool.pids()}
                ran_by.update(child_of[pid] for pid in pids)

    asyncio.run(scenario())
    print(f"runs per worker {dict(ran_by)}")
    assert sum(ran_by.values()) == jobs
    assert all(0.35 * jobs <= ran_by[i] <= 0.65 * jobs for i in range(2)), ran_by
