"""Example tasks for the demo and `sched worker --app scheduler.dev.examples.tasks:registry`."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from scheduler import Context, Registry

registry = Registry()


@registry.task("demo.hello")
async def hello(ctx: Context, payload: Any) -> None:
    ctx.logger.info("hello %s (slot %s, attempt %d)", payload, ctx.slot_id, ctx.attempt)


@registry.task("demo.noop")
async def noop(ctx: Context, payload: Any) -> None:
    return None


@registry.task("demo.sleep")
async def sleep(ctx: Context, payload: Any) -> None:
    await asyncio.sleep(float((payload or {}).get("seconds", 0.5)))


@registry.task("demo.flaky")
async def flaky(ctx: Context, payload: Any) -> None:
    if random.random() < float((payload or {}).get("fail_rate", 0.5)):  # nosec B311 # a demo
        raise RuntimeError("flaky task failed on purpose")


@registry.task("demo.cpu")
def cpu(ctx: Context, payload: Any) -> int:
    """A plain def: runs in the worker's thread pool."""
    return sum(i * i for i in range(int((payload or {}).get("n", 10_000))))
