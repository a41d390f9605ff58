"""Named schedules: a deploy declares its recurring jobs on every start (Client.schedule), and
what it declares again must neither duplicate the series nor rewrite it, while a changed
spec replaces it from the next occurrence. The race is real: eight processes at once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from faults.harness import wait_for

from helpers import Shard, drain, materialize, running, sched_process
from scheduler import Client, SlotStatus, ValidationError
from scheduler.core.keys import Keys, shard_of
from scheduler.history.snapshotter import SnapshotterConfig
from scheduler.node.materializer import Materializer
from scheduler.node.promoter import Promoter
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts.replies import Code

T0 = 1_700_000_000_000
SHARDS = 4



def events(r: object, ns: str, job_id: str) -> int:
    return int(r.xlen(Keys(ns).events(shard_of(job_id, SHARDS))))  # type: ignore[attr-defined]


def test_the_same_spec_declared_again_writes_nothing(r: object, redis_url: str,
                                                     ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.schedule("nightly-report", "reports.build", {"kind": "daily", "n": 1},
                                 cron="0 3 * * *", tz="Europe/Paris")
        assert job_id == "nightly-report"
        before = (r.hgetall(Keys(ns).job(shard_of(job_id, SHARDS), job_id)),  # type: ignore[attr-defined]
                  events(r, ns, job_id))
        clock.advance(60)
        # the same spec, the payload's keys in another order: the same schedule
        assert client.schedule("nightly-report", "reports.build", {"n": 1, "kind": "daily"},
                               cron="0 3 * * *", tz="Europe/Paris") == job_id
        after = (r.hgetall(Keys(ns).job(shard_of(job_id, SHARDS), job_id)),  # type: ignore[attr-defined]
                 events(r, ns, job_id))
        assert after == before
        assert [j.job_id for j in client.list_jobs()] == [job_id]


def test_a_changed_spec_replaces_the_series_from_its_next_occurrence(
        redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.schedule("tick", "t.old", cron="*/2 * * * * *")  # every 2 s
        materialize(redis_url, ns, clock, SHARDS)  # T0, T0+2 s (3 s ahead)
        assert [s.fire_ms for s in client.slots(job_id)] == [T0, T0 + 2000]
        clock.advance(0.5)
        client.schedule("tick", "t.new", {"v": 2}, cron="* * * * * *", queue="fast")
        job = client.get_job(job_id)
        assert (job.task, job.queue, job.payload, job.cron) == ("t.new", "fast", {"v": 2},
                                                                 "* * * * * *")
        materialize(redis_url, ns, clock, SHARDS)
        slots = {s.fire_ms: s for s in client.slots(job_id)}
        # T0 was due under the old definition and stays; T0+2 s is made again, as t.new
        assert slots[T0].task == "t.old" and slots[T0].status is SlotStatus.SCHEDULED
        assert sorted(slots) == [T0, T0 + 1000, T0 + 2000, T0 + 3000]
        assert {slots[f].task for f in sorted(slots)[1:]} == {"t.new"}
        assert {slots[f].queue for f in sorted(slots)[1:]} == {"fast"}


EVEN, ODD = "*/2 * * * * *", "1-59/2 * * * * *"  # T0 is an even second


def test_a_materializer_left_running_takes_the_new_cadence_in_its_next_pass(
        redis_url: str, ns: str) -> None:
    """The node's one long-lived Materializer, before and after the redefinition: its pass
    after it creates the new cadence's occurrences and none of the old one's."""
    clock = ManualClock(T0)

    async def go(client: Client) -> None:
        conn = async_redis(redis_url)
        node = Materializer(conn, [Keys(ns).prefix(s) for s in range(SHARDS)], clock)
        try:
            client.schedule("tick", "t.even", cron=EVEN)
            await node.run_once()
            assert [s.fire_ms for s in client.slots("tick")] == [T0, T0 + 2000]
            clock.advance(0.5)
            client.schedule("tick", "t.odd", cron=ODD)
            await node.run_once()
            slots = {s.fire_ms: (s.status.value, s.task) for s in client.slots("tick")}
            # T0 was due and stays; T0+2 s is withdrawn; the odd seconds up to now + 3 s are made
            assert slots == {T0: ("scheduled", "t.even"), T0 + 2000: ("cancelled", "t.even"),
                             T0 + 1000: ("scheduled", "t.odd"),
                             T0 + 3000: ("scheduled", "t.odd")}
            clock.advance(2)
            await node.run_once()
            assert [s.fire_ms for s in client.slots("tick") if s.task == "t.odd"] == [
                T0 + i * 1000 for i in (1, 3, 5)]
        finally:
            await conn.aclose()

    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        asyncio.run(go(client))


def promote_ahead(url: str, ns: str, clock: ManualClock, ahead_ms: int) -> None:
    async def go() -> None:
        conn = async_redis(url)
        try:
            await Promoter(conn, [Keys(ns).prefix(s) for s in range(SHARDS)], clock,
                           ahead_ms=ahead_ms).run_once()
        finally:
            await conn.aclose()
    asyncio.run(go())


def test_a_redefinition_withdraws_what_was_dispatched_ahead_and_leaves_what_is_due(
        r: Any, redis_url: str, ns: str, tmp_path: Path) -> None:
    """Every second, then every two: at T0+1.2 s the occurrence at T0 runs, T0+1 s is queued
    and due, T0+2 s and T0+3 s were dispatched ahead (a worker read them and was told EARLY),
    T0+4 s is scheduled. The redefinition withdraws the last three, entries and all, and
    history says so; the new definition makes T0+2 s and T0+4 s again, running its task."""
    clock = ManualClock(T0)
    history = f"sqlite://{tmp_path / 'history.sqlite3'}"

    def snapshot() -> dict[int, str]:
        asyncio.run(drain(redis_url, ns, history, config=SnapshotterConfig(retention_s=None)))
        return {x.fire_ms: x.status.value for x in client.history(job_id="tick", limit=100)}

    with Client(redis_url, ns, shards=SHARDS, clock=clock, history=history) as client:
        client.schedule("tick", "t.old", cron="* * * * * *")
        clock.advance(1.2)
        materialize(redis_url, ns, clock, SHARDS)  # T0 .. T0+4 s
        promote_ahead(redis_url, ns, clock, 2000)  # T0, T0+1 s; T0+2 s and T0+3 s early
        s = Shard(r, client, clock, "tick")
        entries = {int(slot.rpartition(":")[2]) - T0: (q, msg, slot) for q, msg, slot in s.read()}
        assert sorted(entries) == [0, 1000, 2000, 3000]
        assert [c[0] for c in s.claim([entries[0], entries[2000]])] == [Code.OK, Code.EARLY]
        assert snapshot()[T0 + 3000] == "queued"

        client.schedule("tick", "t.new", cron=EVEN)
        status = {x.fire_ms - T0: (x.status.value, x.task) for x in client.slots("tick")}
        assert status == {0: ("running", "t.old"), 1000: ("queued", "t.old"),
                          **{t: ("cancelled", "t.old") for t in (2000, 3000, 4000)}}
        # their entries are acked and deleted: no worker claims one or keeps its job fields
        for t in (2000, 3000):
            assert r.xrange(s.stream, entries[t][1], entries[t][1]) == []
        held = r.xpending_range(s.stream, "workers", "-", "+", 10)
        assert sorted(e["message_id"] for e in held) == sorted(
            entries[t][1] for t in (0, 1000))  # running, and read for now
        cancelled = [rec for kind, recs in s.events() if kind == "cancelled" for rec in recs]
        assert cancelled == [{"slot": f"tick:{T0 + t}", "reason": "redefined"}
                             for t in (2000, 3000, 4000)]
        assert s.claim([entries[2000]])[0][0] == Code.STALE  # the worker held it: refused
        assert snapshot()[T0 + 3000] == "cancelled"

        materialize(redis_url, ns, clock, SHARDS)
        promote_ahead(redis_url, ns, clock, 2000)
        status = {x.fire_ms - T0: (x.status.value, x.task) for x in client.slots("tick")}
        assert status[2000] == ("queued", "t.new") and status[4000] == ("scheduled", "t.new")
        assert status[3000] == ("cancelled", "t.old")
        [new] = [e for e in s.read() if e[2] == f"tick:{T0 + 2000}"]
        clock.advance(0.8)
        [grant] = s.claim([new])
        assert grant[0] == Code.OK and grant[2] == b"t.new"
        assert snapshot()[T0 + 2000] == "running"


def test_a_redefinition_keeps_the_series_active_slot_and_missed_count(
        r: Any, redis_url: str, ns: str) -> None:
    """overlap="skip" asks whether the job's last dispatched slot (`active`) still runs: a
    redefinition while it runs must not forget it."""
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        client.schedule("tick", "t", cron="* * * * * *", overlap="skip")
        materialize(redis_url, ns, clock, SHARDS)
        promote_ahead(redis_url, ns, clock, 0)  # T0 dispatched: the job's active slot
        key = Keys(ns).job(shard_of("tick", SHARDS), "tick")
        r.hset(key, "missed", 7)
        client.schedule("tick", "t", cron=EVEN, overlap="skip")
        assert r.hmget(key, "active", "missed") == [f"tick:{T0}".encode(), b"7"]


def test_a_name_that_is_not_a_schedule_is_refused(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        with pytest.raises(TypeError, match="cron"):
            client.schedule("x", "t")  # type: ignore[call-arg]
        with pytest.raises(ValidationError, match="needs cron"):
            client.schedule("x", "t", cron="")
        with pytest.raises(ValidationError, match="name"):
            client.schedule("a b", "t", cron="* * * * *")
        with pytest.raises(TypeError, match="delay"):  # not an option of a schedule
            client.schedule("x", "t", cron="* * * * *", delay=5)  # type: ignore[call-arg]
        client.submit("t", delay=60, dedupe_key="d")
        once = client.list_jobs()[0].job_id
        with pytest.raises(ValidationError, match="does not recur"):
            client.schedule(once, "t", cron="* * * * *")


DECLARE = """
import sys, time
from scheduler import Client
url, ns, start, task = sys.argv[1:5]
with Client(url, ns) as client:
    client.now_ms()
    time.sleep(max(0, float(start) - time.time()))
    client.schedule("every-second", task, cron="* * * * * *")
"""


@pytest.mark.slow  # eight processes: ~2.7 s each
@pytest.mark.parametrize("changed", [False, True])
def test_eight_processes_declaring_at_once_make_one_series(redis_url: str, ns: str,
                                                           changed: bool) -> None:
    with Client(redis_url, ns) as client:
        client.create_namespace()
        if changed:  # a deploy that changes the spec: every process replaces it at once
            client.schedule("every-second", "t.v1", cron="*/5 * * * * *")
        start = time.time() + 1.5
        procs = [subprocess.Popen([sys.executable, "-c", DECLARE, redis_url, ns, str(start),
                                   "t.v2"], stderr=subprocess.PIPE) for _ in range(8)]
        errors = [p.communicate(timeout=60)[1].decode() for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, errors
        jobs = client.list_jobs()
        assert [j.job_id for j in jobs] == ["every-second"]
        assert (jobs[0].task, jobs[0].cron) == ("t.v2", "* * * * * *")


def fired(path: Path) -> list[dict[str, int | str]]:
    """The runs test.record_fire wrote (tests/app_tasks.py), outside the Redis under test."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow  # a real node and worker on the real clock: ~20 s
def test_a_running_node_and_worker_take_a_redefined_cadence_from_the_next_second(
        redis_url: str, ns: str, app_env: dict[str, str], tmp_path: Path) -> None:
    """`sched scheduler` (its default lookahead and --promote-ahead, 3 s each: occurrences
    are created and dispatched ahead of their time) and `sched worker` run on, started before
    the first declaration; the schedule goes from even seconds to odd ones. From a second
    after the redefinition every run is on the new cadence, and every new occurrence runs."""
    runs = tmp_path / "runs.jsonl"
    node = sched_process(redis_url, ns, app_env, "scheduler", "--log-level", "warning")
    worker = sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry",
                           "--log-level", "warning")
    with running(worker, node), Client(redis_url, ns) as client:
        client.schedule("ticker", "test.record_fire", {"file": str(runs), "v": "even"},
                        cron=EVEN)
        wait_for(lambda: len(fired(runs)) >= 3, 30, "three runs on the even cadence")

        def promoted_ahead() -> bool:  # an occurrence queued with its time still ahead
            now = client.now_ms()
            return any(s.status is SlotStatus.QUEUED and s.fire_ms > now + 300
                       for s in client.slots("ticker"))

        wait_for(promoted_ahead, 5, "an occurrence dispatched ahead of its time")
        redefined = client.now_ms()
        client.schedule("ticker", "test.record_fire", {"file": str(runs), "v": "odd"},
                        cron=ODD)
        time.sleep(8)
        end = client.now_ms()
    assert (node.returncode, worker.returncode) == (0, 0)
    rows = fired(runs)
    old = [r for r in rows if int(r["fire_ms"]) >= redefined + 1000
           and (int(r["fire_ms"]) // 1000 % 2 == 0 or r["v"] != "odd")]
    assert not old, f"runs on the old definition after the redefinition: {old}"
    expected = {s * 1000 for s in range((redefined + 1000) // 1000 + 1, (end - 1500) // 1000)
                if s % 2}
    missing = expected - {int(r["fire_ms"]) for r in rows}
    assert not missing, f"occurrences of the new cadence that never ran: {sorted(missing)}"
    late = [r for r in rows if int(r["fire_ms"]) in expected
            and int(r["started_ms"]) - int(r["fire_ms"]) > 1000]
    assert not late, f"new occurrences started over a second late: {late}"
