"""The objective watch (a scheduler node's loop), driven by run_once() with a manual clock:
a schedule whose occurrences wait past their objective enters its shard's `behind` set,
which `sched status` reads (only its head), and leaves it when its job leaves the cron index;
the share of a window's occurrences started on time decides, each occurrence counted once."""

from __future__ import annotations

import asyncio

import redis

from scheduler import Client
from scheduler.core import objective
from scheduler.core.keys import Keys, shard_of, slot_id
from scheduler.node.materializer import Materializer
from scheduler.node.objectives import ObjectiveWatch
from scheduler.observe.metrics import NamespaceCollector
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock

T0 = 1_700_000_000_000
SHARDS = 4


def node_pass(redis_url: str, ns: str, clock: ManualClock, *, materialize: bool = True,
              batch: int = 200, window_s: float = objective.DEFAULT_OBJECTIVE_WINDOW_S
              ) -> ObjectiveWatch:
    async def go() -> ObjectiveWatch:
        c = async_redis(redis_url)
        k = Keys(ns)
        try:
            if materialize:
                await Materializer(c, [k.prefix(s) for s in range(SHARDS)], clock).run_once()
            watch = ObjectiveWatch(c, k, range(SHARDS), clock, batch=batch, window_s=window_s)
            while await watch.run_once():  # one whole sweep
                pass
            return watch
        finally:
            await c.aclose()
    return asyncio.run(go())


def gauge(r: redis.Redis, ns: str, name: str) -> float:
    """The exporter's value of a namespace gauge without labels."""
    found = [m for m in NamespaceCollector(r, ns).collect() if m.name == name]
    return sum(sample.value for m in found for sample in m.samples)


def test_a_schedule_waiting_past_its_objective_is_listed_and_leaves_when_deleted(
        r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        late = client.submit("t", cron="* * * * * *", on_time_within=2)
        calm = client.submit("t", cron="0 0 1 1 *")  # next fire a year away: nothing due
        node_pass(redis_url, ns, clock)
        assert client.status().schedules_behind == 0  # nothing past its objective yet

        clock.advance(1.5)  # T0 is 1.5 s past: within its 2 s
        node_pass(redis_url, ns, clock, materialize=False)
        assert client.status().schedules_behind == 0

        clock.advance(1.0)  # T0 2.5 s past, never started (no worker): behind
        node_pass(redis_url, ns, clock, materialize=False, batch=1)
        s = client.status()
        assert s.schedules_behind == 1
        assert [b.job_id for b in s.behind_listed] == [late]
        assert late in s.behind_line() and calm not in s.behind_line()
        assert any(late in p for p in s.problems())
        assert gauge(r, ns, "sched_schedules_behind_objective") == 1
        since = r.zscore(Keys(ns).behind(shard_of(late, SHARDS)), late)
        assert since == T0 + 2500

        clock.advance(3.0)  # still behind: it keeps the time it fell behind
        node_pass(redis_url, ns, clock)
        assert r.zscore(Keys(ns).behind(shard_of(late, SHARDS)), late) == since

        client.delete_job(late)
        node_pass(redis_url, ns, clock)
        assert client.status().schedules_behind == 0
        assert gauge(r, ns, "sched_schedules_behind_objective") == 0


def test_status_reads_only_the_head_of_many_behind(r: redis.Redis, redis_url: str,
                                                   ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        client.create_namespace()
        k = Keys(ns)
        for shard in range(SHARDS):
            r.zadd(k.behind(shard), {f"job-{shard}-{i}": T0 - i for i in range(2500)})
        s = client.status()
    assert s.schedules_behind == 10_000
    assert len(s.behind_listed) == 20
    assert s.behind_listed[0].behind_s == max(b.behind_s for b in s.behind_listed)
    assert "and 9,995 more" in s.behind_line()


def started(r: redis.Redis, ns: str, job_id: str, fire_ms: int, lag_ms: int) -> None:
    """Seed the occurrence's slot as a worker leaves it: started `lag_ms` after its fire time
    and succeeded."""
    at = fire_ms + lag_ms
    r.hset(Keys(ns).slot(shard_of(job_id, SHARDS), slot_id(job_id, fire_ms)), mapping={
        "status": "succeeded", "attempt": 1, "worker": "w", "claimed_ms": at,
        "started_ms": at, "finished_ms": at + 10, "outcome": "succeeded"})


def run_for(r: redis.Redis, redis_url: str, ns: str, clock: ManualClock, job_id: str,
            seconds: int, late_at: set[int], window_s: float = 3600) -> None:
    """A per-second schedule for `seconds`: each occurrence starts 100 ms after its fire
    time, those numbered in `late_at` 5 s after; the node looks every 10 s."""
    first = clock.now_ms()
    for i in range(seconds):
        node_pass(redis_url, ns, clock, window_s=window_s) if i % 10 == 9 else None
        asyncio.run(materialize(redis_url, ns, clock))
        started(r, ns, job_id, first + i * 1000, 5000 if i in late_at else 100)
        clock.advance(1.0)
    node_pass(redis_url, ns, clock, window_s=window_s)


async def materialize(redis_url: str, ns: str, clock: ManualClock) -> None:
    c = async_redis(redis_url)
    try:
        await Materializer(c, [Keys(ns).prefix(s) for s in range(SHARDS)], clock).run_once()
    finally:
        await c.aclose()


def counts(r: redis.Redis, ns: str, job_id: str, now_ms: int, window_ms: int = 3_600_000
           ) -> dict[str, int]:
    """The window's counts, as the node reads them."""
    raw = r.hgetall(Keys(ns).ontime(shard_of(job_id, SHARDS), job_id))
    return objective.totals(raw, now_ms, window_ms)


def test_behind_is_a_share_below_the_target_and_each_occurrence_counts_once(
        r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        one = client.submit("t", cron="* * * * * *", on_time_within=2)
        run_for(r, redis_url, ns, clock, one, 150, late_at={70})
        # 1 late of 150: a share of 0.993, above 0.99
        assert counts(r, ns, one, clock.now_ms()) == {"on": 149, "late": 1}
        assert client.status().schedules_behind == 0
        node_pass(redis_url, ns, clock)  # a look with nothing new counts nothing again
        assert counts(r, ns, one, clock.now_ms()) == {"on": 149, "late": 1}
        client.delete_job(one)

        two = client.submit("t", cron="* * * * * *", on_time_within=2)
        run_for(r, redis_url, ns, clock, two, 150, late_at={20, 90})
        # 2 late of 150: 0.987, below 0.99
        assert counts(r, ns, two, clock.now_ms()) == {"on": 148, "late": 2}
        assert [b.job_id for b in client.status().behind_listed] == [two]
        o = client.fires(two).objective  # what `explain` prints
        assert o is not None and (o.window_s, o.target) == (3600, 0.99)
        assert (o.on_time, o.late, o.catchup, o.on_time_share) == (148, 2, 0, 148 / 150)
        assert o.behind_since is not None
        assert client.fires(one).objective.behind_since is None  # type: ignore[union-attr]


def test_a_schedule_leaves_once_its_window_is_on_time_again(
        r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job = client.submit("t", cron="* * * * * *", on_time_within=2)
        run_for(r, redis_url, ns, clock, job, 20, late_at=set(range(10)), window_s=60)
        assert client.status().schedules_behind == 1  # 10 late of 20
        run_for(r, redis_url, ns, clock, job, 40, late_at=set(), window_s=60)
        assert client.status().schedules_behind == 1  # late ones are still in the window:
        # the minute's buckets, 5 s each, the oldest one (5 late) out
        assert counts(r, ns, job, clock.now_ms(), 60_000) == {"on": 50, "late": 5}
        run_for(r, redis_url, ns, clock, job, 20, late_at=set(), window_s=60)
        assert client.status().schedules_behind == 0  # they left it
        key = Keys(ns).ontime(shard_of(job, SHARDS), job)
        assert r.pttl(key) > 0  # a schedule no longer counted leaves no key for long
        buckets = [f for f in r.hkeys(key) if f != objective.THROUGH.encode()]
        assert len(buckets) <= 2 * (objective.BUCKETS + 1)  # old buckets are trimmed


def test_a_job_is_read_again_only_once_its_next_occurrence_is_decided(
        r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)  # T0 is 20 s into a minute
    fire = T0 + 40_000

    async def go(client: Client) -> list[tuple[int, int]]:
        c = async_redis(redis_url)
        k = Keys(ns)
        watch = ObjectiveWatch(c, k, range(SHARDS), clock)
        seen = []
        try:
            for at in (T0, T0 + 10_000, fire, fire + 1_500, fire + 2_500):
                clock.advance((at - clock.now_ms()) / 1000)
                await Materializer(c, [k.prefix(s) for s in range(SHARDS)], clock).run_once()
                while await watch.run_once():
                    pass
                seen.append((watch.looked, client.status().schedules_behind))
            return seen
        finally:
            await c.aclose()

    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        client.submit("t", cron="* * * * *", on_time_within=2)  # no worker reads it
        assert asyncio.run(go(client)) == [
            (1, 0),  # first seen: read
            (0, 0),  # its next occurrence is half a minute away: not read
            (0, 0),  # it fired: not read while within its objective, whatever it does
            (0, 0),
            (1, 1),  # past it: decided, late; behind
        ]
