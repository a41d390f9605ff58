"""Many tenants on one queue, end to end: workers started first, then keyed jobs submitted
with the SDK; what the handlers did (their own start and end times, kept in this process, not
in the Redis under test) is the ground truth. Per-key limits exact across workers, keys in
turns so a flood of one key leaves the others their share, no head-of-line blocking."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from helpers import running_workers
from scheduler import AsyncClient, Context, JobSpec, Registry
from scheduler.worker.worker import Worker

pytestmark = pytest.mark.slow

Span = tuple[str, float, float]  # key, start, end (time.monotonic of this process)


def slow_key_registry() -> tuple[Registry, list[Span]]:
    """A `tenant.work` handler that records each run's span: 1.5 s for key `slow`, 10 ms
    for any other."""
    spans: list[Span] = []
    registry = Registry()

    @registry.task("tenant.work")
    async def work(ctx: Context, payload: Any) -> None:
        start = time.monotonic()
        await asyncio.sleep(1.5 if payload["key"] == "slow" else 0.01)
        spans.append((payload["key"], start, time.monotonic()))

    return registry, spans


async def wait_for(done: Callable[[], bool], timeout: float, what: str = "the runs") -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def set_limit(client: AsyncClient, queue: str, **limit: Any) -> None:
    """Set the queue's limit on workers already running: it holds from the next claim (the
    claim scripts read it: scheduler/core/limits.py), so nothing is waited for."""
    await client.create_namespace()
    await client.set_queue_limit(queue, **limit)


def most_at_once(spans: list[Span]) -> dict[str, int]:
    """Per key, the most runs that overlapped, from the handlers' own times (an end at the
    same instant as a start counts first)."""
    edges: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for key, start, end in spans:
        edges[key] += [(start, 1), (end, -1)]
    out = {}
    for key, points in edges.items():
        now = peak = 0
        for _, step in sorted(points, key=lambda p: (p[0], p[1])):
            now += step
            peak = max(peak, now)
        out[key] = peak
    return out


def sleeping(spans: list[Span], seconds: float) -> Registry:
    registry = Registry()

    @registry.task("tenant.work")
    async def work(ctx: Context, payload: Any) -> None:
        start = time.monotonic()
        await asyncio.sleep(seconds)
        spans.append((payload["key"], start, time.monotonic()))

    return registry


def test_a_per_key_limit_holds_across_workers_and_every_key_reaches_it(
        redis_url: str, ns: str) -> None:
    """Per-key limit 2; 3 workers at concurrency 50; 20 keys x 30 jobs of 0.2 s. No key ever
    runs more than 2 at once, every key reaches 2, and the whole run takes at most 1.3x the
    floor the limit allows (30 / 2 x 0.2 s = 3 s per key, the keys side by side)."""
    keys, per_key, limit, seconds = 20, 30, 2, 0.2
    spans: list[Span] = []

    async def main() -> None:
        async with running_workers(redis_url, ns, sleeping(spans, seconds), 3, concurrency=50,
                                   queues=("tenants",)):
            async with AsyncClient(redis_url, ns) as client:
                await set_limit(client, "tenants", per_key_concurrency=limit)
                await client.submit_many([
                    JobSpec(task="tenant.work", payload={"key": f"tenant-{k}"},
                            queue="tenants", concurrency_key=f"tenant-{k}")
                    for _ in range(per_key) for k in range(keys)])
            await wait_for(lambda: len(spans) == keys * per_key, timeout=60)

    asyncio.run(main())
    peaks = most_at_once(spans)
    assert max(peaks.values()) <= limit, peaks
    assert set(peaks.values()) == {limit}, peaks
    floor = per_key / limit * seconds
    took = max(e for _, _, e in spans) - min(s for _, s, _ in spans)
    print(f"per-key limit {limit}: {took:.2f} s for a floor of {floor:.2f} s "
          f"({took / floor:.3f}x)")
    assert took <= 1.3 * floor, f"{took:.2f} s for a floor of {floor:.2f} s"


def test_a_busy_key_spreads_over_the_workers_up_to_its_limit(redis_url: str, ns: str) -> None:
    """One key, limit 6, 3 workers with room to spare: a take starts at most the worker's
    share of the limit (2), so each worker runs its part of the key, rather than the first
    to ask holding all 6 permits and taking each back as its runs end."""
    jobs, limit = 36, 6
    who: list[int] = []
    registry = Registry()
    workers: list[Worker] = []

    @registry.task("tenant.work")
    async def work(ctx: Context, payload: Any) -> None:
        who.append(next(i for i, w in enumerate(workers) if ctx.slot_id in w.running))
        await asyncio.sleep(0.1)

    async def main() -> None:
        async with running_workers(redis_url, ns, registry, 3, concurrency=20,
                                   queues=("tenants",)) as started:
            workers.extend(started)
            async with AsyncClient(redis_url, ns) as client:
                await set_limit(client, "tenants", per_key_concurrency=limit)
                for _ in range(2):  # each knows the others (its next beat would tell it):
                    for w in workers:  # the first round writes every presence, the second reads
                        await w.heartbeat.run_once()
                assert [w.heartbeat.live for w in workers] == [3, 3, 3]
                await client.submit_many([
                    JobSpec(task="tenant.work", queue="tenants", concurrency_key="busy")
                    for _ in range(jobs)])
            await wait_for(lambda: len(who) == jobs, timeout=60)

    asyncio.run(main())
    counts = [who.count(i) for i in range(3)]
    assert min(counts) >= jobs // 6, counts  # an even share is 12


def test_a_key_at_its_limit_does_not_hold_up_other_keys(redis_url: str, ns: str) -> None:
    """Key `slow` at its limit of 1 with long runs queued ahead: the other keys' jobs,
    submitted after all of them, run to the end while `slow`'s first run is still going."""
    registry, spans = slow_key_registry()

    async def main() -> None:
        async with running_workers(redis_url, ns, registry, 1, concurrency=10,
                                   queues=("tenants",)):
            async with AsyncClient(redis_url, ns) as client:
                await set_limit(client, "tenants", per_key_concurrency=1)
                await client.submit_many([
                    JobSpec(task="tenant.work", payload={"key": "slow"}, queue="tenants",
                            concurrency_key="slow") for _ in range(5)])
                await client.submit_many([
                    JobSpec(task="tenant.work", payload={"key": f"k{i % 4}"},
                            queue="tenants", concurrency_key=f"k{i % 4}") for i in range(40)])
            await wait_for(lambda: sum(1 for s in spans if s[0] != "slow") == 40, timeout=20)
            assert not [s for s in spans if s[0] == "slow"], "the slow key's first run ended"

    asyncio.run(main())


def test_a_flood_of_one_key_leaves_the_others_their_turns(redis_url: str, ns: str) -> None:
    """Key A submits 20,000 no-op jobs, then key B 100: B's 100 all start before A's first
    2,000 have (one worker, default concurrency), and B's p99 start lag is under 1 s."""
    order: list[str] = []
    lags: list[float] = []
    registry = Registry()

    @registry.task("tenant.noop")
    async def noop(ctx: Context, payload: Any) -> None:
        order.append(payload)
        if payload == "B":
            lags.append(time.time() * 1000 - ctx.fire_ms)

    async def main() -> None:
        async with running_workers(redis_url, ns, registry, 1):
            async with AsyncClient(redis_url, ns) as client:
                for _ in range(4):
                    await client.submit_many([
                        JobSpec(task="tenant.noop", payload="A", concurrency_key="A")
                        for _ in range(5_000)])
                await client.submit_many([
                    JobSpec(task="tenant.noop", payload="B", concurrency_key="B")
                    for _ in range(100)])
            await wait_for(lambda: len(lags) == 100, timeout=120)

    asyncio.run(main())
    last_b = max(i for i, key in enumerate(order) if key == "B")
    a_before = order[:last_b].count("A")
    assert a_before < 2_000, f"{a_before} of A's runs started before B's last"
    lags.sort()
    p99 = lags[98]
    assert p99 < 1000, f"B's p99 start lag {p99:.0f} ms"


def test_a_queue_wide_limit_and_a_per_key_limit_hold_together(redis_url: str, ns: str) -> None:
    spans: list[Span] = []

    async def main() -> None:
        async with running_workers(redis_url, ns, sleeping(spans, 0.1), 2, concurrency=20,
                                   queues=("tenants",)):
            async with AsyncClient(redis_url, ns) as client:
                await set_limit(client, "tenants", concurrency=3, per_key_concurrency=2)
                await client.submit_many([
                    JobSpec(task="tenant.work", payload={"key": f"k{i % 3}"}, queue="tenants",
                            concurrency_key=f"k{i % 3}") for i in range(30)])
            await wait_for(lambda: len(spans) == 30, timeout=30)

    asyncio.run(main())
    assert max(most_at_once(spans).values()) <= 2
    everything = most_at_once([("all", s, e) for _, s, e in spans])["all"]
    assert everything == 3


def test_a_per_key_rate_spaces_one_key_s_starts_and_leaves_the_others_alone(
        redis_url: str, ns: str) -> None:
    """10 starts per second per key: key `busy`'s 15 jobs take 1.4 s or more to start (a
    token each 100 ms after the first), while key `calm`'s 3 all start in its first 0.5 s."""
    spans: list[Span] = []

    async def main() -> None:
        async with running_workers(redis_url, ns, sleeping(spans, 0), 1, concurrency=20,
                                   queues=("tenants",)):
            async with AsyncClient(redis_url, ns) as client:
                await set_limit(client, "tenants", per_key_rate=10)
                await client.submit_many(
                    [JobSpec(task="tenant.work", payload={"key": "busy"}, queue="tenants",
                             concurrency_key="busy") for _ in range(15)]
                    + [JobSpec(task="tenant.work", payload={"key": "calm"}, queue="tenants",
                               concurrency_key="calm") for _ in range(3)])
            await wait_for(lambda: len(spans) == 18, timeout=30)

    asyncio.run(main())
    busy = sorted(s for key, s, _ in spans if key == "busy")
    calm = sorted(s for key, s, _ in spans if key == "calm")
    assert busy[-1] - busy[0] >= 1.3, busy[-1] - busy[0]
    assert calm[-1] - busy[0] < 0.5


def test_jobs_without_a_key_in_a_keyed_queue_run_beside_the_keyed_ones(
        redis_url: str, ns: str) -> None:
    """A queue with a per-key limit also holds jobs without a key: they are claimed from the
    queue's streams beside the keyed ones, outside the turns and the limit, while a key
    sits at its limit; every job of both kinds runs."""
    registry, spans = slow_key_registry()

    async def main() -> None:
        async with running_workers(redis_url, ns, registry, 1, concurrency=10,
                                   queues=("tenants",)):
            async with AsyncClient(redis_url, ns) as client:
                await set_limit(client, "tenants", per_key_concurrency=1)
                await client.submit_many([
                    JobSpec(task="tenant.work", payload={"key": "slow"}, queue="tenants",
                            concurrency_key="slow") for _ in range(2)])
                await client.submit_many([
                    JobSpec(task="tenant.work", payload={"key": "none"}, queue="tenants")
                    for _ in range(30)])
            await wait_for(lambda: sum(1 for s in spans if s[0] == "none") == 30, timeout=20)
            assert not [s for s in spans if s[0] == "slow"], "the slow key's first run ended"
            await wait_for(lambda: len(spans) == 32, timeout=20)

    asyncio.run(main())
    assert most_at_once(spans)["slow"] == 1
    assert most_at_once(spans)["none"] > 1  # no per-key limit on jobs without a key
