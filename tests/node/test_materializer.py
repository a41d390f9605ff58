"""Cron materialization and backfill, driven by run_once() with a manual clock."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
import redis.asyncio

from scheduler import Client
from scheduler.core.cron import CronSpec
from scheduler.core.keys import Keys, shard_of
from scheduler.node.leases import ShardLeases
from scheduler.node.materializer import Materializer
from scheduler.node.promoter import Promoter
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Code

T0 = 1_700_000_000_000  # a whole second
SHARDS = 4


def ms(*args: int, tz: Any = UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)  # type: ignore[misc]


async def _materialize(url: str, ns: str, clock: ManualClock, copies: int = 1) -> list[int]:
    """run_once of `copies` materializers at the same time; returns their created counts."""
    client = async_redis(url)
    k = Keys(ns)
    ms_ = [Materializer(client, [k.prefix(s) for s in range(SHARDS)], clock)
           for _ in range(copies)]
    try:
        await asyncio.gather(*(m.run_once() for m in ms_))
    finally:
        await client.aclose()
    return [m.created for m in ms_]


def materialize(url: str, ns: str, clock: ManualClock, copies: int = 1) -> list[int]:
    return asyncio.run(_materialize(url, ns, clock, copies))


def fires(client: Client, job_id: str) -> list[int]:
    return [s.fire_ms for s in client.slots(job_id)]


@pytest.mark.parametrize(("catchup", "limit", "created_missed", "counted"), [
    ("all", None, 91, 0),
    ("all", 10, 10, 81),
    ("latest", None, 1, 90),
    ("none", None, 0, 91),
])
def test_backfill_after_downtime_follows_the_policy(
        r: redis.Redis, redis_url: str, ns: str, catchup: str, limit: int | None,
        created_missed: int, counted: int) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup=catchup, catchup_limit=limit)
        materialize(redis_url, ns, clock)  # T0 .. T0+3s (lookahead 3 s)
        assert fires(client, job_id) == [T0 + i * 1000 for i in range(4)]

        clock.advance(100)  # every node down for 100 s; grace 5 s: T0+4 .. T0+94 missed
        materialize(redis_url, ns, clock)
        got = fires(client, job_id)
        missed_range = [T0 + i * 1000 for i in range(4, 95)]
        current = [T0 + i * 1000 for i in range(95, 104)]  # within grace, up to now + 3 s
        kept = missed_range[len(missed_range) - created_missed:] if created_missed else []
        assert got == [T0 + i * 1000 for i in range(4)] + kept + current
        job = client.get_job(job_id)
        assert job.missed == counted
        shard = shard_of(job_id, SHARDS)
        assert int(r.hget(Keys(ns).stats(shard), "missed") or 0) == counted
        events = [f for _, f in r.xrange(Keys(ns).events(shard))]
        assert any(e[b"type"] == b"missed" for e in events) is bool(counted)

        clock.advance(1)  # back to normal: one new slot, nothing missed
        materialize(redis_url, ns, clock)
        assert fires(client, job_id)[-1] == T0 + 104_000
        assert client.get_job(job_id).missed == counted


def test_two_materializers_at_once_create_each_slot_once(redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        ids = client.submit_many([{"task": "t", "cron": "* * * * * *"} for _ in range(50)])
        for _ in range(5):
            created = materialize(redis_url, ns, clock, copies=3)
            clock.advance(7)
        assert sum(created) > 0
        for job_id in ids:
            got = fires(client, job_id)
            assert got == [T0 + i * 1000 for i in range(len(got))]  # no gap, no duplicate
            assert got[-1] == T0 + 31_000


def test_materialize_refuses_a_stale_watermark_or_definition(r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *")
        prefix = Keys(ns).prefix(shard_of(job_id, SHARDS))
        stale = scripts.materialize(prefix, T0, 100, job_id, T0 - 1000, "", T0 + 1000, 0, [T0])
        # a plan computed from another definition (a `spec` digest the job no longer has)
        replaced = scripts.materialize(prefix, T0, 100, job_id, T0, "0f", T0 + 1000, 0, [T0])
        ok = scripts.materialize(prefix, T0, 100, job_id, T0, "", T0 + 1000, 0, [T0])
        again = scripts.materialize(prefix, T0, 100, job_id, T0, "", T0 + 1000, 0, [T0])
        assert scripts.run_sync(r, [stale, replaced, ok, again]) == [
            [Code.MOVED, 0], [Code.MOVED, 0], [Code.OK, 1], [Code.MOVED, 0]]
        assert fires(client, job_id) == [T0]


def test_end_at_ends_the_job_and_start_at_delays_it(r: redis.Redis, redis_url: str,
                                                    ns: str) -> None:
    clock = ManualClock(T0)
    start = datetime.fromtimestamp((T0 + 2000) / 1000, UTC)
    end = datetime.fromtimestamp((T0 + 5000) / 1000, UTC)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", start_at=start, end_at=end)
        assert client.get_job(job_id).next_fire_ms == T0 + 2000
        for _ in range(4):
            materialize(redis_url, ns, clock)
            clock.advance(2)
        assert fires(client, job_id) == [T0 + 2000, T0 + 3000, T0 + 4000, T0 + 5000]
        assert r.zscore(Keys(ns).cron(shard_of(job_id, SHARDS)), job_id) is None
        assert client.get_job(job_id).next_fire_ms is None


def promote(redis_url: str, ns: str, clock: ManualClock) -> None:
    """One promoter pass over every shard."""
    async def go() -> None:
        c = async_redis(redis_url)
        await Promoter(c, [Keys(ns).prefix(s) for s in range(SHARDS)], clock).run_once()
        await c.aclose()
    asyncio.run(go())


def test_overlap_skip_records_skipped_while_the_last_run_is_active(r: redis.Redis,
                                                                   redis_url: str,
                                                                   ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", overlap="skip")
        other = client.submit("t", cron="* * * * * *")  # overlap allowed: all run
        k = Keys(ns)

        materialize(redis_url, ns, clock)
        promote(redis_url, ns, clock)  # T0 dispatched; it is still queued (no worker)
        clock.advance(1)
        promote(redis_url, ns, clock)  # T0+1: the T0 slot is active -> skipped
        first = client.slots(job_id)[0]
        r.hset(k.slot(shard_of(job_id, SHARDS), first.slot_id), "status", "succeeded")
        clock.advance(1)
        promote(redis_url, ns, clock)  # T0+2: nothing active -> dispatched
        assert [s.status.value for s in client.slots(job_id)[:3]] == ["succeeded", "skipped",
                                                                      "queued"]
        assert [s.status.value for s in client.slots(other)[:3]] == ["queued"] * 3
        events = [f for _, f in r.xrange(k.events(shard_of(job_id, SHARDS)))]
        assert any(e[b"type"] == b"skipped" for e in events)


def test_overlap_skip_is_judged_per_job(r: redis.Redis, redis_url: str, ns: str) -> None:
    """Two overlap="skip" jobs: one's active run skips only its own next occurrence (promote
    finds each slot's job by its id)."""
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        by_shard: dict[int, list[str]] = {}
        while not any(len(ids) == 2 for ids in by_shard.values()):  # two in one shard
            job_id = client.submit("t", cron="* * * * * *", overlap="skip")
            by_shard.setdefault(shard_of(job_id, SHARDS), []).append(job_id)
        [busy, idle] = next(ids for ids in by_shard.values() if len(ids) == 2)
        k = Keys(ns)

        materialize(redis_url, ns, clock)
        promote(redis_url, ns, clock)  # both T0 slots dispatched
        done = client.slots(idle)[0]
        r.hset(k.slot(shard_of(idle, SHARDS), done.slot_id), "status", "succeeded")
        clock.advance(1)
        promote(redis_url, ns, clock)
        assert [s.status.value for s in client.slots(busy)[:2]] == ["queued", "skipped"]
        assert [s.status.value for s in client.slots(idle)[:2]] == ["succeeded", "queued"]


def test_daylight_saving_skips_missing_times_and_runs_repeated_ones_once() -> None:
    paris = CronSpec("30 2 * * *", "Europe/Paris")
    spring = list(itertools.islice(paris.after(ms(2026, 3, 27)), 3))
    # 2026-03-29 02:30 does not exist in Paris (clocks jump 02:00 -> 03:00): no run that day
    assert spring == [ms(2026, 3, 27, 1, 30), ms(2026, 3, 28, 1, 30), ms(2026, 3, 30, 0, 30)]
    autumn = list(itertools.islice(paris.after(ms(2026, 10, 24)), 3))
    # 2026-10-25 02:30 happens twice (CEST then CET): it runs once, at the first (00:30 UTC)
    assert autumn == [ms(2026, 10, 24, 0, 30), ms(2026, 10, 25, 0, 30), ms(2026, 10, 26, 1, 30)]
    every20 = list(itertools.islice(CronSpec("*/20 * * * *", "Europe/Paris").after(
        ms(2026, 10, 24, 23, 50)), 5))
    # the repeated hour 02:00-03:00 runs once: 00:00, 00:20, 00:40 UTC, then 02:00 UTC (03:00)
    assert every20 == [ms(2026, 10, 25, 0, 0), ms(2026, 10, 25, 0, 20), ms(2026, 10, 25, 0, 40),
                       ms(2026, 10, 25, 2, 0), ms(2026, 10, 25, 2, 20)]
    # counting backwards from inside the second pass finds the same single runs
    back = list(itertools.islice(CronSpec("*/20 * * * *", "Europe/Paris").before(
        ms(2026, 10, 25, 1, 50)), 3))
    assert back == [ms(2026, 10, 25, 0, 40), ms(2026, 10, 25, 0, 20), ms(2026, 10, 25, 0, 0)]
    assert CronSpec("*/10 * * * * *").next_after(T0) == T0 + 10_000  # seconds field first


def test_leases_rebalance_when_nodes_join_and_leave(r: redis.Redis, redis_url: str,
                                                    ns: str) -> None:
    clock = ManualClock(T0)

    async def scenario() -> None:
        c = async_redis(redis_url)
        k = Keys(ns)
        a = ShardLeases(c, k, 8, clock, "a", ttl_s=30)
        b = ShardLeases(c, k, 8, clock, "b", ttl_s=30)
        assert await a.run_once() == list(range(8))
        assert await b.run_once() == []  # all held; a gives half back on its next tick
        assert len(await a.run_once()) == 4
        owned_b = await b.run_once()
        assert len(owned_b) == 4 and set(owned_b).isdisjoint(a.owned)
        epochs = {s: int(r.get(k.owner(s)).split(b":")[0]) for s in range(8)}  # type: ignore[union-attr]
        await a.release_all()  # clean stop: b takes everything on its next tick
        assert await b.run_once() == list(range(8))
        for s in a.owned:
            assert int(r.get(k.owner(s)).split(b":")[0]) > epochs[s]  # type: ignore[union-attr]
        await c.aclose()

    asyncio.run(scenario())


def test_async_client_schedules_lists_and_reads_cron_slots(redis_url: str, ns: str) -> None:
    from scheduler import AsyncClient

    clock = ManualClock(T0)

    async def scenario() -> None:
        async with AsyncClient(redis_url, ns, shards=SHARDS, clock=clock) as client:
            cron = await client.submit("t", cron="*/2 * * * * *", overlap="skip")
            delayed = await client.submit("t", delay=timedelta(seconds=90))
            await _materialize(redis_url, ns, clock)
            assert [s.fire_ms for s in await client.slots(cron)] == [T0, T0 + 2000]
            listed = {j.job_id: j for j in await client.list_jobs()}
            assert listed[cron].next_fire_ms == T0 and listed[cron].overlap == "skip"
            assert listed[delayed].next_fire_ms == T0 + 90_000
            assert listed[delayed].delay_s == 90

    asyncio.run(scenario())


def test_a_very_long_outage_keeps_the_most_recent_and_counts_a_floor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.node import materializer

    monkeypatch.setattr(materializer, "SCAN_LIMIT", 50)
    job = materializer.Recurrence(spec=CronSpec("* * * * * *"), catchup="all", catchup_limit=10,
                                  end_ms=0)
    plan = materializer.plan(job, T0, T0 + 1_000_000, 3000, 5000)
    late_before = T0 + 995_000
    assert plan.fires[:10] == [late_before - i * 1000 for i in range(10, 0, -1)]
    assert plan.fires[10:] == [T0 + i * 1000 for i in range(995, 1004)]
    assert plan.missed == 50 and plan.next_ms == T0 + 1_004_000


def test_a_watermark_between_occurrences_never_becomes_a_slot() -> None:
    """`sched recover` restores a recurring job's watermark as its last known fire + 1 ms:
    the next slot is the next real occurrence, not that instant."""
    from scheduler.core.cron import CronSpec
    from scheduler.node.materializer import Recurrence, plan

    job = Recurrence(spec=CronSpec("*/10 * * * * *"), catchup="all", catchup_limit=1000,
                     end_ms=0)
    last = 1_800_000_000_000  # a multiple of 10 s
    p = plan(job, last + 1, now_ms=last + 35_000, lookahead_ms=3000, grace_ms=5000)
    assert p.fires == [last + 10_000, last + 20_000, last + 30_000]
    assert p.next_ms == last + 40_000
    assert plan(job, last, now_ms=last, lookahead_ms=0, grace_ms=0).fires == [last]


@pytest.mark.parametrize(("field", "value"), [("cron", "not a cron"), ("tz", "Mars/Olympus"),
                                              ("cron", "0 0 30 2 *")])
def test_a_job_whose_definition_does_not_parse_stops_no_other(
        r: redis.Redis, redis_url: str, ns: str, caplog: pytest.LogCaptureFixture,
        field: str, value: str) -> None:
    """A job hash written past the SDK with a definition that does not parse (submit.lua
    checks the fields' types, not a cron expression or a zone): the materializer says so,
    ends that series, and goes on with every other job."""
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        bad = client.submit("t", cron="* * * * * *")
        good = client.submit("t", cron="* * * * * *")
        r.hset(Keys(ns).job(shard_of(bad, SHARDS), bad), field, value)
        materialize(redis_url, ns, clock)
        assert fires(client, good) == [T0 + i * 1000 for i in range(4)]
        assert fires(client, bad) == []
        assert f"cron job {bad} cannot be planned" in caplog.text
        assert r.zscore(Keys(ns).cron(shard_of(bad, SHARDS)), bad) is None  # its series ended
        clock.advance(2)
        materialize(redis_url, ns, clock)
        assert len(fires(client, good)) == 6
