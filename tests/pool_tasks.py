"""Handlers that run in a worker's process pool, in tests: a child imports them by module and
name, so they live at the top of a module. What they did comes back in their return value,
or, for a run the worker kills, in a file the test names in the payload."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import msgspec

from scheduler import Cancel, Registry, Retry, SyncContext
from scheduler.core.errors import LeaseLost

registry = Registry()


@registry.task("pool.report", pool="process")
def report(ctx: SyncContext, payload: Any) -> dict[str, Any]:
    """Its context, where it ran, and what ctx.once said the first and second time."""
    ctx.logger.info("building %s", payload["name"])
    ctx.logger.warning("half way")
    first, again = ctx.once("send"), ctx.once("send")
    return {"slot_id": ctx.slot_id, "job_id": ctx.job_id, "attempt": ctx.attempt,
            "fire_ms": ctx.fire_ms, "task": ctx.task, "delivery": ctx.delivery,
            "idempotency_key": ctx.idempotency_key, "pid": os.getpid(),
            "once": [first, again], "payload": payload}


@registry.task("pool.steer", pool="process")
def steer(ctx: SyncContext, payload: Any) -> int:
    """Retry on the first attempt, then raise or cancel as asked."""
    if ctx.attempt == 1:
        raise Retry(0, "not yet")
    if payload == "raise":
        raise ValueError(f"bad input on attempt {ctx.attempt}")
    if payload == "cancel":
        raise Cancel("no point")
    return ctx.attempt


@registry.task("pool.spin", pool="process")
def spin(ctx: SyncContext, payload: Any) -> int:
    """Pure-Python CPU for `seconds` on its first attempt (past its timeout, in the tests),
    after writing its pid and start time to `file`; a later attempt returns at once."""
    if ctx.attempt == 1:
        with open(payload["file"], "w") as f:
            json.dump({"pid": os.getpid(), "at": time.time()}, f)
        end = time.monotonic() + payload["seconds"]
        while time.monotonic() < end:
            sum(range(1000))
    return os.getpid()


@registry.task("pool.mark", pool="process")
def mark(ctx: SyncContext, payload: Any) -> int:
    """Appends a line (its pid, start time and attempt) to `file` each time it begins, then
    spins for `seconds`: the file counts its executions."""
    with open(payload["file"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "at": time.time(), "attempt": ctx.attempt})
                + "\n")
    end = time.monotonic() + payload["seconds"]
    while time.monotonic() < end:
        sum(range(1000))
    return os.getpid()


@registry.task("pool.pid", pool="process")
def pid(ctx: SyncContext, payload: Any) -> int:
    return os.getpid()


@registry.task("pool.die", pool="process")
def die(ctx: SyncContext, payload: Any) -> int:
    """Its child exits under it on the first attempt (as a segfault or the OOM killer would
    end it)."""
    if ctx.attempt == 1:
        os._exit(3)
    return ctx.attempt


@registry.task("pool.late_once", pool="process")
def late_once(ctx: SyncContext, payload: Any) -> str:
    """On its first attempt: waits for the file `go`, then asks ctx.once, and writes what
    that did to `out` (its lease is gone by then, in the test)."""
    if ctx.attempt > 1:
        return "later attempt"
    go, out = Path(payload["go"]), Path(payload["out"])
    Path(payload["started"]).write_text(str(os.getpid()))
    while not go.exists():
        time.sleep(0.01)
    try:
        out.write_text(f"once said {ctx.once('charge')}")
    except LeaseLost as exc:
        out.write_text(f"LeaseLost: {exc}")
        raise
    return "first attempt"


@registry.task("pool.progress", pool="process")
def progress(ctx: SyncContext, payload: Any) -> str:
    """Reports progress from a child (a bad value first: it raises here, in the handler),
    then outlives a heartbeat interval so the report rides one."""
    try:
        ctx.progress(2, "too far")
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    ctx.progress(0.5, "half\nway")
    time.sleep(payload)
    return refused


@registry.task("pool.later", pool="process")
def later(ctx: SyncContext, payload: Any) -> int:
    """Asks, on its first attempt, to be tried again `payload` seconds later."""
    if ctx.attempt == 1:
        raise Retry(float(payload), "later")
    return ctx.attempt


class Point(msgspec.Struct):
    x: int
    y: int


@registry.task("pool.typed", pool="process")
def typed(ctx: SyncContext, payload: Point) -> str:
    """A typed payload, decoded into its Struct in the child."""
    return f"{type(payload).__name__} {payload.x ** 2 + payload.y ** 2}"


@registry.task("pool.nap", pool="process")
def nap(ctx: SyncContext, payload: Any) -> int:
    """Holds its child `payload` seconds; returns the child's pid."""
    time.sleep(float(payload))
    return os.getpid()
