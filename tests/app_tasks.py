"""Handlers used by tests that run real worker processes. Effects are recorded in Redis so the
test process can count them: `<ns>:test:effects` hash, slot id -> times the effect happened."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis.asyncio

from scheduler import Context, Registry

registry = Registry()
_client: redis.asyncio.Redis | None = None


def _redis() -> redis.asyncio.Redis:
    global _client
    if _client is None:
        _client = redis.asyncio.Redis.from_url(os.environ["SCHED_TEST_REDIS_URL_APP"])
    return _client


@registry.task("test.sleep_then_effect")
async def sleep_then_effect(ctx: Context, payload: Any) -> None:
    await asyncio.sleep(float(payload["seconds"]))
    await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("test.effect")
async def effect(ctx: Context, payload: Any) -> None:
    await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("test.sync_sleep")
def sync_sleep(ctx: Context, payload: Any) -> None:
    time.sleep(float(payload["seconds"]))


# --- tasks for the fault-injection suite (tests/faults) ---------------------------------------
# Each records its effect in the hash named by payload["effects"], keyed by slot id.


@registry.task("chaos.noop")
async def chaos_noop(ctx: Context, payload: Any) -> None:
    await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("chaos.slow")
async def chaos_slow(ctx: Context, payload: Any) -> None:
    await asyncio.sleep(float(payload["seconds"]))
    await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("chaos.flaky")
async def chaos_flaky(ctx: Context, payload: Any) -> None:
    """Fails its first `fail_first` attempts, then has its effect."""
    if ctx.attempt <= int(payload["fail_first"]):
        raise RuntimeError(f"flaky: attempt {ctx.attempt} fails on purpose")
    await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("chaos.once")
async def chaos_once(ctx: Context, payload: Any) -> None:
    """exactly_once: the effect is guarded by ctx.once, so it happens once per slot."""
    await asyncio.sleep(float(payload.get("seconds", 0)))
    if await ctx.once("effect"):
        await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("chaos.hang")
async def chaos_hang(ctx: Context, payload: Any) -> None:
    await asyncio.sleep(3600)
