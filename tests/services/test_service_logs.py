"""What the services tell an operator: a failed handler's traceback (rate-limited per task),
and start, stop and progress lines."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers import run_until
from scheduler import Client, Context, Registry, RetryPolicy, SlotStatus
from scheduler.loops import Service


def _boom(n: int) -> None:
    raise ValueError(f"bad input {n}")


def test_a_failed_handler_is_logged_with_its_traceback_once_per_task_per_interval(
        redis_url: str, ns: str, caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry()

    @registry.task("flaky")
    async def flaky(ctx: Context, payload: Any) -> None:
        _boom(payload)

    @registry.task("other")
    async def other(ctx: Context, payload: Any) -> None:
        raise KeyError("missing")

    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "flaky", "payload": i,
                                   "retry": RetryPolicy(max_attempts=1)} for i in range(50)])
        ids.append(client.submit("other", retry=RetryPolicy(max_attempts=1)))
        caplog.set_level(logging.ERROR, logger="scheduler.handler")
        asyncio.run(run_until(redis_url, ns, registry, lambda: all(
            s.status is SlotStatus.DEAD for j in ids for s in client.slots(j))))
    records = [r for r in caplog.records if r.name == "scheduler.handler"]
    assert sorted(r.task for r in records) == ["flaky", "other"]  # type: ignore[attr-defined]
    flaky_line = next(r for r in records if r.task == "flaky")  # type: ignore[attr-defined]
    assert "task flaky failed" in flaky_line.getMessage()
    text = caplog.text
    assert "Traceback" in text and "_boom" in text and "ValueError: bad input" in text


def test_a_service_says_what_it_did_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    class Counting(Service):
        progress_every_s = 0.0

        def __init__(self) -> None:
            super().__init__()
            self.passes = 0

        async def run_once(self) -> int:
            self.passes += 1
            if self.passes == 3:
                self.stop()
            return self.passes

        def delay(self, result: Any) -> float:
            return 0

        def progress(self) -> str | None:
            return f"{self.passes} pass(es) so far"

    caplog.set_level(logging.INFO, logger="scheduler")
    asyncio.run(Counting().run())
    assert [r.getMessage() for r in caplog.records] == [
        "1 pass(es) so far", "2 pass(es) so far", "3 pass(es) so far"]


def test_the_snapshotter_says_when_it_starts_and_stops(redis_url: str, ns: str, tmp_path: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    from scheduler.connection import async_redis
    from scheduler.snapshotter import Snapshotter, SnapshotterConfig
    from scheduler.store import open_store

    with Client(redis_url, ns) as client:
        client.submit("t")
    caplog.set_level(logging.INFO, logger="scheduler")

    async def go() -> None:
        conn = async_redis(redis_url)
        store = open_store(f"sqlite://{tmp_path / 'h.sqlite3'}")
        store.upgrade()
        snap = Snapshotter(conn, store, namespace=ns, config=SnapshotterConfig(settle_s=0))
        task = asyncio.create_task(snap.run())
        for _ in range(250):  # the first rows, within 5 s
            if snap.rows:
                break
            await asyncio.sleep(0.02)
        snap.stop()
        await task
        await conn.aclose()
        store.close()
    asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "scheduler.snapshotter"]
    assert any(" started (namespace " in line for line in lines), lines
    assert any(" stopped (" in line and "row(s) written" in line for line in lines), lines
