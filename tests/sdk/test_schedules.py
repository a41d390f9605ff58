"""Managing a series: delete a recurring job, see its next fire times, trigger one run now.
Driven with a manual clock and the real materializer and promoter (run_once)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from helpers import make_dead, run_until, sched
from scheduler import Client, Context, Registry, SlotStatus, ValidationError
from scheduler.core.errors import JobNotFound
from scheduler.core.keys import Keys
from scheduler.core.timing import ms_of_utc
from scheduler.node.materializer import Materializer
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock

T0 = 1_700_000_000_000  # a whole second
SHARDS = 4


def materialize(url: str, ns: str, clock: ManualClock) -> int:
    async def go() -> int:
        client = async_redis(url)
        m = Materializer(client, [Keys(ns).prefix(s) for s in range(SHARDS)], clock)
        try:
            await m.run_once()
        finally:
            await client.aclose()
        return m.created
    return asyncio.run(go())


def test_a_deleted_cron_job_fires_no_more_and_its_waiting_slots_are_cancelled(
        redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *")
        assert materialize(redis_url, ns, clock) == 4  # T0 .. T0+3 s, 3 s ahead
        clock.advance(0.5)
        done = client.delete_job(job_id, reason="replaced by v2")
        assert (done.cancelled, done.running, done.before) == (4, 0, False)
        for _ in range(5):  # the nodes go on: nothing new for this job
            clock.advance(1)
            materialize(redis_url, ns, clock)
        slots = client.slots(job_id)
        assert [s.status for s in slots] == [SlotStatus.CANCELLED] * 4
        job = client.get_job(job_id)
        assert job.deleted_ms == T0 + 500 and job.deleted == "replaced by v2"
        assert job.next_fire_ms is None and client.next_fires(job_id) == []
        assert client.delete_job(job_id).before  # a second delete changes nothing
        with pytest.raises(ValidationError, match="was deleted"):
            client.trigger(job_id)
        with pytest.raises(JobNotFound):
            client.delete_job("no-such-job")


def test_a_running_slot_of_a_deleted_job_finishes(redis_url: str, ns: str) -> None:
    registry, started, release = Registry(), asyncio.Event(), asyncio.Event()
    results: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        started.set()
        await release.wait()
        results.append(ctx.slot_id)

    with Client(redis_url, ns) as client:
        job_id = client.submit("t", cron="* * * * * *")
        client.trigger(job_id)  # a slot now, without a node

        async def go() -> None:
            async def delete_when_started() -> None:
                await started.wait()
                done = await asyncio.to_thread(client.delete_job, job_id)
                assert (done.running, done.before) == (1, False)
                release.set()
            await asyncio.gather(delete_when_started(), run_until(
                redis_url, ns, registry, lambda: bool(results)))
        asyncio.run(go())
        [slot] = client.slots(job_id)
    assert slot.status is SlotStatus.SUCCEEDED  # it ran to the end and committed


def test_next_fires_follow_the_cron_its_zone_and_its_end(redis_url: str, ns: str) -> None:
    clock = ManualClock(T0 + 250)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="*/15 * * * *", tz="Europe/Paris",
                               end_at=datetime.fromtimestamp((T0 + 3_600_000) / 1000, UTC))
        fires = client.next_fires(job_id, 10)
        assert all(f.tzinfo is UTC for f in fires)  # aware, in UTC whatever the job's zone
        ms = [ms_of_utc(f) for f in fires]
        assert ms and all(f % 900_000 == 0 for f in ms) and ms == sorted(ms)
        assert ms[0] > T0 and all(f <= T0 + 3_600_000 for f in ms)
        assert len(fires) == 4  # a quarter hour each, within the hour left
        once = client.submit("t", delay=30)
        [at] = client.next_fires(once)
        assert at == datetime(2023, 11, 14, 22, 13, 50, 250_000, tzinfo=UTC)
        assert ms_of_utc(at) == T0 + 250 + 30_000
        with pytest.raises(ValidationError, match="from 1 to 1000"):
            client.next_fires(job_id, 0)


def test_trigger_runs_one_more_slot_now(redis_url: str, ns: str) -> None:
    registry, ran = Registry(), []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran.append(ctx.slot_id)

    with Client(redis_url, ns) as client:
        job_id = client.submit("t", {"n": 1}, cron="0 0 1 1 *")  # once a year
        slot = client.trigger(job_id)
        again = client.trigger(job_id)
        assert slot != again and slot.startswith(f"{job_id}:")
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(ran) == 2))
        assert sorted(ran) == sorted([slot, again])
        assert {s.slot_id for s in client.slots(job_id)} >= {slot, again}


def test_the_cli_ends_a_series_and_cancel_says_how(capsys: pytest.CaptureFixture[str],
                                                   redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        job_id = client.submit("t", cron="* * * * *")
    code, out, err = sched(capsys, redis_url, ns, "cancel", job_id)
    assert code == 1 and "sched jobs delete" in err and err.count("\n") == 1
    with Client(redis_url, ns) as client:
        assert client.get_job(job_id).deleted_ms is None  # nothing changed
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "next", job_id, "-n", "3")
    assert code == 0 and len(out.splitlines()) == 3 and out.count(":00.000Z") == 3
    listed = [datetime.fromisoformat(line) for line in out.splitlines()]
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "next", job_id, "-n", "3", "--json")
    fires = json.loads(out)
    assert code == 0 and [datetime.fromisoformat(f["fire_time"]) for f in fires] == listed
    assert [f["fire_ms"] for f in fires] == [ms_of_utc(t) for t in listed]
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "trigger", job_id)
    assert code == 0 and out.strip().startswith(f"{job_id}:")
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "delete", job_id)
    assert code == 0 and "deleted" in out
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "delete", job_id)
    assert code == 0 and "deleted before" in out
    code, out, err = sched(capsys, redis_url, ns, "jobs", "delete", "nope")
    assert code == 1 and "no job 'nope'" in err


def test_dlq_commands_say_what_they_could_not_find_and_purge_all_asks(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, redis_url: str,
        ns: str) -> None:
    with Client(redis_url, ns) as client:
        [job_id] = make_dead(client, redis_url, ns)
        dead = client.slots(job_id)[0].slot_id
    for verb in ("replay", "purge"):
        code, _, err = sched(capsys, redis_url, ns, "dlq", verb, "nope:1")
        assert code == 1 and "1 of 1 slot(s) were not in the dead-letter queue" in err
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("n\n"))
    code, _, err = sched(capsys, redis_url, ns, "dlq", "purge", "--all")
    assert code == 1 and "purge all 1 dead slot(s)" in err and "nothing purged" in err
    with Client(redis_url, ns) as client:
        assert [d.slot.slot_id for d in client.dead_letters()] == [dead]  # still there
    code, out, _ = sched(capsys, redis_url, ns, "dlq", "purge", "--all", "--yes")
    assert code == 0 and "purged 1 slot(s)" in out


def test_jobs_show_of_a_busy_cron_shows_its_last_slots(capsys: pytest.CaptureFixture[str],
                                                      redis_url: str, ns: str) -> None:
    clock = ManualClock(T0)
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as client:
        job_id = client.submit("t", cron="* * * * * *")
        for _ in range(10):
            materialize(redis_url, ns, clock)
            clock.advance(3)
        total = len(client.slots(job_id))
    assert total > 25
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "show", job_id)
    assert code == 0 and f"the last 20 of {total} slots" in out
    assert out.count(f"{job_id}:") == 20
