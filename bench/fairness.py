"""Fairness: one tenant's flood, then another tenant's few jobs, on one queue.

One worker (sched worker's defaults) runs first; then key A submits --flood no-op jobs and,
after them, key B --few. Reported: how many of A's runs started before B's last one did, and
B's start lag (its handler's start less the job's fire time: p50, p99, max). The A runs that
start while A's flood is still being submitted are counted too; how many started between the
start of B's submit and B's last start is the turns' own figure. Mode `keyed`
gives the jobs concurrency keys (the keys take turns, lua/take.lua); mode `plain` submits
the same jobs without keys (one FIFO queue: B waits behind A's flood), for contrast. Runs
alternate the modes; each figure is the median of its mode's runs.

Plain mode is FIFO per shard's stream (`--shards 1` makes it one), and even there a few A's
may start after B's last: those of a claim round trip (its share of the run slots and the
batch it prefetches) that a loaded machine answered after the next one.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import redis

from scheduler import AsyncClient, Context, JobSpec, Registry
from scheduler.redis.clients import process_redis
from scheduler.worker.worker import Worker, WorkerConfig

from .common import drop_namespace, fresh_namespace, machine

MODES = ("keyed", "plain")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flood", type=int, default=20_000, help="key A's jobs, submitted first")
    p.add_argument("--few", type=int, default=100, help="key B's jobs, submitted after")
    p.add_argument("--runs", type=int, default=3, help="runs of each mode, alternated")
    p.add_argument("--shards", type=int, default=None,
                   help="the namespace's shards (default: the SDK's); plain mode is one FIFO "
                        "queue only on one shard: with more, each shard's stream is its own")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


async def _one(url: str, ns: str, flood: int, few: int, keyed: bool,
               shards: int | None) -> dict[str, float]:
    registry = Registry()
    order: list[str] = []
    lags: list[float] = []
    done = asyncio.Event()

    @registry.task("bench.tenant")
    async def tenant(ctx: Context, payload: Any) -> None:
        order.append(payload)
        if payload == "B":
            lags.append(time.time() * 1000 - ctx.fire_ms)
            if len(lags) == few:
                done.set()

    conn = process_redis(url, WorkerConfig().lease_s)
    worker = Worker(conn, registry, namespace=ns, config=WorkerConfig())
    task = asyncio.create_task(worker.run())  # the worker first, as users start them
    mark = 0  # runs started when B's submit began
    async with AsyncClient(url, ns, shards=shards) as client:
        for key, n in (("A", flood), ("B", few)):
            if key == "B":
                mark = len(order)
            for i in range(0, n, 5_000):
                await client.submit_many([
                    JobSpec(task="bench.tenant", payload=key,
                            concurrency_key=key if keyed else None)
                    for _ in range(min(5_000, n - i))])
    await asyncio.wait_for(done.wait(), timeout=600)
    worker.stop()
    await task
    await conn.aclose()
    last_b = max(i for i, key in enumerate(order) if key == "B")
    lags.sort()
    return {"a_before_last_b": order[:last_b].count("A"),
            "a_while_b_waited": order[mark:last_b].count("A"),
            "b_lag_p50_ms": lags[len(lags) // 2],
            "b_lag_p99_ms": lags[min(len(lags) - 1, int(len(lags) * 0.99))],
            "b_lag_max_ms": lags[-1]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import uvloop

    r = redis.Redis.from_url(args.redis_url)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for _ in range(args.runs):
        for mode in MODES:
            ns = fresh_namespace("fair")
            try:
                runs[mode].append(uvloop.run(_one(args.redis_url, ns, args.flood, args.few,
                                                  mode == "keyed", args.shards)))
            finally:
                drop_namespace(r, ns)

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[mode])

    figures = {m: {k: med(m, k) for k in runs[m][0]} for m in MODES}
    keyed = figures["keyed"]
    ok = keyed["a_before_last_b"] < 2_000 and keyed["b_lag_p99_ms"] < 1_000
    summary = (f"fairness: A {args.flood:,} jobs, then B {args.few:,} (one worker, x{args.runs}, "
               f"medians): keyed: {keyed['a_before_last_b']:,.0f} of A's started before B's "
               f"last ({keyed['a_while_b_waited']:,.0f} after B's submit began), B's "
               f"start lag p50 {keyed['b_lag_p50_ms']:,.0f} ms, p99 "
               f"{keyed['b_lag_p99_ms']:,.0f} ms; plain: "
               f"{figures['plain']['a_before_last_b']:,.0f} of A's before B's last, B's p99 "
               f"{figures['plain']['b_lag_p99_ms']:,.0f} ms; B within its share: "
               f"{'yes' if ok else 'NO'}")
    return {"summary": summary, "ok": ok, "figures": figures, "runs": runs,
            "machine": machine(r)}
