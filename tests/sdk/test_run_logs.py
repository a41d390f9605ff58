"""A handler's ctx.logger lines are kept with its attempt (whatever the worker's log level),
bounded, and shown by `sched runs`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers import run_until, sched
from scheduler import Client, Context, Registry, Retry, RetryPolicy, SlotStatus
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import RedisClock
from scheduler.worker.registry import LOG_LINES
from scheduler.worker.worker import Worker, WorkerConfig


def test_each_attempt_keeps_the_lines_it_logged(redis_url: str, ns: str,
                                                capsys: pytest.CaptureFixture[str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)  # the worker logs at WARNING: the lines are kept anyway
    registry = Registry()

    @registry.task("mail")
    async def mail(ctx: Context, payload: Any) -> None:
        ctx.logger.info("sending to %s (attempt %d)", payload["to"], ctx.attempt)
        ctx.logger.debug("not kept: below INFO")
        if ctx.attempt == 1:
            ctx.logger.warning("server busy")
            raise Retry(after=0.05, reason="busy")
        ctx.logger.info("sent")

    @registry.task("chatty")
    async def chatty(ctx: Context, payload: Any) -> None:
        for i in range(LOG_LINES + 50):
            ctx.logger.info("line %d", i)

    @registry.task("quiet")
    async def quiet(ctx: Context, payload: Any) -> None:
        pass

    with Client(redis_url, ns) as client:
        job = client.submit("mail", {"to": "a@example.com"}, retry=RetryPolicy(max_attempts=3,
                                                                               base_s=0.05))
        noisy = client.submit("chatty")
        silent = client.submit("quiet")
        asyncio.run(run_until(redis_url, ns, registry, lambda: all(
            client.slots(j)[0].status is SlotStatus.SUCCEEDED for j in (job, noisy, silent)),
            node=True))
        first, second = client.slots(job)[0].attempts
        [many] = client.slots(noisy)[0].attempts
        [none] = client.slots(silent)[0].attempts
    assert [line.split(" ", 1)[1] for line in first.log or []] == [
        "INFO sending to a@example.com (attempt 1)", "WARNING server busy"]
    assert [line.split(" ", 1)[1] for line in second.log or []] == [
        "INFO sending to a@example.com (attempt 2)", "INFO sent"]
    assert many.log is not None and len(many.log) == LOG_LINES + 1
    assert many.log[-1] == "(50 more line(s) not kept)"
    assert none.log is None
    code, out, _ = sched(capsys, redis_url, ns, "runs", job)
    assert code == 0 and "| " in out and "INFO sent" in out and "WARNING server busy" in out


class _AheadClock(RedisClock):
    """The worker's clock when Redis's host clock runs AHEAD_MS ahead of the worker's host:
    what every time a worker writes (started_ms, finished_ms, leases) is read on."""

    def anchor(self, redis_time: Any) -> None:
        super().anchor(redis_time)
        self._base_ms += AHEAD_MS


AHEAD_MS = 5_000
DAY_MS = 86_400_000


def _time_of_day_ms(line: str) -> int:
    hms, _, ms = line.split(" ", 1)[0].partition(".")
    h, m, s = (int(part) for part in hms.split(":"))
    return ((h * 60 + m) * 60 + s) * 1000 + int(ms or 0)


def test_a_run_log_line_is_stamped_by_the_clock_its_attempt_started_on(
        redis_url: str, ns: str) -> None:
    """started_ms comes from the worker's clock (Redis TIME): so do its log lines' stamps,
    so no line reads earlier than the run that logged it, whatever the host's clock says."""
    registry = Registry()

    @registry.task("logs.async")
    async def logs_async(ctx: Context, payload: Any) -> None:
        ctx.logger.info("first line")

    @registry.task("logs.sync")
    def logs_sync(ctx: Context, payload: Any) -> None:
        ctx.logger.info("first line")

    async def go(client: Client) -> list[str]:
        conn = async_redis(redis_url)
        worker = Worker(conn, registry, namespace=ns, config=WorkerConfig(block_ms=50),
                        clock=_AheadClock())
        task = asyncio.create_task(worker.run())
        try:
            ids = await asyncio.to_thread(client.submit_many, [
                {"task": "logs.async" if i % 2 else "logs.sync", "payload": i}
                for i in range(200)])
            for _ in range(1500):
                if all(s.status is SlotStatus.SUCCEEDED for s in await asyncio.to_thread(
                        lambda: [s for j in ids for s in client.slots(j)])):
                    return ids
                await asyncio.sleep(0.01)
            raise AssertionError("the runs did not all succeed within 15 s")
        finally:
            worker.stop()
            await task
            await conn.aclose()

    with Client(redis_url, ns) as client:
        ids = asyncio.run(go(client))
        attempts = [a for j in ids for s in client.slots(j) for a in s.attempts]
    assert len(attempts) == 200
    for a in attempts:
        assert a.started_ms is not None and a.log, a
        # The stamp is a time of day (UTC): how far after the start it reads, within a day.
        after_ms = (_time_of_day_ms(a.log[0]) - a.started_ms % DAY_MS) % DAY_MS
        assert after_ms < 60_000, (a.log[0], a.started_ms)


def test_sched_runs_shows_each_attempt_under_its_slot_within_100_columns(
        redis_url: str, ns: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each slot, then each attempt (how it ended, when, how long, where) with its error and
    log lines wrapped under it, then the result: no line past 100 columns, nothing lost. An
    attempt whose handler raised Retry reads `retried`, not `failed`."""
    registry = Registry()
    long_error = "the mail server refused the connection " * 6  # ~230 characters

    @registry.task("flaky")
    async def flaky(ctx: Context, payload: Any) -> str:
        ctx.logger.info("try %d %s", ctx.attempt, "of a long line " * 10)
        if ctx.attempt == 1:
            raise ValueError(long_error)
        if ctx.attempt == 2:
            raise Retry(after=0.05, reason="upstream busy")
        return "done"

    with Client(redis_url, ns) as client:
        job = client.submit("flaky", priority=2,
                            retry=RetryPolicy(max_attempts=3, base_s=0.05, jitter=0))
        asyncio.run(run_until(redis_url, ns, registry, lambda: client.slots(job)[0].status
                              is SlotStatus.SUCCEEDED, node=True))
        [slot] = client.slots(job)
    code, out, _ = sched(capsys, redis_url, ns, "runs", job)
    assert code == 0
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert lines[0].split() == [slot.slot_id, "succeeded", "priority", "2"]
    attempts = [line for line in lines if line.startswith("  #")]
    assert [a.split()[:2] for a in attempts] == [["#1", "failed"], ["#2", "retried"],
                                                 ["#3", "succeeded"]]
    for line, attempt in zip(attempts, slot.attempts, strict=True):
        _, _, started, _, took, _, worker = line.split()
        assert started.endswith("Z") and took.endswith("ms") and worker == attempt.worker
    # The error and the log lines wrap under their attempt, whole: joined again they read as
    # the attempt's own text.
    first = lines[lines.index(attempts[0]) + 1:lines.index(attempts[1])]
    assert all(line.startswith("      ") for line in first)
    text = " ".join(" ".join(line.split()) for line in first)
    assert text.startswith("ValueError: " + " ".join(long_error.split()))
    assert "| " in text and "INFO try 1 " + " ".join(("of a long line " * 10).split()) in text
    assert lines[lines.index(attempts[1]) + 1].split() == ["upstream", "busy"]
    assert lines[-1] == '  result "done"'
