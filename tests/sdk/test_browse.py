"""The paged lists (scheduler/sdk/browse.py): a queue's queued slots, the scheduled and retrying
slots, the runs a worker holds and the recent submissions. Each is paged through to its end
with small pages, while Redis changes under it: every entry that stayed where it was shows
exactly once, in order; every read carries a COUNT or LIMIT."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from helpers import run_until
from scheduler import Client, Registry, RetryPolicy, SlotStatus
from scheduler.core.errors import ValidationError
from scheduler.core.keys import DISPATCH_GROUP, lanes
from scheduler.core.states import JobKind
from scheduler.sdk import browse


def _all(fetch: Any, limit: int, between: Any = None) -> list[Any]:
    """Every page's entries, in order, calling between(page number) after each page."""
    out: list[Any] = []
    after, n = None, 0
    while True:
        page = fetch(after=after, limit=limit)
        out += page.slots if hasattr(page, "slots") else page.jobs
        n += 1
        assert n < 500, "the pages never end"
        if between is not None:
            between(n)
        if page.next is None:
            return out
        after = page.next


def _deliver(r: redis.Redis, client: Client, queue: str, count: int) -> list[str]:
    """A worker's read of `count` entries of each lane of the queue: delivered, no longer
    waiting (their slots stay queued until a claim)."""
    read = []
    for shard in range(client.shards):
        for lane in lanes(queue):
            key = client.keys.prefix(shard) + "q:" + lane
            if not r.exists(key):
                continue
            try:
                r.xgroup_create(key, DISPATCH_GROUP, id="0")
            except redis.exceptions.ResponseError:
                pass
            for _, entries in r.xreadgroup(DISPATCH_GROUP, "w", {key: ">"}, count=count):
                read += [f[b"s"].decode() for _, f in entries]
    return read


def test_queued_pages_every_waiting_slot_once_oldest_first(redis_url: str, ns: str,
                                                           r: redis.Redis) -> None:
    with Client(redis_url, ns, shards=4) as client:
        ids = client.submit_many([{"task": "t", "payload": i, "queue": "q",
                                   "priority": 1 + i % 5} for i in range(130)])
        client.submit_many([{"task": "t", "queue": "other"} for _ in range(10)])
        delivered = set(_deliver(r, client, "q", 2))
        assert delivered
        waiting = {client.slots(j)[0].slot_id for j in ids} - delivered
        added: list[str] = []
        read_later: set[str] = set()

        def meanwhile(page: int) -> None:  # Redis moves on between page views
            if page == 2:
                added.extend(client.slots(j)[0].slot_id for j in client.submit_many(
                    [{"task": "t", "queue": "q", "priority": 2} for _ in range(6)]))
                read_later.update(_deliver(r, client, "q", 1))

        shown = _all(lambda **kw: client.queued("q", **kw), 7, meanwhile)
        ids_shown = [s.slot_id for s in shown]
        assert len(ids_shown) == len(set(ids_shown)), "a slot shown twice"
        # everything that stayed waiting shows; what a worker read meanwhile may or may not
        assert waiting - read_later <= set(ids_shown) <= waiting | set(added)
        assert set(added) - read_later <= set(ids_shown)
        assert all(s.queue == "q" and s.status is SlotStatus.QUEUED for s in shown)
        ready = [s.available_ms or 0 for s in shown]
        assert ready == sorted(ready)
        assert client.queued("nothing-here").slots == []


def test_scheduled_pages_slots_that_share_a_due_time_once_each(redis_url: str, ns: str) -> None:
    """A batch of delayed jobs made by one submit shares its fire time: many entries of each
    shard's `due` set have one score, more than a page holds."""
    with Client(redis_url, ns, shards=4) as client:
        same = client.submit_many([{"task": "t", "queue": "q", "delay": 600}
                                   for _ in range(120)])
        other = client.submit_many([{"task": "u", "queue": "r", "delay": 60 + i}
                                    for i in range(30)])
        client.submit("now", queue="q")  # queued, not scheduled
        shown = _all(lambda **kw: client.scheduled(**kw), 7)
        ids = [s.slot_id for s in shown]
        assert len(ids) == len(set(ids)) == 150
        assert {s.job_id for s in shown} == set(same) | set(other)
        fires = [s.fire_ms for s in shown]
        assert fires == sorted(fires)
        assert all(s.status is SlotStatus.SCHEDULED for s in shown)
        in_q = _all(lambda **kw: client.scheduled("q", **kw), 9)
        assert sorted(s.job_id for s in in_q) == sorted(same)
        assert client.scheduled(retrying=True).slots == []


def test_retrying_lists_the_slots_that_wait_out_a_backoff(redis_url: str, ns: str) -> None:
    registry = Registry()

    @registry.task("t.flaky")
    async def flaky(ctx: Any, payload: Any) -> None:
        raise ValueError("not yet")

    with Client(redis_url, ns, shards=2) as client:
        failing = client.submit_many([{"task": "t.flaky", "queue": "q", "payload": i,
                                       "retry": RetryPolicy(max_attempts=3, base_s=600, max_s=600)}
                                      for i in range(5)])
        delayed = client.submit("t.flaky", queue="q", delay=300)
        asyncio.run(run_until(redis_url, ns, registry, lambda: all(
            client.slots(j)[0].attempt == 1
            and client.slots(j)[0].status is SlotStatus.SCHEDULED for j in failing),
            queues=["q"]))
        retrying = _all(lambda **kw: client.scheduled(retrying=True, **kw), 2)
        assert sorted(s.job_id for s in retrying) == sorted(failing)
        assert all(s.attempts[-1].error and "not yet" in s.attempts[-1].error for s in retrying)
        assert {s.job_id for s in client.scheduled("q").slots} == {*failing, delayed}
        assert client.scheduled("elsewhere", retrying=True).slots == []


def test_running_lists_each_run_a_worker_holds(redis_url: str, ns: str) -> None:
    registry = Registry()
    release = asyncio.Event()

    @registry.task("t.hold")
    async def hold(ctx: Any, payload: Any) -> None:
        await release.wait()

    seen: dict[str, list[Any]] = {}
    with Client(redis_url, ns, shards=3) as client:
        held = client.submit_many(
            [{"task": "t.hold", "queue": "q", "priority": 1 + i % 5} for i in range(7)]
            + [{"task": "t.hold", "queue": "r"} for _ in range(2)]
            + [{"task": "t.hold", "queue": "q", "delivery": "at_most_once"} for _ in range(3)])
        client.submit("t.hold", queue="q", delay=600)  # scheduled: not running

        def all_running() -> bool:
            if "all" not in seen:
                if sum(s.status is SlotStatus.RUNNING
                       for j in held for s in client.slots(j)) < len(held):
                    return False
                seen["all"] = _all(lambda **kw: client.running(**kw), 4)
                seen["q"] = _all(lambda **kw: client.running("q", **kw), 3)
                release.set()
            return all(client.slots(j)[0].status is SlotStatus.SUCCEEDED for j in held)

        worker = asyncio.run(run_until(redis_url, ns, registry, all_running, concurrency=20,
                                       queues=["q", "r"]))
        shown = seen["all"]
        assert sorted(s.job_id for s in shown) == sorted(held)
        assert all(s.status is SlotStatus.RUNNING and s.worker == worker.worker_id
                   and s.lease_until_ms and s.attempts[-1].claimed_ms for s in shown)
        assert sorted(s.job_id for s in seen["q"]) == sorted(held[:7] + held[9:])
        assert client.running().slots == []  # all done now


def test_recent_jobs_are_every_kind_newest_first(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns, shards=2) as client:
        first = client.submit_many([{"task": "t", "payload": i} for i in range(12)])
        time.sleep(0.002)
        delayed = client.submit("t.later", queue="q", delay=60)
        time.sleep(0.002)
        nightly = client.schedule("nightly", "t.report", None, cron="0 3 * * *")
        time.sleep(0.002)
        last = client.submit("t.last")
        shown = _all(lambda **kw: client.recent_jobs(**kw), 5)
        assert [s.job_id for s in shown][:3] == [last, nightly, delayed]
        assert sorted(s.job_id for s in shown[3:]) == sorted(first)
        assert len(shown) == 15
        stamps = [s.submitted_ms for s in shown]
        assert stamps == sorted(stamps, reverse=True)
        by_id = {s.job_id: s for s in shown}
        assert by_id[delayed].kind is JobKind.DELAYED and by_id[delayed].queue == "q"
        assert by_id[delayed].status is SlotStatus.SCHEDULED
        assert by_id[nightly].kind is JobKind.CRON and by_id[nightly].slot_id is None
        assert by_id[last].kind is JobKind.IMMEDIATE and by_id[last].task == "t.last"
        assert by_id[last].status is SlotStatus.QUEUED


def test_a_bad_cursor_limit_or_queue_is_refused(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        for bad in ("x", "1-1.1", "-1-0.0.0", "1-0.0.0\n", "9" * 20 + "-0.0.0", "1-0.a.0"):
            with pytest.raises(ValidationError, match="not a page cursor"):
                client.scheduled(after=bad)
        for limit in (0, 501, True, 2.5):
            with pytest.raises(ValidationError, match="limit"):
                client.running(limit=limit)
        with pytest.raises(ValidationError, match="queue"):
            client.queued("a b")
        with pytest.raises(ValidationError, match="last"):
            client.latest_slots(["j"], 0)


def test_a_page_of_a_long_backlog_reads_a_bounded_part_of_it(
        redis_url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a whole stream or set of slots: every range read has a COUNT or LIMIT, and a page
    reads the hashes of the slots it shows, no more."""
    commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    class Recorded(browse.Pipe):  # type: ignore[misc]
        def __getattr__(self, name: str) -> Any:
            record = super().__getattr__(name)

            def spy(*args: Any, **kwargs: Any) -> None:
                commands.append((name, args, kwargs))
                record(*args, **kwargs)
            return spy

    with Client(redis_url, ns, shards=2) as client:
        for _ in range(4):
            client.submit_many([{"task": "t", "queue": "q"} for _ in range(500)])
            client.submit_many([{"task": "t", "queue": "q", "delay": 600} for _ in range(500)])
        monkeypatch.setattr(browse, "Pipe", Recorded)
        for read in (lambda: client.queued("q", limit=20), lambda: client.scheduled(limit=20),
                     lambda: client.scheduled("q", limit=20), lambda: client.running(limit=20),
                     lambda: client.recent_jobs(limit=20)):
            page = read()
            # The shards' lane indexes name the lanes in use (what status reads too), not
            # a backlog: read whole, as status does.
            ranges = [c for c in commands if c[0] in ("xrange", "zrange", "xpending_range",
                                                      "xrevrange")
                      and not str(c[1][0]).endswith(":lanes")]
            assert ranges
            for name, args, kwargs in ranges:
                count = kwargs.get("num") if name == "zrange" else args[-1]
                assert isinstance(count, int) and count <= max(browse.SCAN,
                                                               browse.EVENTS_SCAN), (name, args)
            reads = [c for c in commands if c[0] == "hgetall"]
            assert len(reads) <= 20
            assert page.next is not None or not (page.slots if hasattr(page, "slots")
                                                 else page.jobs)
            commands.clear()


def test_latest_slots_and_the_last_slots_of_a_job(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        nightly = client.schedule("nightly", "t.report", None, cron="0 3 * * *")
        once = client.submit("t.once")
        made = [client.trigger(nightly) for _ in range(5)]
        latest = client.latest_slots([nightly, once], 3)
        assert [s.slot_id for s in latest[nightly]] == made[-3:]
        assert latest[once] == []
        assert [s.slot_id for s in client.slots(nightly, 2)] == made[-2:]
        assert [s.slot_id for s in client.slots(nightly)] == made
        assert len(client.slots(once, 1)) == 1
