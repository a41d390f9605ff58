"""A long run's progress (ctx.progress): each report rides the worker's next heartbeat, so the
SDK and the console's slot page show it within one heartbeat interval, and a slot page left
open in a browser refreshes itself to the last step; bad values raise in the handler; hostile
text is escaped on the page."""

from __future__ import annotations

import asyncio
import math
import re
import time
from typing import Any

import pytest
from playwright.async_api import async_playwright, expect
from test_console import CHROMIUM

from helpers import http_get, running, sched, serve_console, until
from scheduler import AsyncClient, Context, Registry, SlotStatus
from scheduler.core.models import PROGRESS_MESSAGE_CHARS
from scheduler.redis.clients import async_redis
from scheduler.worker.worker import Worker, WorkerConfig

LEASE_S = 3.0
INTERVAL_S = LEASE_S / 3  # the heartbeat's
STEPS = 10
# What a poll adds to a heartbeat interval: the loop's own period, a page fetch, a busy box.
POLL_SLACK_S = 0.5
HOSTILE = "<script>alert(1)</script>"


def test_bad_progress_values_raise_in_the_handler() -> None:
    ctx = Context("j:1", "j", 1, 1, "t", "at_least_once")
    for fraction in (-0.01, 1.01, math.nan, math.inf, "0.5", True, None):
        with pytest.raises(ValueError, match="fraction must be a number from 0 to 1"):
            ctx.progress(fraction)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="message must be a string or None, not int"):
        ctx.progress(0.5, 3)  # type: ignore[arg-type]
    assert ctx.reported() is None  # nothing recorded by a refused call
    ctx.progress(1, "a\nb\x1b[31m" + "x" * 1000 + "\ud800")
    report = ctx.reported()
    assert report is not None
    fraction, message, _ = report
    assert fraction == 1.0 and isinstance(fraction, float)
    assert message is not None and message.startswith("a b\ufffd[31mxxx")
    assert len(message) == PROGRESS_MESSAGE_CHARS and message.isprintable()
    ctx.sent(report)
    assert ctx.reported() is None  # sent: the next heartbeat carries nothing for it
    ctx.progress(1, message)
    assert ctx.reported() is not None  # a new report, even the same values, goes again


def _step_on_page(body: str) -> int | None:
    m = re.search(r"(\d+)% step (\d+) of 10 (\S+)", body)
    if m is None:
        return None
    assert m.group(3) == "&lt;script&gt;alert(1)&lt;/script&gt;", m.group(0)
    return int(m.group(2))


async def _running(client: AsyncClient, slot_id: str) -> bool:
    return (await client.get_slot(slot_id)).status is SlotStatus.RUNNING


async def _watch(client: AsyncClient, job_id: str, slot_id: str, base: str,
                 sdk_seen: dict[int, float], page_seen: dict[int, float],
                 task: asyncio.Task[None]) -> None:
    """Polls the SDK and the slot's page until the run ends: when each step first shows."""
    deadline = time.monotonic() + STEPS * INTERVAL_S * 1.25 + 20
    while (await client.get_slot(slot_id)).status is not SlotStatus.SUCCEEDED:
        assert time.monotonic() < deadline, "the run did not end"
        assert not task.done(), task
        p = await client.progress(job_id)
        if p is not None:
            step = round(p.fraction * STEPS)
            assert p.message == f"step {step} of {STEPS} {HOSTILE}"
            sdk_seen.setdefault(step, time.monotonic())
        status, body = await asyncio.to_thread(http_get,
                                               f"{base}/slots/{slot_id}")
        assert status == 200 and HOSTILE not in body
        if (step := _step_on_page(body) or 0) > 0:
            page_seen.setdefault(step, time.monotonic())
            if step < STEPS:  # running: the page refreshes its fields itself
                assert f'hx-get="/slots/{slot_id}"' in body
        await asyncio.sleep(0.05)
    status, body = await asyncio.to_thread(http_get, f"{base}/slots/{slot_id}")
    assert _step_on_page(body) == STEPS and "hx-get" not in body  # ended: no refresh


@pytest.mark.slow
def test_each_step_of_a_long_run_shows_in_the_sdk_and_the_console_within_a_heartbeat(
        redis_url: str, ns: str, capsys: pytest.CaptureFixture[str]) -> None:
    proc, base = serve_console(redis_url, ns)  # the console first, as users start it
    reported: dict[int, float] = {}  # step -> when the handler reported it (ground truth)
    registry = Registry()

    @registry.task("long.report")
    async def long_report(ctx: Any, payload: Any) -> str:
        for step in range(1, STEPS + 1):
            reported[step] = time.monotonic()
            ctx.progress(step / STEPS, f"step {step} of {STEPS} {HOSTILE}")
            await asyncio.sleep(INTERVAL_S * 1.25)
        return "done"

    async def scenario() -> tuple[dict[int, float], dict[int, float], str]:
        conn = async_redis(redis_url)
        worker = Worker(conn, registry, namespace=ns,
                        config=WorkerConfig(lease_s=LEASE_S, block_ms=50))
        task = asyncio.create_task(worker.run())
        sdk_seen: dict[int, float] = {}
        page_seen: dict[int, float] = {}
        try:
            async with AsyncClient(redis_url, ns) as client:
                async with async_playwright() as p:
                    browser = await p.chromium.launch(executable_path=CHROMIUM,
                                                      args=["--no-sandbox"])
                    page = await browser.new_page()
                    refused: list[str] = []  # what the Content-Security-Policy refused
                    page.on("console", lambda m: refused.append(m.text)
                            if "Content Security Policy" in m.text else None)
                    job_id = await client.submit("long.report")
                    [slot] = await client.slots(job_id)
                    watch = asyncio.create_task(_watch(client, job_id, slot.slot_id, base,
                                                       sdk_seen, page_seen, task))
                    await until("the run", lambda: _running(client, slot.slot_id))
                    await page.goto(f"{base}/slots/{slot.slot_id}")  # opened once, early
                    opened = _step_on_page(await page.content()) or 0
                    await watch
                    # Never reloaded, the page has refreshed its fields up to the last step.
                    await expect(page.locator("#fields")).to_contain_text(
                        f"100% step {STEPS} of {STEPS}", timeout=5000)
                    await browser.close()
                assert opened < 3 and not refused, (opened, refused)
        finally:
            worker.stop()
            await task
            await conn.aclose()
        return sdk_seen, page_seen, job_id

    with running(proc):
        sdk_seen, page_seen, job_id = asyncio.run(scenario())
    assert sorted(reported) == list(range(1, STEPS + 1))
    for name, seen in (("the SDK", sdk_seen), ("the console", page_seen)):
        after = {step: seen.get(step, math.inf) - reported[step] for step in reported}
        late = {step: "never" if s == math.inf else round(s, 2) for step, s in after.items()
                if s > INTERVAL_S + POLL_SLACK_S}
        assert not late, (f"{name} showed these steps later than a heartbeat interval "
                          f"({INTERVAL_S}s) after the handler reported them (s): {late}")
    code, out, _ = sched(capsys, redis_url, ns, "runs", job_id)
    assert code == 0 and "progress 100% step 10 of 10" in out, out
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "show", job_id)
    assert code == 0 and "100% step 10 of 10" in out, out
