"""Handlers used by tests that run real worker processes. Effects are recorded in Redis so the
test process can count them: `<ns>:test:effects` hash, slot id -> times the effect happened."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import redis.asyncio

from scheduler import Context, Registry, Retry

registry = Registry()
_client: redis.asyncio.Redis | None = None


def _redis() -> redis.asyncio.Redis:
    global _client
    if _client is None:
        # As many connections as handlers run at once (redis-py 8 caps a pool at 100).
        _client = redis.asyncio.Redis.from_url(os.environ["SCHED_TEST_REDIS_URL_APP"],
                                               max_connections=100_000)
    return _client


@registry.task("test.sleep_then_effect")
async def sleep_then_effect(ctx: Context, payload: Any) -> None:
    await asyncio.sleep(float(payload["seconds"]))
    await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("test.effect")
async def effect(ctx: Context, payload: Any) -> None:
    await _redis().hincrby(payload["effects"], ctx.slot_id, 1)


@registry.task("test.where_started")
async def where_started(ctx: Context, payload: Any) -> None:
    """Records "claim" when the handler runs inside the claim that started it (an eager
    start), "loop" when the loop scheduled it."""
    import sys

    from scheduler.worker.claims import Claims

    frame, place = sys._getframe(), "loop"
    while frame is not None:
        if frame.f_code is Claims.claim.__code__:
            place = "claim"
        frame = frame.f_back  # type: ignore[assignment]
    await _redis().hset(payload["effects"], ctx.slot_id, place)


@registry.task("test.sync_sleep")
def sync_sleep(ctx: Context, payload: Any) -> None:
    time.sleep(float(payload["seconds"]))


def spin(iterations: int) -> int:
    """Pure-Python CPU, holding the GIL as CPU-bound handlers do."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


@registry.task("test.spin_and_record")
def spin_and_record(ctx: Context, payload: Any) -> None:
    """CPU-bound work, then a line in a file of this process's own (payload["dir"]/pid): the
    test counts where each run ran without asking the Redis under test."""
    spin(int(payload["iterations"]))
    fd = os.open(os.path.join(payload["dir"], str(os.getpid())),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{ctx.slot_id}\n".encode())
    finally:
        os.close(fd)


# --- tasks for the fault-injection suite (tests/faults) ---------------------------------------
# The ground truth of what handlers did (tests/faults/truth.py), kept in a Redis other than the
# one under test: payload["effects"] names a hash, slot id -> effects; `<effects>:starts`
# counts handler starts; `<effects>:log` has a JSON line per start and per end.


def chaos(name: str) -> Any:
    """Register a chaos task whose every start and end is recorded."""
    def wrap(fn: Any) -> Any:
        async def run(ctx: Context, payload: Any) -> Any:
            key = payload["effects"]
            r = _redis()
            pipe = r.pipeline(transaction=False)
            pipe.hincrby(f"{key}:starts", ctx.slot_id, 1)
            pipe.rpush(f"{key}:log", _line(ctx, "start"))
            await pipe.execute()
            outcome = "failed"
            try:
                result = await fn(ctx, payload, key)
                outcome = "ok"
                return result
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            finally:
                await r.rpush(f"{key}:log", _line(ctx, outcome))
        return registry.task(name)(run)
    return wrap


def _line(ctx: Context, event: str) -> str:
    return json.dumps({"slot": ctx.slot_id, "attempt": ctx.attempt, "pid": os.getpid(),
                       "event": event, "t": time.time()})


async def _effect(key: str, ctx: Context) -> None:
    await _redis().hincrby(key, ctx.slot_id, 1)


@chaos("chaos.noop")
async def chaos_noop(ctx: Context, payload: Any, key: str) -> None:
    await _effect(key, ctx)


@chaos("chaos.slow")
async def chaos_slow(ctx: Context, payload: Any, key: str) -> dict[str, Any]:
    """Logs a line and returns a result: history must hold both (the history rule)."""
    ctx.logger.info("sleeping %s s", payload["seconds"])
    await asyncio.sleep(float(payload["seconds"]))
    await _effect(key, ctx)
    return {"slept": payload["seconds"], "attempt": ctx.attempt}


@chaos("chaos.flaky")
async def chaos_flaky(ctx: Context, payload: Any, key: str) -> None:
    """Fails its first `fail_first` attempts, then has its effect."""
    if ctx.attempt <= int(payload["fail_first"]):
        ctx.logger.warning("attempt %d fails on purpose", ctx.attempt)
        raise RuntimeError(f"flaky: attempt {ctx.attempt} fails on purpose")
    await _effect(key, ctx)


@chaos("chaos.once")
async def chaos_once(ctx: Context, payload: Any, key: str) -> None:
    """exactly_once: the effect is guarded by ctx.once, so it happens once per slot."""
    await asyncio.sleep(float(payload.get("seconds", 0)))
    if await ctx.once("effect"):
        await _effect(key, ctx)


@chaos("chaos.hang")
async def chaos_hang(ctx: Context, payload: Any, key: str) -> None:
    await asyncio.sleep(3600)


@chaos("chaos.poison")
async def chaos_poison(ctx: Context, payload: Any, key: str) -> None:
    """Fails with an error whose text cannot be encoded as UTF-8 (a lone surrogate, as
    os.fsdecode gives for undecodable bytes), and a huge one."""
    raise RuntimeError("\udcff undecodable \ud800 " + "x" * 100_000)


@registry.task("test.record_fire")
def record_fire(ctx: Context, payload: Any) -> None:
    """Appends a JSON line (slot, fire_ms, started_ms, the payload's `v`) to the file
    payload["file"]: a record kept outside the Redis under test."""
    line = json.dumps({"slot": ctx.slot_id, "fire_ms": ctx.fire_ms, "v": payload.get("v"),
                       "started_ms": int(time.time() * 1000)})
    with open(payload["file"], "a") as f:
        f.write(line + "\n")


@registry.task("test.retry_after")
async def retry_after(ctx: Context, payload: Any) -> None:
    """Passes on an upstream's Retry-After, whatever it says."""
    raise Retry(after=float(payload["after"]), reason="upstream said wait")


def _append(path: str, line: str) -> None:
    # One write of a short line to a file opened for appending: whole, whatever other
    # processes append meanwhile.
    with open(path, "a") as f:
        f.write(line + "\n")


@registry.task("test.span_to_file")
async def span_to_file(ctx: Context, payload: Any) -> None:
    """Appends "<slot> start <t>" and "<slot> end <t>" (wall clock) to the file
    payload["file"] names: a record kept outside the Redis under test."""
    _append(payload["file"], f"{ctx.slot_id} start {time.time()!r}")
    await asyncio.sleep(float(payload["seconds"]))
    _append(payload["file"], f"{ctx.slot_id} end {time.time()!r}")


@registry.task("test.start_then_sleep")
async def start_then_sleep(ctx: Context, payload: Any) -> None:
    """Appends "<group> <start> <fire_ms>" (wall clock, seconds) to the file payload["file"]
    names, then sleeps payload["seconds"]: who started when, kept outside the Redis under
    test."""
    _append(payload["file"], f"{payload['g']} {time.time()!r} {ctx.fire_ms}")
    if payload["seconds"]:
        await asyncio.sleep(float(payload["seconds"]))
