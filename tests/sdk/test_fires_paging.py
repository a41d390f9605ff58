"""`Client.fires` pages: a schedule with 30,000 past occurrences answers a page at its end
for the cron steps of a page at its start (the fire times are enumerated from the page's
start, never from the schedule's first occurrence; its summary reads at most SUMMARY_CAP of
the window), and paging with the cursor visits each occurrence once. The cost is counted in
cron steps, which a loaded box does not change; the time of a page is bench/'s."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from helpers import materialize
from scheduler import Client, FireState, Reason
from scheduler.core.cron import CronSpec
from scheduler.redis.clock import ManualClock
from scheduler.sdk import fires as fires_op

T0 = 1_700_000_000_000
SHARDS = 2
# Three times SUMMARY_CAP: a page at the end that walked the past from its first occurrence
# would cost more than twice the first page (its page and its capped summary). Each past
# occurrence also costs the materializer's catch-up a cron step, the most of this test's time.
PAST = 30_000



def test_a_page_of_a_long_past_costs_the_same(r: redis.Redis, redis_url: str, ns: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [0]

    class Counted(CronSpec):
        """The real enumeration, counting the fire times it yields."""

        __slots__ = ()

        def after(self, ms: int) -> Iterator[int]:
            for t in super().after(ms):
                steps[0] += 1
                yield t

    monkeypatch.setattr(fires_op, "CronSpec", Counted)
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *", catchup="all", catchup_limit=1000)
        materialize(redis_url, ns, clock, SHARDS)
        clock.advance(PAST)  # 30,000 occurrences passed with no node
        materialize(redis_url, ns, clock, SHARDS)  # the latest 1,000 made, 1,000 more listed dropped
        since = datetime.fromtimestamp(T0 / 1000, UTC)
        took: list[int] = []

        def timed(**asked: Any) -> Any:
            """The page, and its cost: the cron steps it took."""
            steps[0] = 0
            page = client.fires(job_id, **asked)
            took.append(steps[0])
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
        print(f"fires pages over {PAST:,} past occurrences: cron steps {took}")
        # The first page starts at the schedule's first occurrence: no past to walk.
        assert max(took) <= took[0], took
