"""The fire ledger's Lua parts, driven by run_once() with a manual clock: catch-up drops
listed one by one (materialize.lua), overlap skips naming the run they yielded to
(promote.lua), withdrawn occurrences of a redefinition (redefine.lua) and of a delete
(delete_job.lua), the ledger's cap, and `Client.fires` joining them with the slots."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import redis

from scheduler import AsyncClient, Client, Fire, FirePage, FireState, Reason
from scheduler.core.keys import Keys, shard_of
from scheduler.core.ledger import CATCHUP_LISTED, FIRES_CAP, parse_entry, summarize
from scheduler.core.timing import utc_of_ms
from scheduler.node.materializer import Materializer
from scheduler.node.promoter import Promoter
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock

T0 = 1_700_000_000_000  # a whole second
SHARDS = 2


async def _pass(url: str, ns: str, clock: ManualClock, promote: bool) -> None:
    client = async_redis(url)
    prefixes = [Keys(ns).prefix(s) for s in range(SHARDS)]
    try:
        await Materializer(client, prefixes, clock).run_once()
        if promote:
            await Promoter(client, prefixes, clock).run_once()
    finally:
        await client.aclose()


def node_pass(url: str, ns: str, clock: ManualClock, promote: bool = False) -> None:
    asyncio.run(_pass(url, ns, clock, promote))


def ledger(r: redis.Redis, ns: str, job_id: str) -> list[tuple[int, Reason, str]]:
    key = Keys(ns).fires(shard_of(job_id, SHARDS), job_id)
    return [e for e in map(parse_entry, r.zrange(key, 0, -1)) if e is not None]


def test_catchup_drops_are_listed_one_by_one(r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup="latest")
        node_pass(redis_url, ns, clock)  # T0 .. T0+3 s
        clock.advance(100)  # every node down 100 s; grace 5 s: T0+4 .. T0+94 missed
        node_pass(redis_url, ns, clock)
        dropped = [T0 + i * 1000 for i in range(4, 94)]  # T0+94 s ran: the latest
        assert ledger(r, ns, job_id) == [(t, Reason.CATCHUP, "") for t in dropped]
        page = client.fires(job_id, since=timedelta(seconds=200), limit=1000)
        by_fire = {f.fire_ms: f for f in page.fires}
        assert all(by_fire[t].state is FireState.NOT_RUN and by_fire[t].reason is Reason.CATCHUP
                   for t in dropped)
        latest = by_fire[T0 + 94_000]
        assert latest.slot_id == f"{job_id}:{T0 + 94_000}" and latest.state is FireState.PENDING
        assert page.summary.not_started["catchup"] == len(dropped)


def test_an_overlap_skip_names_the_run_it_yielded_to(r: redis.Redis, redis_url: str,
                                                     ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", overlap="skip")
        other = client.submit("t", cron="* * * * * *")  # overlap allowed: writes nothing
        node_pass(redis_url, ns, clock, promote=True)  # T0 dispatched, still queued
        clock.advance(1)
        node_pass(redis_url, ns, clock, promote=True)  # T0+1 s: T0 active -> skipped
        active = f"{job_id}:{T0}"
        assert ledger(r, ns, job_id) == [(T0 + 1000, Reason.OVERLAP, active)]
        assert ledger(r, ns, other) == []
        skipped = client.fires(job_id, since=timedelta(seconds=5)).fires
        assert [(f.fire_ms, f.state, f.reason, f.yielded_to) for f in skipped] == [
            (T0, FireState.PENDING, None, None),
            (T0 + 1000, FireState.NOT_RUN, Reason.OVERLAP, active)]


def test_a_redefinition_and_a_delete_record_what_they_withdrew(r: redis.Redis, redis_url: str,
                                                               ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        client.schedule("s", "t", cron="* * * * * *")
        node_pass(redis_url, ns, clock)  # T0 .. T0+3 s made ahead
        clock.advance(0.5)
        client.schedule("s", "t", cron="*/2 * * * * *")  # T0+1, +2, +3 withdrawn
        assert ledger(r, ns, "s") == [(T0 + i * 1000, Reason.REDEFINED, "") for i in (1, 2, 3)]
        clock.advance(4)  # T0 + 4.5 s
        node_pass(redis_url, ns, clock)
        page = client.fires("s", since=timedelta(seconds=10))
        got = [(f.fire_ms - T0, f.state, f.reason) for f in page.fires]
        # T0 + 2 s is the new cadence's too: its slot was taken over (not withdrawn for good)
        assert got == [(0, FireState.PENDING, Reason.NO_WORKER),
                       (1000, FireState.NOT_RUN, Reason.REDEFINED),
                       (2000, FireState.PENDING, Reason.NO_WORKER),
                       (3000, FireState.NOT_RUN, Reason.REDEFINED),
                       (4000, FireState.PENDING, None)]
        client.delete_job("s")
        assert [e for e in ledger(r, ns, "s") if e[1] is Reason.DELETED] == [
            (T0 + i * 1000, Reason.DELETED, "") for i in (0, 2, 4, 6)]


def test_the_ledger_keeps_its_newest_entries(r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup="none")
        node_pass(redis_url, ns, clock)
        clock.advance(2000)  # one pass drops ~2,000: the most recent CATCHUP_LISTED listed
        node_pass(redis_url, ns, clock)
        got = ledger(r, ns, job_id)
        job = client.get_job(job_id)
        assert job.missed == 2000 - 5 - 4  # T0+4 s .. T0+1994 s (grace: 5 s)
        assert len(got) == CATCHUP_LISTED
        assert got[-1][0] == T0 + 1994_000 and got[0][0] == T0 + (1995 - CATCHUP_LISTED) * 1000
        page = client.fires(job_id, since=timedelta(seconds=10))
        assert page.summary.missed_unlisted == job.missed - CATCHUP_LISTED
        for _ in range(FIRES_CAP // 1000 + 1):  # past the cap: the oldest go
            clock.advance(1000)
            node_pass(redis_url, ns, clock)
        got = ledger(r, ns, job_id)
        assert len(got) == FIRES_CAP
        assert got[-1][0] == clock.now_ms() - 6000 and got[0][0] > T0 + 1994_000


def test_the_summary_counts_from_the_occurrences_themselves() -> None:
    def fire(t: int, state: FireState, reason: Reason | None = None,
             lag: int | None = None) -> Fire:
        return Fire(fire_ms=t, fire_at=utc_of_ms(t), state=state, reason=reason,
                    start_lag_ms=lag)

    fires = [fire(0, FireState.RAN, lag=10), fire(1, FireState.RAN, lag=2000),
             fire(2, FireState.RAN, lag=2001), fire(3, FireState.RUNNING, lag=50),
             fire(4, FireState.NOT_RUN, Reason.OVERLAP), fire(5, FireState.NOT_RUN, Reason.CATCHUP),
             fire(6, FireState.PENDING, Reason.NO_WORKER), fire(7, FireState.PENDING)]
    s = summarize(fires, 2000, missed_unlisted=3)
    assert (s.due, s.started, s.on_time, s.late) == (8, 4, 3, 1)
    assert s.not_started == {"catchup": 1, "no_worker": 1, "overlap": 1, "pending": 1}
    assert s.on_time_share == 3 / 7  # overlap skips are the schedule's policy: not counted
    assert (s.lag_p50_ms, s.lag_p99_ms, s.lag_max_ms) == (50, 2001, 2001)
    assert s.missed_unlisted == 3
    assert summarize([], 2000).on_time_share is None


def test_occurrences_no_node_made_are_listed_by_a_redefinition_or_a_delete(
        r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        client.schedule("s", "t", cron="* * * * * *")
        gone = client.submit("t", cron="* * * * * *")
        node_pass(redis_url, ns, clock)  # T0 .. T0+3 s made
        clock.advance(10.5)  # no node since: T0+4 .. T0+10 s unmade
        client.schedule("s", "t", cron="*/30 * * * * *")
        client.delete_job(gone)
        unmade = [T0 + i * 1000 for i in range(4, 11)]
        assert ledger(r, ns, "s") == [(t, Reason.REDEFINED, "") for t in unmade]
        assert [e for e in ledger(r, ns, gone) if e[0] in unmade] == [
            (t, Reason.DELETED, "") for t in unmade]
        page = client.fires("s", since=timedelta(seconds=20))
        assert [(f.fire_ms, f.reason) for f in page.fires if f.fire_ms >= T0 + 4000] == [
            (t, Reason.REDEFINED) for t in unmade]
        page = client.fires(gone, since=timedelta(seconds=20))
        assert [f.reason for f in page.fires] == [Reason.DELETED] * 11  # made or not


def test_the_async_client_reads_the_same_page(redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup="latest")
        node_pass(redis_url, ns, clock)
        clock.advance(30)
        node_pass(redis_url, ns, clock)  # dropped ones, and pending ones past the objective
        blocking = client.fires(job_id, since=timedelta(seconds=40))

    async def read() -> FirePage:
        async with AsyncClient(redis_url, ns, clock=clock) as aclient:
            return await aclient.fires(job_id, since=timedelta(seconds=40))

    assert asyncio.run(read()) == blocking
    assert {f.reason for f in blocking.fires} >= {Reason.CATCHUP, Reason.NO_WORKER}


def test_the_exporter_counts_occurrences_not_run_by_reason(r: redis.Redis, redis_url: str,
                                                           ns: str) -> None:
    from prometheus_client import CollectorRegistry

    from scheduler.observe.metrics import NamespaceCollector

    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        dropped = client.submit("t", cron="* * * * * *", catchup="none")
        skips = client.submit("t", cron="* * * * * *", overlap="skip")
        node_pass(redis_url, ns, clock, promote=True)
        clock.advance(2000)  # past CATCHUP_LISTED: the unlisted drops count too
        node_pass(redis_url, ns, clock, promote=True)
        clock.advance(1)
        node_pass(redis_url, ns, clock, promote=True)
        missed = client.get_job(dropped).missed
        overlap = len([e for e in ledger(r, ns, skips) if e[1] is Reason.OVERLAP])
        registry = CollectorRegistry()
        registry.register(NamespaceCollector(r, ns))
        got = {s.labels["reason"]: s.value for m in registry.collect()
               for s in m.samples if s.name == "sched_occurrences_not_run"}
        assert missed > CATCHUP_LISTED and overlap >= 1
        assert got["catchup"] == missed + client.get_job(skips).missed
        assert got["overlap"] == overlap and got["redefined"] == got["deleted"] == 0


def test_the_history_store_keeps_the_ledger_and_fires_reads_it_back(
        r: redis.Redis, redis_url: str, ns: str, store_dsn: str) -> None:
    """Catch-up drops, a redefinition's withdrawn occurrences (made, and never made while no
    node ran) and a delete's: the snapshotter
    copies each entry (the `not_run` events) to the store; once Redis has forgotten them
    (the ledger key, the cancelled slots), `fires` reads the same timeline from the store."""
    from helpers import drain
    from scheduler.history.snapshotter import SnapshotterConfig
    from scheduler.history.store import open_store

    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        dropped = client.submit("t", cron="* * * * * *", catchup="latest")
        gone = client.submit("t", cron="* * * * * *")
        client.schedule("s", "t", cron="* * * * * *")
        client.schedule("u", "t", cron="* * * * * *")
        node_pass(redis_url, ns, clock)  # T0 .. T0+3 s made ahead
        clock.advance(0.5)
        client.schedule("s", "t", cron="*/2 * * * * *")  # T0+1, +3 withdrawn
        client.delete_job(gone)
        clock.advance(100)  # every node down: the catch-up policy drops T0+4 .. T0+93
        client.schedule("u", "t", cron="*/30 * * * * *")  # T0+4 .. T0+100 never made
        node_pass(redis_url, ns, clock)
        jobs = [dropped, gone, "s", "u"]
        before = {j: client.fires(j, since=timedelta(seconds=200)) for j in jobs}
        in_redis = {j: ledger(r, ns, j) for j in jobs}
    assert {e[1] for j in jobs for e in in_redis[j]} == {
        Reason.CATCHUP, Reason.REDEFINED, Reason.DELETED}
    asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(defer_s=0)))
    store = open_store(store_dsn)
    try:
        for j in jobs:
            copied = store.ledger(ns, j, 0, 2**62, 10_000).entries
            assert copied == [(f, str(reason)) for f, reason, _ in in_redis[j]], j
    finally:
        store.close()
    # Redis forgets: the ledger keys, and the slots that will never run.
    keys = Keys(ns)
    for j in jobs:
        shard = shard_of(j, SHARDS)
        r.delete(keys.fires(shard, j))
        for f in before[j].fires:
            if f.slot_id and f.state is FireState.NOT_RUN:
                r.delete(keys.slot(shard, f.slot_id))
                r.zrem(keys.runs(shard, j), f.slot_id)
    with Client(redis_url, ns, shards=SHARDS, clock=clock, history=store_dsn) as client:
        after = {j: client.fires(j, since=timedelta(seconds=200)) for j in jobs}
    for j in jobs:
        assert after[j].summary == before[j].summary, j
        assert after[j].fires == before[j].fires, j


def test_the_summary_covers_the_whole_window_not_the_page(r: redis.Redis, redis_url: str,
                                                          ns: str) -> None:
    """A 10-occurrence page of a 101-occurrence window: the page's summary is the window's,
    the same on every page of it, and the pages together are the window's occurrences."""
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup="latest")
        node_pass(redis_url, ns, clock)
        clock.advance(100)
        node_pass(redis_url, ns, clock)
        since = utc_of_ms(T0 - 500)
        whole = client.fires(job_id, since=since, limit=1000)
        assert whole.cursor is None and whole.summary.due == len(whole.fires) == 101
        pages, cursor = [], None
        while True:
            page = client.fires(job_id, since=since, limit=10, cursor=cursor)
            assert page.summary == whole.summary and len(page.fires) <= 10
            pages.extend(page.fires)
            if page.cursor is None:
                break
            cursor = page.cursor
    assert pages == whole.fires and whole.summary.complete
