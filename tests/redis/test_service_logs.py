"""What the services tell an operator: a failed handler's traceback (rate-limited per task),
and start, stop and progress lines."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers import run_until
from scheduler import Client, Context, Registry, RetryPolicy, SlotStatus
from scheduler.redis.service import Service


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
    from scheduler.history.snapshotter import Snapshotter, SnapshotterConfig
    from scheduler.history.store import open_store
    from scheduler.redis.clients import async_redis

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
    lines = [r.getMessage() for r in caplog.records if r.name == "scheduler.history.snapshotter"]
    assert any(" started (namespace " in line for line in lines), lines
    assert any(" stopped (" in line and "row(s) written" in line for line in lines), lines


def test_every_attempt_that_ends_a_slot_dead_logs_one_line_naming_it(
        redis_url: str, ns: str, caplog: pytest.LogCaptureFixture) -> None:
    """The traceback of a failing task is rate-limited (once per task per 10 s); the line
    saying a slot is dead is not: each dead slot needs a person, however many die at once."""
    from scheduler.node.node import SchedulerNode
    from scheduler.redis.clients import async_redis
    from scheduler.worker.worker import Worker, WorkerConfig

    registry = Registry()

    @registry.task("always.fails")
    async def fails(ctx: Context, payload: Any) -> None:
        raise ValueError(f"bad input {payload} on attempt {ctx.attempt}")

    caplog.set_level(logging.WARNING, logger="scheduler")
    n = 30

    async def go() -> list[str]:
        conn = async_redis(redis_url)
        services: list[Any] = [
            Worker(conn, registry, namespace=ns, config=WorkerConfig(block_ms=50)),
            SchedulerNode(conn, namespace=ns)]  # it promotes the retries
        tasks = [asyncio.create_task(s.run()) for s in services]
        try:
            with Client(redis_url, ns) as client:  # the worker runs before the first submit
                ids = await asyncio.to_thread(client.submit_many, [
                    {"task": "always.fails", "payload": i,
                     "retry": RetryPolicy(max_attempts=2, base_s=0.05, jitter=0)}
                    for i in range(n)])
                for _ in range(1000):  # within 10 s
                    slots = await asyncio.to_thread(
                        lambda: [s for j in ids for s in client.slots(j)])
                    if all(s.status is SlotStatus.DEAD for s in slots):
                        return [s.slot_id for s in slots]
                    await asyncio.sleep(0.01)
                raise AssertionError("the slots did not all die within 10 s")
        finally:
            for s in services:
                s.stop()
            await asyncio.gather(*tasks)
            await conn.aclose()

    dead = asyncio.run(go())
    tracebacks = [r for r in caplog.records if r.name == "scheduler.handler"]
    assert len(tracebacks) < n  # the rate limit held most of them back
    lines = [r for r in caplog.records if r.levelno == logging.WARNING and " is dead" in
             r.getMessage()]
    assert sorted(r.slot_id for r in lines) == sorted(dead)  # type: ignore[attr-defined]
    for r in lines:
        text = r.getMessage()
        payload = next(i for i, s in enumerate(dead) if s == r.slot_id)  # type: ignore[attr-defined]
        assert r.name == "scheduler.worker.worker" and "always.fails" in text, text
        assert "attempt 2 failed" in text, text
        assert f"ValueError: bad input {payload} on attempt 2" in text, text
