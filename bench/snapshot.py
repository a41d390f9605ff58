"""Snapshot: how fast the snapshotter writes history into Postgres, and whether it keeps up.

1. Throughput: `--events` submissions (one event record each) are made with submit_many,
   then one in-process Snapshotter drains them; rows/s counts job + slot rows committed.
2. Lifecycle capacity (`--lifecycle-jobs`, 0 to skip): that many jobs are submitted and run to
   success first (no snapshotter), then the snapshotter drains their whole lifecycle
   (submitted, claimed, succeeded); jobs/s is how many jobs' history it writes per second, to
   compare with the 10,000 jobs/s target when it has a core of its own.
3. Keeping up (`--load-rate` jobs/s for `--load-seconds`, 0 to skip): submit_many and a
   worker run jobs in this process while a `sched snapshotter` process writes history;
   reports the events backlog (consumer-group lag + pending) during the load and how long it
   takes to drain after it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import redis
import redis.asyncio

from scheduler import AsyncClient, Client, Context, Registry
from scheduler.core.keys import HISTORY_GROUP, Keys
from scheduler.history.snapshotter import Snapshotter, SnapshotterConfig
from scheduler.history.store import open_store
from scheduler.worker.worker import Worker, WorkerConfig

from .common import drop_namespace, fresh_namespace, machine
from .history import DEFAULT_DSN, pg_schema


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3, help="repeat and report the median")
    p.add_argument("--read-count", type=int, default=100)
    p.add_argument("--lifecycle-jobs", type=int, default=100_000)
    p.add_argument("--load-rate", type=int, default=10_000, help="jobs/s; 0 skips part 2")
    p.add_argument("--load-seconds", type=float, default=20.0)
    p.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--out", default=None)


async def _drain(url: str, ns: str, dsn: str, read_count: int) -> tuple[float, int, int]:
    client = redis.asyncio.Redis.from_url(url)
    store = open_store(dsn)
    snap = Snapshotter(client, store, namespace=ns,
                       config=SnapshotterConfig(read_count=read_count, retention_s=None,
                                                defer_s=0))
    t = time.perf_counter()
    while await snap.run_once():
        pass
    await snap.settle()
    elapsed = time.perf_counter() - t
    await client.aclose()
    store.close()
    return elapsed, snap.rows, snap.events


def _throughput(args: argparse.Namespace, r: redis.Redis) -> dict[str, float]:
    ns = fresh_namespace("snap")
    try:
        with Client(args.redis_url, ns) as client:
            for i in range(0, args.events, 10_000):
                client.submit_many([{"task": "bench.noop", "payload": j}
                                    for j in range(i, min(args.events, i + 10_000))])
        with pg_schema(args.postgres_dsn) as dsn:
            open_store(dsn).upgrade()
            seconds, rows, _ = asyncio.run(_drain(args.redis_url, ns, dsn, args.read_count))
        return {"seconds": seconds, "rows": rows, "rows_per_s": rows / seconds,
                "events_per_s": args.events / seconds}
    finally:
        drop_namespace(r, ns)


async def _run_all(url: str, ns: str, n: int) -> None:
    registry = Registry()
    done = asyncio.Event()
    count = [0]

    @registry.task("bench.noop")
    async def noop(ctx: Context, payload: Any) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    conn = redis.asyncio.Redis.from_url(url)
    worker = Worker(conn, registry, namespace=ns,
                    config=WorkerConfig(concurrency=1000, batch=500, block_ms=100))
    task = asyncio.create_task(worker.run())
    await done.wait()
    worker.stop()
    await task
    await conn.aclose()


def _lifecycle(args: argparse.Namespace, r: redis.Redis) -> dict[str, float]:
    import uvloop

    ns = fresh_namespace("snaplife")
    n = args.lifecycle_jobs
    try:
        with Client(args.redis_url, ns) as client:
            for i in range(0, n, 10_000):
                client.submit_many([{"task": "bench.noop"}] * min(10_000, n - i))
        uvloop.run(_run_all(args.redis_url, ns, n))
        with pg_schema(args.postgres_dsn) as dsn:
            open_store(dsn).upgrade()
            seconds, rows, entries = uvloop.run(_drain(args.redis_url, ns, dsn,
                                                       args.read_count))
        return {"jobs": n, "seconds": seconds, "jobs_per_s": n / seconds, "rows": rows,
                "rows_per_s": rows / seconds}
    finally:
        drop_namespace(r, ns)


def _backlog(r: redis.Redis, keys: Keys, shards: int) -> int:
    pipe = r.pipeline(transaction=False)
    for s in range(shards):
        pipe.xinfo_groups(keys.events(s))
    total = 0
    for groups in pipe.execute(raise_on_error=False):
        for g in groups if isinstance(groups, list) else []:
            if g["name"].decode() == HISTORY_GROUP:
                total += int(g.get("lag") or 0) + int(g["pending"])
    return total


async def _load(args: argparse.Namespace, ns: str, dsn: str) -> dict[str, Any]:
    registry = Registry()
    done = [0]

    @registry.task("bench.noop")
    async def noop(ctx: Context, payload: Any) -> None:
        done[0] += 1

    sync = redis.Redis.from_url(args.redis_url)
    client = AsyncClient(args.redis_url, ns)
    await client.submit_many([{"task": "bench.noop"}])  # creates the namespace
    shards = int(sync.hget(Keys(ns).meta, "shards") or 8)
    proc = subprocess.Popen(  # noqa: ASYNC220 (started once, before the measured part)
        [sys.executable, "-m", "scheduler.cli", "--redis-url", args.redis_url, "--namespace", ns,
         "snapshotter", "--postgres-dsn", dsn, "--keep-redis", "--log-level", "warning"],
        env=dict(os.environ))
    wredis = redis.asyncio.Redis.from_url(args.redis_url)
    worker = Worker(wredis, registry, namespace=ns,
                    config=WorkerConfig(concurrency=1000, batch=500, block_ms=100))
    wtask = asyncio.create_task(worker.run())
    keys = Keys(ns)
    samples: list[int] = []
    submitted = 0
    t0 = time.perf_counter()
    tick = 0.1
    while (elapsed := time.perf_counter() - t0) < args.load_seconds:
        due = int(args.load_rate * elapsed) - submitted
        if due > 0:
            await client.submit_many([{"task": "bench.noop"}] * due)
            submitted += due
        if int(elapsed * 10) % 10 == 0:
            samples.append(_backlog(sync, keys, shards))
        await asyncio.sleep(tick)
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    while done[0] < submitted or _backlog(sync, keys, shards) > 0:
        if time.perf_counter() - t1 > 120:
            break
        await asyncio.sleep(0.1)
    drain_s = time.perf_counter() - t1
    worker.stop()
    await wtask
    proc.terminate()
    proc.wait(30)
    await wredis.aclose()
    await client.aclose()
    sync.close()
    return {"jobs": submitted, "load_s": load_s, "executed_per_s": done[0] / (load_s + drain_s),
            "backlog_max": max(samples or [0]), "backlog_median": statistics.median(samples or [0]),
            "drain_after_load_s": drain_s}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import uvloop

    r = redis.Redis.from_url(args.redis_url)
    runs = [_throughput(args, r) for _ in range(args.runs)]
    med = statistics.median(x["rows_per_s"] for x in runs)
    summary = (f"snapshot: {args.events} events x{args.runs}: {med:,.0f} rows/s into Postgres "
               f"(median; {statistics.median(x['events_per_s'] for x in runs):,.0f} events/s)")
    lifecycle: list[dict[str, float]] = []
    if args.lifecycle_jobs:
        lifecycle = [_lifecycle(args, r) for _ in range(args.runs)]
        summary += (f"; lifecycle of {args.lifecycle_jobs} jobs: "
                    f"{statistics.median(x['jobs_per_s'] for x in lifecycle):,.0f} jobs/s "
                    f"(median)")
    load: dict[str, Any] | None = None
    if args.load_rate:
        ns = fresh_namespace("snapload")
        try:
            with pg_schema(args.postgres_dsn) as dsn:
                open_store(dsn).upgrade()
                load = uvloop.run(_load(args, ns, dsn))
        finally:
            drop_namespace(r, ns)
        summary += (f"; load {args.load_rate} jobs/s for {args.load_seconds:g}s: backlog max "
                    f"{load['backlog_max']} events entries, drained "
                    f"{load['drain_after_load_s']:.1f}s after the load")
    return {"summary": summary, "runs": runs, "median_rows_per_s": med,
            "lifecycle": lifecycle, "load": load,
            "machine": machine(r)}
