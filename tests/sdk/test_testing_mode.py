"""The testing mode (scheduler.testing): the real scripts and services on fakeredis and a fake
clock, with no Redis server. Every test here runs behind a guard that refuses, and records,
any socket connection the process tries: none may be tried."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler import Cancel, Client, Registry, Retry, RetryPolicy
from scheduler.core.errors import HandlerFailed, RedisUnavailable, ResultTimeout, RunFailed
from scheduler.scripts.source import SOURCES
from scheduler.testing import TestScheduler, fakeserver

START = datetime(2030, 1, 1, tzinfo=UTC)
registry = Registry()
seen: list[tuple[str, int, int]] = []  # (task, fire_ms, the fake clock when it ran)
clock_of: list[TestScheduler] = []


def _saw(ctx: Any) -> None:
    seen.append((ctx.task, ctx.fire_ms, clock_of[0].clock.now_ms()))


@registry.task("tick")
def tick(ctx: Any, payload: Any) -> None:
    _saw(ctx)


@registry.task("double")
async def double(ctx: Any, payload: Any) -> Any:
    _saw(ctx)
    return {"twice": payload["n"] * 2}


@registry.task("boom")
async def boom(ctx: Any, payload: Any) -> None:
    _saw(ctx)
    raise RuntimeError(f"boom on attempt {ctx.attempt}")


@registry.task("busy")
async def busy(ctx: Any, payload: Any) -> str:
    _saw(ctx)
    if ctx.attempt < 3:
        raise Retry(after=10, reason="server busy")
    return "sent"


@registry.task("never")
async def never(ctx: Any, payload: Any) -> None:
    raise Cancel("not wanted")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every connect the process tries is refused and recorded; none may happen."""
    tried: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> Any:
        tried.append(address)
        raise ConnectionRefusedError(f"the testing mode's tests reach no server ({address})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield tried
    assert not tried, f"something tried to connect: {tried}"


@pytest.fixture
def sched() -> Iterator[TestScheduler]:
    seen.clear()
    with TestScheduler(registry, start=START) as s:
        clock_of[:] = [s]
        yield s


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def test_the_guard_sees_a_connection_attempt(no_network: list[Any]) -> None:
    """The guard itself can fail: a real Client's first call tries to connect."""
    with Client("redis://127.0.0.1:6379/0", "t", timeout_s=0.2) as client:
        with pytest.raises(RedisUnavailable):
            client.submit("tick")
    assert no_network
    no_network.clear()


def test_an_immediate_job_runs_on_drain_and_its_result_is_kept(sched: TestScheduler) -> None:
    job_id = sched.client.submit("double", {"n": 21})
    [ran] = sched.drain()
    assert (ran.job_id, ran.task, ran.attempt, ran.outcome) == (job_id, "double", 1, "succeeded")
    assert ran.result == {"twice": 42} and ran.fire_ms == ms(START)
    assert sched.client.result(job_id) == {"twice": 42}
    assert sched.drain() == []  # nothing runs twice


def test_result_drains_first(sched: TestScheduler) -> None:
    job_id = sched.client.submit("double", {"n": 2})
    assert sched.client.result(job_id) == {"twice": 4}
    assert [r.task for r in sched.ran] == ["double"]


def test_a_delayed_job_runs_when_the_clock_reaches_it(sched: TestScheduler) -> None:
    job_id = sched.client.submit("tick", delay=30)
    assert sched.drain() == [] and sched.advance(29.999) == []
    with pytest.raises(ResultTimeout):  # not due yet: result() says so, it does not wait
        sched.client.result(job_id)
    [ran] = sched.advance(0.001)
    assert ran.fire_ms == ms(START + timedelta(seconds=30)) and ran.outcome == "succeeded"
    assert seen == [("tick", ran.fire_ms, ran.fire_ms)]


def test_a_cron_fires_every_minute_of_three_simulated_minutes(sched: TestScheduler) -> None:
    sched.client.submit("tick", cron="* * * * *")
    ran = sched.advance(180)
    fires = [ms(START + timedelta(minutes=m)) for m in range(4)]
    assert [r.fire_ms for r in ran] == fires and {r.outcome for r in ran} == {"succeeded"}
    # Each occurrence ran at its own time, not when the clock stopped.
    assert seen == [("tick", f, f) for f in fires]
    assert sched.now == START + timedelta(minutes=3)


@pytest.mark.slow  # 181 runs on fakeredis: ~1.5 s
def test_a_cron_fires_every_second_of_three_simulated_minutes(sched: TestScheduler) -> None:
    sched.client.submit("tick", cron="* * * * * *")
    sched.advance(180)
    fires = [ms(START) + 1000 * s for s in range(181)]
    assert seen == [("tick", f, f) for f in fires]


def test_retries_fall_due_then_the_slot_is_dead_lettered(sched: TestScheduler) -> None:
    policy = RetryPolicy(max_attempts=3, base_s=1, max_s=60, jitter=0)
    job_id = sched.client.submit("boom", retry=policy)
    first = sched.drain(raise_errors=False)
    later = sched.advance(10, raise_errors=False)  # 1 s, then 2 s of backoff
    runs = first + later
    assert [(r.attempt, r.outcome) for r in runs] == [(1, "failed"), (2, "failed"),
                                                      (3, "failed")]
    assert [r.error.split(" (at ")[0] for r in runs if r.error] == [
        f"RuntimeError: boom on attempt {n}" for n in (1, 2, 3)]
    assert [f - START.timestamp() * 1000 for _, _, f in seen] == [0, 1000, 3000]
    [dead] = sched.client.dead_letters()
    assert dead.slot.slot_id == runs[0].slot_id and dead.slot.status == "dead"
    with pytest.raises(RunFailed) as failed:
        sched.client.result(job_id)
    assert failed.value.status == "dead" and "boom on attempt 3" in (failed.value.error or "")


def test_a_handler_error_surfaces_to_the_test_with_its_own_exception(
        sched: TestScheduler) -> None:
    sched.client.submit("boom", retry=RetryPolicy(max_attempts=2, base_s=5, jitter=0))
    with pytest.raises(HandlerFailed, match="boom on attempt 1") as info:
        sched.drain()
    assert isinstance(info.value.__cause__, RuntimeError)
    [run] = info.value.runs
    assert run.exception is info.value.__cause__ and run.outcome == "failed"
    # It was committed as a worker commits it: the retry waits in the due set.
    [slot] = sched.client.slots(run.job_id)
    assert slot.status == "scheduled" and slot.available_ms == ms(START) + 5000


def test_an_unknown_task_is_a_handler_error(sched: TestScheduler) -> None:
    sched.client.submit("no.such.task")
    with pytest.raises(HandlerFailed, match="unknown task 'no.such.task'"):
        sched.drain()


def test_retry_and_cancel_steer_the_slot_and_are_not_errors(sched: TestScheduler) -> None:
    job_id = sched.client.submit("busy")
    cancelled = sched.client.submit("never")
    runs = sched.drain()
    assert sorted((r.task, r.outcome) for r in runs) == [("busy", "retried"),
                                                        ("never", "cancelled")]
    assert [r.attempt for r in sched.advance(20)] == [2, 3]
    assert sched.client.result(job_id) == "sent"
    with pytest.raises(RunFailed, match="cancelled"):
        sched.client.result(cancelled)


def test_jobs_of_any_queue_run(sched: TestScheduler) -> None:
    ids = [sched.client.submit("double", {"n": n}, queue=q) for n, q in ((1, "mail"), (2, "x"))]
    sched.drain()
    assert [sched.client.result(i) for i in ids] == [{"twice": 2}, {"twice": 4}]


def test_keyed_jobs_of_any_queue_run_in_their_keys_turns(sched: TestScheduler) -> None:
    """The tenants guide's own example: a job with a concurrency key in a queue of its own."""
    sched.client.set_queue_limit("exports", per_key_concurrency=1)
    ids = [sched.client.submit("double", {"n": n}, queue="exports", concurrency_key=key)
           for n, key in ((1, "tenant-42"), (2, "tenant-42"), (3, "tenant-7"))]
    ids.append(sched.client.submit("double", {"n": 4}, queue="reports", concurrency_key="t"))
    sched.drain()
    assert [sched.client.result(i) for i in ids] == [{"twice": 2 * n} for n in (1, 2, 3, 4)]


def test_what_ran_is_the_projects_own_lua(sched: TestScheduler) -> None:
    sched.client.submit("tick", cron="* * * * * *")
    sched.client.submit("boom", retry=RetryPolicy(max_attempts=2, base_s=1, jitter=0))
    sched.advance(3, raise_errors=False)
    cache = {sha.decode() for sha in sched.server.script_cache}
    by_sha = {s.sha: name for name, s in SOURCES.items()}
    assert {"submit", "materialize", "promote", "claim", "complete", "fail"} <= {
        by_sha[sha] for sha in cache if sha in by_sha}
    # Redis's own clock is the fake one: stream ids carry the simulated time.
    entries = sched.client.redis.xrange(sched.client.keys.events(0))
    assert {int(e[0].split(b"-")[0]) for e in entries} <= {ms(START) + d for d in range(0, 3001)}


def test_cmsgpack_in_scripts_unpacks_what_scripts_pack() -> None:
    client = fakeserver.sync_client(fakeserver.server())
    packed = fakeserver._encoder.encode(["a", 7, 2.5, ["x", {"k": "v"}], True])
    assert client.eval("local t = cmsgpack.unpack(ARGV[1]); return {t[1], t[2], t[4][1], "
                       "t[4][2].k, tostring(t[3]), tostring(t[5])}", 0, packed) == [
        b"a", 7, b"x", b"v", b"2.5", b"true"]
    assert client.eval("return cmsgpack.pack({1, 'b'})", 0) == fakeserver._encoder.encode(
        [1, "b"])
    with pytest.raises(Exception, match="cmsgpack.unpack"):
        client.eval("return cmsgpack.unpack(ARGV[1])", 0, b"\xc1")


def test_two_testing_modes_one_after_the_other_keep_nothing(sched: TestScheduler) -> None:
    sched.client.submit("tick")
    sched.drain()
    with TestScheduler(registry, start=START + timedelta(days=1)) as other:
        assert other.client.list_jobs() == [] and other.drain() == []
        assert other.client.now_ms() == ms(START + timedelta(days=1))
    assert sched.client.now_ms() == ms(START)
