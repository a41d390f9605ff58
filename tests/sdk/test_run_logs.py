"""A handler's ctx.logger lines are kept with its attempt (whatever the worker's log level),
bounded, and shown by `sched runs`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers import run_until, sched
from scheduler import Client, Context, Registry, Retry, RetryPolicy, SlotStatus
from scheduler.registry import LOG_LINES


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
