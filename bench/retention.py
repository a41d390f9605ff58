"""Retention: Redis memory under a steady load, with retention on and (for contrast) off.

Each mode gets a private redis-server, so `used_memory` is ours alone. One process submits
`--rate` jobs/s for `--seconds`, runs them with a worker, snapshots history (SQLite in a temp
dir, or `--postgres-dsn`) and applies retention (`--retention` seconds in Redis). Memory and
key count are sampled every second; the figure is the median of the last quarter over the
median of the second quarter (1.0 = flat).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

from scheduler import AsyncClient, Context, Registry
from scheduler.history.retention import Retention, RetentionConfig
from scheduler.history.snapshotter import Snapshotter, SnapshotterConfig
from scheduler.history.store import open_store
from scheduler.worker.worker import Worker, WorkerConfig

from .common import machine
from .history import pg_schema, private_redis


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=int, default=2000, help="jobs/s")
    p.add_argument("--seconds", type=float, default=16.0, help="per mode")
    p.add_argument("--retention", type=float, default=2.0, help="seconds in Redis")
    p.add_argument("--postgres-dsn", default=None, help="default: SQLite in a temp dir")
    p.add_argument("--out", default=None)


async def _steady(url: str, dsn: str, args: argparse.Namespace, retain: bool) -> dict[str, Any]:
    registry = Registry()

    @registry.task("bench.noop")
    async def noop(ctx: Context, payload: Any) -> None:
        pass

    ns = "bench"
    client = AsyncClient(url, ns)
    await client.submit_many([{"task": "bench.noop"}])
    conn = redis.asyncio.Redis.from_url(url)
    sync = redis.Redis.from_url(url)
    store, store2 = open_store(dsn), open_store(dsn)
    store.upgrade()
    snap = Snapshotter(conn, store, namespace=ns, config=SnapshotterConfig(
        retention_s=args.retention if retain else None, idle_sleep_s=0.05))
    ret = Retention(conn, namespace=ns, store=store2,
                    config=RetentionConfig(retention_s=args.retention, interval_s=0.25))
    worker = Worker(conn, registry, namespace=ns,
                    config=WorkerConfig(concurrency=500, batch=500, block_ms=50))
    services: list[Any] = [worker, snap] + ([ret] if retain else [])
    tasks = [asyncio.create_task(s.run()) for s in services]
    samples: list[tuple[float, int, int]] = []
    submitted, t0, last_sample = 0, time.perf_counter(), -1.0
    while (elapsed := time.perf_counter() - t0) < args.seconds:
        due = int(args.rate * elapsed) - submitted
        if due > 0:
            await client.submit_many([{"task": "bench.noop"}] * due)
            submitted += due
        if elapsed - last_sample >= 1.0:
            last_sample = elapsed
            info: Any = sync.info("memory")
            samples.append((elapsed, int(info["used_memory"]), int(sync.dbsize())))
        await asyncio.sleep(0.05)
    for s in services:
        s.stop()
    await asyncio.gather(*tasks)
    await client.aclose()
    await conn.aclose()
    sync.close()
    store.close()
    store2.close()
    q = max(1, len(samples) // 4)
    second, last = samples[q:2 * q], samples[-q:]
    mem2, mem4 = (statistics.median(m for _, m, _ in part) for part in (second, last))
    keys2, keys4 = (statistics.median(k for _, _, k in part) for part in (second, last))
    return {"retention": retain, "jobs": submitted, "samples": samples,
            "memory_mb_q2": mem2 / 1e6, "memory_mb_q4": mem4 / 1e6, "memory_ratio": mem4 / mem2,
            "keys_q2": keys2, "keys_q4": keys4, "deleted_slots": ret.deleted_slots}


def _mode(args: argparse.Namespace, retain: bool) -> dict[str, Any]:
    import uvloop

    with private_redis() as url, tempfile.TemporaryDirectory() as tmp:
        if args.postgres_dsn:
            with pg_schema(args.postgres_dsn) as dsn:
                return uvloop.run(_steady(url, dsn, args, retain))
        return uvloop.run(_steady(url, f"sqlite://{Path(tmp) / 'h.db'}", args, retain))


def run(args: argparse.Namespace) -> dict[str, Any]:
    on, off = _mode(args, True), _mode(args, False)
    ok = on["memory_ratio"] < 1.2
    summary = (f"retention: {args.rate} jobs/s for {args.seconds:g}s, {args.retention:g}s in "
               f"Redis: memory {on['memory_mb_q2']:.1f} -> {on['memory_mb_q4']:.1f} MB "
               f"(x{on['memory_ratio']:.2f}), keys {on['keys_q2']:.0f} -> {on['keys_q4']:.0f}; "
               f"without retention {off['memory_mb_q2']:.1f} -> {off['memory_mb_q4']:.1f} MB "
               f"(x{off['memory_ratio']:.2f}); flat: {'yes' if ok else 'NO'}")
    r = redis.Redis()
    return {"summary": summary, "ok": ok, "on": on, "off": off, "machine": machine(r)}
