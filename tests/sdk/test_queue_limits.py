"""Queue-wide limits: at most N runs of a queue at once across every worker, at most R starts
a second, slots over the limit left queued (scheduler/worker/limiter.py, lua/acquire.lua)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from helpers import run_until, running, sched, sched_process, until
from scheduler import (
    AsyncClient,
    Client,
    Context,
    JobSpec,
    Outcome,
    QueueLimit,
    Registry,
    SlotStatus,
)
from scheduler.core import limits
from scheduler.core.errors import ValidationError
from scheduler.core.keys import DISPATCH_GROUP, Keys
from scheduler.redis.clients import async_redis
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Acquired
from scheduler.testing import TestScheduler
from scheduler.worker import limiter
from scheduler.worker.worker import Worker, WorkerConfig


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.slow
def test_a_concurrency_limit_holds_across_workers(redis_url: str, ns: str) -> None:
    """The acceptance check: 3 workers of concurrency 50, limit 4, 60 jobs of 0.3 s: never more
    than 4 running (from the handlers' own start and end times), all complete."""
    registry = Registry()
    spans: list[tuple[float, float]] = []

    @registry.task("slow")
    async def slow(ctx: Context, payload: Any) -> None:
        start = time.monotonic()
        await asyncio.sleep(0.3)
        spans.append((start, time.monotonic()))

    with Client(redis_url, ns) as client:
        client.set_queue_limit("default", concurrency=4)
        ids = client.submit_many([JobSpec(task="slow") for _ in range(60)])
        began = time.monotonic()
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(spans) == 60, workers=3,
                              concurrency=50, timeout=60))
        took = time.monotonic() - began
        assert all(client.slots(j)[0].status is SlotStatus.SUCCEEDED for j in ids)
    print(f"most at once {_most_at_once(spans)}, 60 jobs in {took:.2f} s")
    assert _most_at_once(spans) <= 4, _most_at_once(spans)
    # The limit is used, not just respected: 60 x 0.3 s / 4 is 4.5 s.
    assert _most_at_once(spans) == 4 and took < 12, took


@pytest.mark.slow
def test_a_rate_limit_holds_over_ten_seconds(redis_url: str, ns: str) -> None:
    """The acceptance check: a rate limit of 20/s holds within 10% over 10 s."""
    registry = Registry()
    starts: list[float] = []

    @registry.task("quick")
    async def quick(ctx: Context, payload: Any) -> None:
        starts.append(time.monotonic())

    with Client(redis_url, ns) as client:
        client.set_queue_limit("default", rate=20)
        client.submit_many([JobSpec(task="quick") for _ in range(400)])
        # Done once the count of the first 10 s is known: 10 s have passed since the first
        # start, or more than the bound allows have started (the check fails then).
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(starts) > 220 or (
            bool(starts) and time.monotonic() >= starts[0] + 10.05), workers=2,
            concurrency=100, timeout=60))
    first = starts[0]
    in_ten = sum(1 for t in starts if t < first + 10)
    print(f"{in_ten} starts in the first 10 s at 20/s")
    assert 180 <= in_ten <= 220, in_ten


@pytest.mark.slow
def test_a_run_longer_than_the_lease_keeps_its_permit(redis_url: str, ns: str) -> None:
    """Limit 1, two workers with a 1 s lease, runs of three leases each: the heartbeat of the
    worker running one renews its permit every lease/3, so the other worker never starts a
    second run beside it (a permit left to expire would let it)."""
    registry = Registry()
    spans: list[tuple[float, float]] = []
    lease_s = 1.0

    @registry.task("long")
    async def long(ctx: Context, payload: Any) -> None:
        start = time.monotonic()
        await asyncio.sleep(3 * lease_s)
        spans.append((start, time.monotonic()))

    with Client(redis_url, ns) as client:
        client.set_queue_limit("default", concurrency=1)
        client.submit_many([JobSpec(task="long") for _ in range(2)])
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(spans) == 2, workers=2,
                              lease_s=lease_s, timeout=30))
    assert _most_at_once(spans) == 1, spans


def test_acquire_grants_up_to_the_limit_and_takes_back(redis_url: str, ns: str, r: Any) -> None:
    keys = Keys(ns)
    permits, bucket, limit = keys.permits("q"), keys.bucket("q"), keys.limit("q")

    def acquire(now: int, want: int, concurrency: int | None = 2, rate: float | None = None,
                back: tuple[str, ...] = (), holder: str = "w:1") -> Acquired:
        # The limit where acquire.lua reads it (set_queue_limit writes it so).
        r.delete(limit)
        fields = {"concurrency": concurrency, "rate": rate}
        if concurrency is not None or rate is not None:
            r.hset(limit, mapping={f: v for f, v in fields.items() if v is not None})
        call = scripts.acquire(permits, bucket, limit, now, want, 1000, holder, list(back))
        return Acquired.decode(scripts.run_sync(r, [call])[0])

    first = acquire(10_000, 3)
    assert first.granted == 2 and first.members == ["w:1:1", "w:1:2"]
    assert acquire(10_001, 1, holder="w:2").granted == 0  # full
    again = acquire(10_002, 1, back=("w:1:1",), holder="w:3")  # one given back
    assert again.members == ["w:3:1"]
    # A permit not renewed expires with the lease: a crashed worker's come back.
    assert acquire(11_001, 2, holder="w:4").granted == 1  # w:1:2 expired at 11_000
    assert r.zcard(permits) == 2
    # The rate: a bucket of a tenth of a second's worth, refilled at the rate.
    got = acquire(20_000, 50, concurrency=None, rate=100)
    assert got.granted == 10 and got.members == [""] * 10 and got.wait_ms == 10
    assert acquire(20_005, 50, concurrency=None, rate=100).granted == 0
    assert acquire(20_030, 50, concurrency=None, rate=100).granted == 3


def test_a_slow_rates_bucket_lives_until_it_is_full_again(redis_url: str, ns: str,
                                                           r: Any) -> None:
    """At one an hour the bucket takes an hour to refill: a bucket that expired sooner would
    start full again, and one an hour would be one a minute."""
    keys = Keys(ns)
    bucket = keys.bucket("q")

    r.hset(keys.limit("q"), "rate", repr(limits.MIN_RATE))

    def acquire(now: int) -> Acquired:
        call = scripts.acquire(keys.permits("q"), bucket, keys.limit("q"), now, 1, 1000, "w:1",
                               [])
        return Acquired.decode(scripts.run_sync(r, [call])[0])

    assert acquire(10_000).granted == 1
    held = acquire(10_000 + 3_599_000)  # a second short of the hour: no token yet
    assert held.granted == 0 and 0 < held.wait_ms <= 1_001
    assert r.pttl(bucket) > 3_000_000
    assert acquire(10_000 + 3_600_000).granted == 1


def test_limits_are_set_listed_and_cleared(redis_url: str, ns: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with Client(redis_url, ns) as client:
        client.submit_many([JobSpec(task="t"), JobSpec(task="t", queue="mail")])
        assert client.set_queue_limit("mail", concurrency=3, rate=2.5) == QueueLimit(
            concurrency=3, rate=2.5)
        assert client.queue_limits() == {"mail": QueueLimit(concurrency=3, rate=2.5)}
        rows = {q.queue: q for q in client.queues()}
        assert rows["mail"].limit == QueueLimit(concurrency=3, rate=2.5)
        assert rows["mail"].permits_held == 0 and rows["mail"].depth == 1
        assert rows["default"].limit is None and rows["default"].depth == 1
        code, out, _ = sched(capsys, redis_url, ns, "queues")
        assert code == 0 and "3 at once, 2.5/s" in out
        code, out, err = sched(capsys, redis_url, ns, "queues", "limit", "default",
                               "--rate", "300/m")
        assert code == 0, err
        assert client.queue_limits()["default"] == QueueLimit(rate=5.0)
        code, out, _ = sched(capsys, redis_url, ns, "queues", "limit", "mail", "--clear")
        assert code == 0 and "cleared" in out
        assert "mail" not in client.queue_limits()


@pytest.mark.parametrize("args", [("--concurrency", "0"), ("--rate", "fast"),
                                  ("--rate", "-1"), (), ("--clear", "--concurrency", "2"),
                                  ("--rate", "1e-300"), ("--rate", "0.5/h"),
                                  ("--per-key-rate", "1e-300")])
def test_the_cli_refuses_bad_limits(redis_url: str, ns: str, args: tuple[str, ...],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = sched(capsys, redis_url, ns, "queues", "limit", "mail", *args)
    assert code != 0 and "Traceback" not in err and err.strip()
    with Client(redis_url, ns) as client:
        assert client.queue_limits() == {}


@pytest.mark.parametrize("kwargs", [{"concurrency": 0}, {"concurrency": 1.5}, {"rate": 0},
                                    {"rate": float("nan")}, {"concurrency": True},
                                    {"rate": 1e-300}, {"rate": "0.9/h"},
                                    {"rate": 1 / 3600 / 2}, {"per_key_rate": 1e-300}])
def test_the_sdk_refuses_bad_limits(redis_url: str, ns: str, kwargs: dict[str, Any]) -> None:
    with Client(redis_url, ns) as client, pytest.raises(ValidationError):
        client.set_queue_limit("mail", **kwargs)


@pytest.mark.slow  # waits 2 s on purpose
def test_slots_over_the_limit_stay_queued(redis_url: str, ns: str) -> None:
    """With every permit held elsewhere, a worker claims nothing of the queue; the slots wait
    (queued, no attempt), and run once the permits come back."""
    registry = Registry()
    ran: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran.append(ctx.slot_id)

    with Client(redis_url, ns) as client:
        client.set_queue_limit("default", concurrency=1)
        keys = Keys(ns)
        r = client.redis
        r.zadd(keys.permits("default"), {"elsewhere:1": int(time.time() * 1000) + 60_000})
        ids = client.submit_many([JobSpec(task="t") for _ in range(3)])

        async def main() -> None:
            freed = False
            task = asyncio.create_task(run_until(redis_url, ns, registry,
                                                 lambda: freed and len(ran) == 3, timeout=15))
            await asyncio.sleep(2.0)
            assert ran == []
            assert {client.slots(j)[0].status for j in ids} == {SlotStatus.QUEUED}
            assert all(client.slots(j)[0].attempt == 0 for j in ids)
            r.zrem(keys.permits("default"), "elsewhere:1")
            freed = True
            await task

        asyncio.run(main())
    assert sorted(ran) == sorted(client.slots(j)[0].slot_id for j in ids)


def test_the_slowest_rate_allowed_is_one_an_hour(redis_url: str, ns: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = sched(capsys, redis_url, ns, "queues", "limit", "mail", "--rate", "0.5/h")
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "at least one an hour" in err, err
    with Client(redis_url, ns) as client:
        assert client.set_queue_limit("mail", rate="1/h", per_key_rate="1/h") == QueueLimit(
            rate=limits.MIN_RATE, per_key_rate=limits.MIN_RATE)


def _longest_held_s(r: Any, ns: str, shards: int) -> float:
    """How long the oldest entry of the default queue has been delivered and not handed
    back (XPENDING's idle time), over every shard."""
    idle = [0]
    for s in range(shards):
        stream = Keys(ns).queue(s, "default")
        if r.exists(stream):
            idle += [e["time_since_delivered"]
                     for e in r.xpending_range(stream, DISPATCH_GROUP, "-", "+", 100)]
    return max(idle) / 1000


@pytest.mark.slow
def test_a_worker_held_back_by_a_slow_rate_hands_back_on_time_and_sees_the_limit_cleared(
        r: Any, redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    """A worker process whose next token is an hour away (rate 1/h, its one token spent):
    its limited claim loop still wakes every REFRESH_S, so the entry it holds goes back to
    its stream after HOLD_S, and once the limit is cleared the job runs within two refreshes."""
    held_bound = limiter.HOLD_S + limiter.REFRESH_S + 1.0  # a pass late on a loaded machine
    clear_bound = 2 * limiter.REFRESH_S + 1.0
    with Client(redis_url, ns) as client:

        def succeeded(job_id: str) -> bool:
            return client.slots(job_id)[0].status is SlotStatus.SUCCEEDED

        client.set_queue_limit("default", rate="1/h")
        worker = sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry")
        with running(worker):
            first = client.submit("test.sync_sleep", {"seconds": 0})  # takes the one token
            deadline = time.monotonic() + 30
            while not succeeded(first):
                assert time.monotonic() < deadline and worker.poll() is None
                time.sleep(0.02)
            shards = int(r.hget(Keys(ns).meta, "shards"))
            second = client.submit("test.sync_sleep", {"seconds": 0})
            # Read and refused a permit (delivered to the worker), then held for no longer
            # than HOLD_S and a pass, again and again.
            until = time.monotonic() + 3 * held_bound
            longest = 0.0
            while time.monotonic() < until:
                longest = max(longest, _longest_held_s(r, ns, shards))
                time.sleep(0.05)
            assert 0 < longest <= held_bound, longest
            assert not succeeded(second)
            client.set_queue_limit("default")
            cleared = time.monotonic()
            while not succeeded(second):
                assert time.monotonic() - cleared < clear_bound, "the cleared limit still held"
                time.sleep(0.02)


@pytest.mark.slow
def test_a_cleared_limit_starts_the_next_job_at_once(redis_url: str, ns: str) -> None:
    """A worker whose limited loop has just read the cleared limit (at its refresh) while its
    main claim loop still blocks in a read sent before, without the queue: the job submitted
    then starts at once, not once that read ends. The read blocks BLOCK_MS here, so a job
    left to it would wait seconds."""
    registry = Registry()
    started = asyncio.Event()

    @registry.task("quick")
    async def quick(ctx: Context, payload: Any) -> None:
        started.set()

    async def main() -> float:
        # A socket timeout long enough for the worker to block BLOCK_MS (worker.py).
        conn = async_redis(redis_url, timeout_s=4 * BLOCK_MS / 1000)
        worker = Worker(conn, registry, namespace=ns,
                        config=WorkerConfig(pipelines=1, block_ms=BLOCK_MS))
        async with AsyncClient(redis_url, ns) as client:
            await client.create_namespace()
            await client.set_queue_limit("default", rate=100)
            task = asyncio.create_task(worker.run())
            try:
                await until("the limited loop", lambda: _sees_a_limit(worker, True))
                await asyncio.sleep(0.2)  # the main loop's first read is in flight
                await client.set_queue_limit("default")
                await until("the refresh", lambda: _sees_a_limit(worker, False), timeout=5)
                began = time.monotonic()
                await client.submit("quick")
                await asyncio.wait_for(started.wait(), 2 * BLOCK_MS / 1000)
                return time.monotonic() - began
            finally:
                worker.stop()
                await task
                await conn.aclose()

    took = asyncio.run(main())
    assert took < 1.0, took


BLOCK_MS = 5000  # the main claim loop's blocking read: long, to tell it from a start at once


async def _sees_a_limit(worker: Worker, limited: bool) -> bool:
    """Whether the worker has read the default queue's limit (its last refresh saw one)."""
    return ("default" in worker.limited.limits) is limited


def test_the_testing_mode_holds_a_concurrency_limit() -> None:
    """A drain runs a limited queue's jobs at most `concurrency` at once, as workers would,
    and every one of them; an unlimited queue's run all at once beside them."""
    registry = Registry()
    running_now: dict[str, int] = {"mail": 0, "default": 0, "bulk": 0}
    most: dict[str, int] = {"mail": 0, "default": 0, "bulk": 0}

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        running_now[payload] += 1
        most[payload] = max(most[payload], running_now[payload])
        await asyncio.sleep(0.01)
        running_now[payload] -= 1

    with TestScheduler(registry) as s:
        s.client.set_queue_limit("mail", concurrency=2)
        s.client.submit_many([JobSpec(task="t", payload=q, queue=q)
                              for q in ("mail", "default") for _ in range(6)])
        ran = s.drain()
        assert len(ran) == 12 and all(r.outcome is Outcome.SUCCEEDED for r in ran)
        assert most == {"mail": 2, "default": 6, "bulk": 0}
        # A queue first seen later leaves the limited one to its limit.
        s.client.submit_many([JobSpec(task="t", payload=q, queue=q)
                              for q in ("mail", "bulk") for _ in range(6)])
        assert len(s.drain()) == 12
        assert most == {"mail": 2, "default": 6, "bulk": 6}
        s.client.set_queue_limit("mail", None)  # cleared: the next drain runs them all at once
        most["mail"] = 0
        s.client.submit_many([JobSpec(task="t", payload="mail", queue="mail")] * 6)
        assert len(s.drain()) == 6 and most["mail"] == 6


def test_the_testing_mode_holds_a_rate_in_fake_time() -> None:
    """A limited queue's starts follow its rate on the fake clock: a drain starts what the
    bucket holds, `advance` the rest at the rate, in no real time."""
    registry = Registry()
    starts: list[int] = []

    with TestScheduler(registry) as s:
        @registry.task("t")
        async def t(ctx: Context, payload: Any) -> None:
            starts.append(s.clock.now_ms())

        s.client.set_queue_limit("default", rate="10/s")
        s.client.submit_many([JobSpec(task="t", payload=i) for i in range(30)])
        began = time.monotonic()
        first = s.drain()
        assert 1 <= len(first) <= 2, "a drain starts only what the bucket holds"
        s.advance(5)
        assert time.monotonic() - began < 30  # fake time: no real wait on the rate
    assert len(starts) == 30
    assert 2_500 <= starts[-1] - starts[0] <= 3_500, "30 starts at 10 a second: about 3 s"
    for i, at in enumerate(starts):  # no second holds more than the rate and its bucket
        assert sum(1 for s in starts[i:] if s < at + 1000) <= 11, starts
