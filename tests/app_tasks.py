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
