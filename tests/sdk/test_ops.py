"""Operator actions end to end: dead-letter then replay, cancel in each state, ctx.once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from helpers import run_until, sched
from scheduler import Client, Context, Registry, RetryPolicy, SlotStatus


def test_dead_letter_then_replay(capsys: pytest.CaptureFixture[str], redis_url: str,
                                 ns: str) -> None:
    registry = Registry()
    broken = {"on": True}

    @registry.task("pay")
    async def pay(ctx: Context, payload: Any) -> None:
        if broken["on"]:
            raise ConnectionError("payment gateway down")

    with Client(redis_url, ns) as client:
        job_id = client.submit("pay", {"n": 1}, retry=RetryPolicy(max_attempts=2, base_s=0.01))
        [slot] = client.slots(job_id)
        asyncio.run(run_until(redis_url, ns, registry, lambda: client.get_slot(
            slot.slot_id).status is SlotStatus.DEAD, node=True))

        code, out, _ = sched(capsys, redis_url, ns, "dlq", "list", "--json")
        [dead] = json.loads(out)
        assert dead["slot"]["slot_id"] == slot.slot_id
        assert dead["error"].startswith("ConnectionError: payment gateway down")
        code, out, _ = sched(capsys, redis_url, ns, "dlq", "list")
        assert slot.slot_id in out and "payment gateway down" in out
        code, out, _ = sched(capsys, redis_url, ns, "dlq", "show", slot.slot_id)
        assert "#2" in out and "failed" in out

        broken["on"] = False
        code, out, _ = sched(capsys, redis_url, ns, "dlq", "replay", "--all", "--json")
        assert json.loads(out) == {"replayed": 1}
        asyncio.run(run_until(redis_url, ns, registry, lambda: client.get_slot(
            slot.slot_id).status is SlotStatus.SUCCEEDED))
        after = client.slots(job_id)
        assert [s.slot_id for s in after] == [slot.slot_id]  # the same slot, a new attempt
        assert [a.outcome for a in after[0].attempts] == ["failed", "failed", "succeeded"]
        assert client.dead_letters() == []
        code, _, err = sched(capsys, redis_url, ns, "dlq", "replay")
        assert code == 2 and err == "error: give SLOT_IDs or --all (not both)\n"


def test_purge_keeps_the_slot(capsys: pytest.CaptureFixture[str], redis_url: str,
                              ns: str) -> None:
    registry = Registry()

    @registry.task("bad")
    async def bad(ctx: Context, payload: Any) -> None:
        raise ValueError("nope")

    with Client(redis_url, ns) as client:
        job_id = client.submit("bad", retry=RetryPolicy(max_attempts=1))
        asyncio.run(run_until(redis_url, ns, registry, lambda: bool(client.dead_letters())))
        [slot] = client.slots(job_id)
        code, out, _ = sched(capsys, redis_url, ns, "dlq", "purge", slot.slot_id)
        assert out.strip() == "purged 1 slot(s)"
        assert client.dead_letters() == [] and client.get_slot(slot.slot_id).status is SlotStatus.DEAD


def test_cancel_queued_and_running(capsys: pytest.CaptureFixture[str], redis_url: str,
                                   ns: str) -> None:
    registry = Registry()
    started: list[asyncio.Event] = []

    @registry.task("long")
    async def long(ctx: Context, payload: Any) -> None:
        started[0].set()
        await asyncio.sleep(60)

    with Client(redis_url, ns) as client:
        queued = client.submit("never.runs")
        code, out, _ = sched(capsys, redis_url, ns, "cancel", queued, "--json")
        [(slot_id, what)] = json.loads(out).items()
        assert what == "cancelled" and client.get_slot(slot_id).status is SlotStatus.CANCELLED
        code, out, _ = sched(capsys, redis_url, ns, "cancel", slot_id)
        assert "already finished" in out

        running = client.submit("long")

        async def scenario() -> None:
            started.append(asyncio.Event())

            async def cancel_when_running() -> None:
                await started[0].wait()
                [slot] = client.slots(running)
                assert client.cancel(running, "user asked")[slot.slot_id].startswith(
                    "cancel requested")
            canceller = asyncio.create_task(cancel_when_running())
            await run_until(redis_url, ns, registry, lambda: client.slots(running)[0].status
                            is SlotStatus.CANCELLED, lease_s=1.5, timeout=15)
            await canceller
        asyncio.run(scenario())
        [slot] = client.slots(running)
        assert slot.attempts[-1].outcome == "cancelled"
        code, _, _ = sched(capsys, redis_url, ns, "cancel", "nope:1")
        assert code == 1


def test_once_records_an_effect_once_across_attempts(redis_url: str, ns: str) -> None:
    registry = Registry()
    effects: list[tuple[int, bool]] = []

    @registry.task("charge")
    async def charge(ctx: Context, payload: Any) -> None:
        first = await ctx.once("charge-card")
        effects.append((ctx.attempt, first))
        if ctx.attempt == 1:
            raise RuntimeError("crashed after charging")

    with Client(redis_url, ns) as client:
        job_id = client.submit("charge", delivery="exactly_once",
                               retry=RetryPolicy(max_attempts=3, base_s=0.01))
        asyncio.run(run_until(redis_url, ns, registry, lambda: client.slots(job_id)[0].status
                              is SlotStatus.SUCCEEDED, node=True))
    assert effects == [(1, True), (2, False)]
