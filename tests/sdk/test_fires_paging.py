"""`Client.fires` pages: a schedule with 100,000 past occurrences answers each page in well
under a second (the fire times are enumerated from the page's start, never from the
schedule's first occurrence; its summary reads at most SUMMARY_CAP of the window), and
paging with the cursor visits each occurrence once."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from helpers import materialize
from scheduler import Client, FireState, Reason
from scheduler.redis.clock import ManualClock

T0 = 1_700_000_000_000
SHARDS = 2
PAST = 100_000



def test_a_page_of_a_long_past_costs_the_same(r: redis.Redis, redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup="all", catchup_limit=1000)
        materialize(redis_url, ns, clock, SHARDS)
        clock.advance(PAST)  # 100,000 occurrences passed with no node
        materialize(redis_url, ns, clock, SHARDS)  # the latest 1,000 made, 1,000 more listed dropped
        since = datetime.fromtimestamp(T0 / 1000, UTC)
        took: list[float] = []

        def timed(**asked: Any) -> Any:
            """The page, and its time: the faster of two reads (a loaded box's stall is not
            the page's cost; the reads change nothing)."""
            times = []
            for _ in range(2):
                t = time.perf_counter()
                page = client.fires(job_id, **asked)
                times.append(time.perf_counter() - t)
            took.append(min(times))
            return page

        first = timed(since=since, limit=1000)
        assert [f.fire_ms for f in first.fires] == [T0 + i * 1000 for i in range(1000)]
        assert first.cursor == T0 + 999_000
        # the summary reads past the page, up to its cap, and says where it stopped
        assert not first.summary.complete and first.summary.through_ms == T0 + 9_999_000
        tail_from = T0 + (PAST - 2500) * 1000
        tail = timed(since=since, limit=1000, cursor=tail_from)
        assert {(f.state, f.reason) for f in tail.fires} == {
            (FireState.NOT_RUN, Reason.UNRECORDED), (FireState.NOT_RUN, Reason.CATCHUP)}
        last = timed(since=timedelta(seconds=PAST + 10), limit=1000, cursor=tail.cursor)
        assert {(f.state, f.reason) for f in last.fires} == {
            (FireState.NOT_RUN, Reason.CATCHUP), (FireState.PENDING, Reason.NO_WORKER)}
        seen = [f.fire_ms for f in tail.fires + last.fires]
        assert seen == sorted(set(seen)) and seen[0] == tail_from + 1000
        print(f"fires pages over {PAST:,} past occurrences: "
              + ", ".join(f"{x * 1000:.0f} ms" for x in took))
        assert max(took) < 1.0, took
