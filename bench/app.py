"""The handlers benchmark workers run (`--app bench.app:registry`)."""

from __future__ import annotations

import os
import threading
from typing import Any

from scheduler import Context, Registry

registry = Registry()


@registry.task("bench.noop")
async def noop(ctx: Context, payload: Any) -> None:
    return None


@registry.task("bench.echo")
async def echo(ctx: Context, payload: Any) -> Any:
    """Returns its payload: a result for `result()` to read (bench retention-soak)."""
    return payload


def spin(iterations: int) -> int:
    """Pure-Python CPU: the same work for every job, whatever runs it."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def _count() -> None:
    """`python -m bench cpu` counts finished jobs in its own Redis (a key it names), and
    how many each process ran."""
    global _counter
    # Made once under a lock: handler threads that each made one would drop the others',
    # closing a connection another thread is reading from (the job then fails, and with no
    # scheduler node in the bench its retry never runs).
    with _counter_lock:
        if _counter is None:
            import redis

            _counter = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    key = os.environ["BENCH_DONE_KEY"]
    pipe = _counter.pipeline(transaction=False)
    pipe.hincrby(f"{key}:by-pid", str(os.getpid()), 1)  # the share each process ran
    pipe.incr(key)
    pipe.execute()


_counter: Any = None
_counter_lock = threading.Lock()


# `python -m bench cpu`: the same task in the thread pool or the process pool (registries of
# their own: a worker of `registry` starts no process pool).
cpu_threads = Registry()
cpu_pool = Registry()


@cpu_threads.task("bench.cpu")
def cpu(ctx: Context, payload: Any) -> None:
    spin(payload)
    _count()


@cpu_pool.task("bench.cpu", pool="process")
def cpu_in_child(ctx: Context, payload: Any) -> None:
    spin(payload)
    _count()
