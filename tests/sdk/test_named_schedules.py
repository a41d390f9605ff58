"""Named schedules: a deploy declares its recurring jobs on every start (Client.schedule), and
what it declares again must neither duplicate the series nor rewrite it, while a changed
spec replaces it from the next occurrence. The race is real: eight processes at once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from scheduler import Client, SlotStatus, ValidationError
from scheduler.clock import ManualClock
from scheduler.connection import async_redis
from scheduler.keys import Keys, shard_of
from scheduler.materializer import Materializer

T0 = 1_700_000_000_000
SHARDS = 4


def materialize(url: str, ns: str, clock: ManualClock) -> None:
    async def go() -> None:
        client = async_redis(url)
        try:
            await Materializer(client, [Keys(ns).prefix(s) for s in range(SHARDS)],
                               clock).run_once()
        finally:
            await client.aclose()
    asyncio.run(go())


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
        materialize(redis_url, ns, clock)  # T0, T0+2 s (3 s ahead)
        assert [s.fire_ms for s in client.slots(job_id)] == [T0, T0 + 2000]
        clock.advance(0.5)
        client.schedule("tick", "t.new", {"v": 2}, cron="* * * * * *", queue="fast")
        job = client.get_job(job_id)
        assert (job.task, job.queue, job.payload, job.cron) == ("t.new", "fast", {"v": 2},
                                                                 "* * * * * *")
        materialize(redis_url, ns, clock)
        slots = {s.fire_ms: s for s in client.slots(job_id)}
        # T0 was due under the old definition and stays; T0+2 s is made again, as t.new
        assert slots[T0].task == "t.old" and slots[T0].status is SlotStatus.SCHEDULED
        assert sorted(slots) == [T0, T0 + 1000, T0 + 2000, T0 + 3000]
        assert {slots[f].task for f in sorted(slots)[1:]} == {"t.new"}
        assert {slots[f].queue for f in sorted(slots)[1:]} == {"fast"}


def test_a_name_that_is_not_a_schedule_is_refused(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        with pytest.raises(ValidationError, match="needs cron"):
            client.schedule("x", "t")
        with pytest.raises(ValidationError, match="name"):
            client.schedule("a b", "t", cron="* * * * *")
        with pytest.raises(ValidationError, match="delay"):
            client.schedule("x", "t", cron="* * * * *", delay=5)
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
