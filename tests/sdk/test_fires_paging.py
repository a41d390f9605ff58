"""`Client.fires` pages: a schedule with 100,000 past occurrences answers each page in well
under a second (the fire times are enumerated from the page's start, never from the
schedule's first occurrence; its summary reads at most SUMMARY_CAP of the window), and
paging with the cursor visits each occurrence once."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import redis

from scheduler import Client, FireState, Reason
from scheduler.core.keys import Keys
from scheduler.node.materializer import Materializer
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock

T0 = 1_700_000_000_000
SHARDS = 2
PAST = 100_000


def materialize(url: str, ns: str, clock: ManualClock) -> None:
    async def go() -> None:
        client = async_redis(url)
        try:
            await Materializer(client, [Keys(ns).prefix(s) for s in range(SHARDS)],
                               clock).run_once()
        finally:
            await client.aclose()
    asyncio.run(go())


def test_a_page_of_a_long_past_costs_the_same(r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup="all", catchup_limit=1000)
        materialize(redis_url, ns, clock)
        clock.advance(PAST)  # 100,000 occurrences passed with no node
        materialize(redis_url, ns, clock)  # the latest 1,000 made, 1,000 more listed dropped
        since = datetime.fromtimestamp(T0 / 1000, UTC)
        took = []
        t = time.perf_counter()
        first = client.fires(job_id, since=since, limit=1000)
        took.append(time.perf_counter() - t)
        assert [f.fire_ms for f in first.fires] == [T0 + i * 1000 for i in range(1000)]
        assert first.cursor == T0 + 999_000
        # the summary reads past the page, up to its cap, and says where it stopped
        assert not first.summary.complete and first.summary.through_ms == T0 + 9_999_000
        tail_from = T0 + (PAST - 2500) * 1000
        t = time.perf_counter()
        tail = client.fires(job_id, since=since, limit=1000, cursor=tail_from)
        took.append(time.perf_counter() - t)
        assert {(f.state, f.reason) for f in tail.fires} == {
            (FireState.NOT_RUN, Reason.UNRECORDED), (FireState.NOT_RUN, Reason.CATCHUP)}
        t = time.perf_counter()
        last = client.fires(job_id, since=timedelta(seconds=PAST + 10), limit=1000,
                            cursor=tail.cursor)
        took.append(time.perf_counter() - t)
        assert {(f.state, f.reason) for f in last.fires} == {
            (FireState.NOT_RUN, Reason.CATCHUP), (FireState.PENDING, Reason.NO_WORKER)}
        seen = [f.fire_ms for f in tail.fires + last.fires]
        assert seen == sorted(set(seen)) and seen[0] == tail_from + 1000
        print(f"fires pages over {PAST:,} past occurrences: "
              + ", ".join(f"{x * 1000:.0f} ms" for x in took))
        assert max(took) < 1.0, took
