"""The heartbeat's deadlines run on the injected clock: a test moves a ManualClock and sees
the watchdog stop a run before its lease can run out, and a renewal push the deadline on,
without sleeping."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio

from helpers import LEASE, W, make
from scheduler import Client
from scheduler.redis.clock import ManualClock
from scheduler.scripts import replies
from scheduler.worker.heartbeat import Heartbeat
from scheduler.worker.inflight import Run


def test_the_watchdog_and_the_renewal_follow_the_injected_clock(
        r: redis.Redis, client: Client, clock: ManualClock, redis_url: str) -> None:
    s = make(r, client, clock)
    entries = s.read()
    [grant] = replies.claimed(sum(s.claim(entries), []), entries)
    assert grant is not None

    async def scenario() -> tuple[list[int], str | None]:
        conn = redis.asyncio.Redis.from_url(redis_url)
        run = Run(s.shard, s.slot_id, grant, deadline=clock.monotonic() + LEASE / 1000)
        run.handler = asyncio.create_task(asyncio.sleep(3600))
        run.begun = True
        beat = Heartbeat(conn, s.keys, clock, W, LEASE, 10, ["q"], {s.slot_id: run})
        stopped = []
        try:
            clock.advance(LEASE / 1000 - beat.margin_s - 0.01)
            stopped.append(beat.watch())  # just outside the margin: keeps running
            await beat.run_once()  # renewed at this (manual) instant: a full lease again
            clock.advance(LEASE / 1000 - beat.margin_s - 0.01)
            stopped.append(beat.watch())
            clock.advance(0.02)  # inside the margin, no heartbeat since: stop it
            stopped.append(beat.watch())
            return stopped, run.stop_reason
        finally:
            run.handler.cancel()
            await conn.aclose()

    stopped, reason = asyncio.run(scenario())
    assert stopped == [0, 0, 1] and reason == "lost"


def test_a_run_is_announced_by_its_first_renewal_only(
        r: redis.Redis, client: Client, clock: ManualClock, redis_url: str) -> None:
    """A run still going at the heartbeat is told to history once ("claimed": the claim
    itself writes no event), by the first beat that renewed its lease."""
    s = make(r, client, clock)
    entries = s.read()
    [grant] = replies.claimed(sum(s.claim(entries), []), entries)
    assert grant is not None

    async def scenario() -> list[bool]:
        conn = redis.asyncio.Redis.from_url(redis_url)
        run = Run(s.shard, s.slot_id, grant, deadline=clock.monotonic() + LEASE / 1000)
        run.handler = asyncio.create_task(asyncio.sleep(3600))
        beat = Heartbeat(conn, s.keys, clock, W, LEASE, 10, ["q"], {s.slot_id: run})
        announced = [run.announced]
        try:
            for _ in range(2):
                await beat.run_once()
                announced.append(run.announced)
            return announced
        finally:
            run.handler.cancel()
            await conn.aclose()

    assert asyncio.run(scenario()) == [False, True, True]
    assert [(kind, data) for kind, data in s.events() if kind == "claimed"] == [
        ("claimed", [{"slot": s.slot_id, "attempt": 1}])]
