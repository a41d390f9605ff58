"""The objective watch (a scheduler node's loop), driven by run_once() with a manual clock:
a schedule whose occurrences wait past their objective enters its shard's `behind` set,
which `sched status` reads (only its head), and leaves it when its job leaves the cron index."""

from __future__ import annotations

import asyncio

import redis

from scheduler import Client
from scheduler.core.keys import Keys, shard_of
from scheduler.node.materializer import Materializer
from scheduler.node.objectives import ObjectiveWatch
from scheduler.observe.metrics import NamespaceCollector
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock

T0 = 1_700_000_000_000
SHARDS = 4


def node_pass(redis_url: str, ns: str, clock: ManualClock, *, materialize: bool = True,
              batch: int = 200) -> ObjectiveWatch:
    async def go() -> ObjectiveWatch:
        c = async_redis(redis_url)
        k = Keys(ns)
        try:
            if materialize:
                await Materializer(c, [k.prefix(s) for s in range(SHARDS)], clock).run_once()
            watch = ObjectiveWatch(c, k, range(SHARDS), clock, batch=batch)
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
