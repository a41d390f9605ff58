"""Sustained: an open-loop producer submits `--rate` jobs/s (half immediate, half delayed by
1 s) for `--seconds` while real worker and scheduler-node processes run them.

Reports start lag (claimed_ms - fire_ms, Redis time) p50 / p99 / max over every `--sample`th
job, whether executions kept pace (the backlog at the end), and Redis memory over the run;
writes the lag per second of fire time and memory over time to bench/out/sustained.png when
matplotlib is installed (`pip install '.[bench]'`).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from scheduler import Client

from .common import drop_namespace, fresh_namespace, machine
from .delayed import ROOT, _fire_times, _lags, _now_ms, _stats


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=int, default=10_000, help="jobs submitted per second")
    p.add_argument("--seconds", type=float, default=60.0, help="how long the producer runs")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--sample", type=int, default=10, help="measure every Nth job's lag")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def _start(url: str, ns: str, workers: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    base = [sys.executable, "-m", "cli", "--redis-url", url, "--namespace", ns]
    procs = [subprocess.Popen([*base, "scheduler", "--log-level", "warning"], cwd=ROOT)]
    procs += [subprocess.Popen([*base, "worker", "--app", "bench.app:registry", "--concurrency",
                                str(concurrency), "--log-level", "warning"], cwd=ROOT)
              for _ in range(workers)]
    return procs


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    ns = fresh_namespace("sustained")
    procs = _start(args.redis_url, ns, args.workers, args.concurrency)
    sampled: list[tuple[str, int]] = []
    memory: list[tuple[float, int]] = []
    submitted = 0
    try:
        with Client(args.redis_url, ns) as client:
            shards = client.shards
            time.sleep(1.5)  # the node takes its shards, the workers create their groups
            tick = 0.1
            per_tick = max(2, int(args.rate * tick))
            t0 = time.monotonic()
            next_tick = t0
            while (now := time.monotonic()) < t0 + args.seconds:
                batch = [{"task": "bench.noop"} if i % 2 else {"task": "bench.noop", "delay": 1}
                         for i in range(per_tick)]
                ids = client.submit_many(batch)
                submitted += len(ids)
                fire_now = _now_ms(r)
                sampled += [(j, fire_now + (1000 if i % 2 == 0 else 0))
                            for i, j in enumerate(ids) if (submitted + i) % args.sample == 0]
                if int(now - t0) >= len(memory):
                    memory.append((now - t0, int(r.info("memory")["used_memory"])))
                next_tick += tick
                time.sleep(max(0.0, next_tick - time.monotonic()))
            elapsed = time.monotonic() - t0
            fires = _fire_times(r, ns, shards, [j for j, _ in sampled])
            jobs = [(j, f) for (j, _), f in zip(sampled, fires, strict=True)]
            lags = _lags(r, ns, shards, jobs, 120)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        drop_namespace(r, ns)
    by_second: dict[int, list[int]] = {}
    start = min(f for _, f in jobs)
    for (_, f), lag in zip(jobs, lags, strict=True):
        by_second.setdefault((f - start) // 1000, []).append(lag)
    curve = [(s, _stats(v)["p99_ms"]) for s, v in sorted(by_second.items())]
    stats = _stats(lags)
    out = Path(args.out) if args.out else Path(__file__).parent / "out"
    out.mkdir(parents=True, exist_ok=True)
    png = _plot(curve, memory, out / "sustained.png", args.rate)
    summary = (f"sustained: {submitted / elapsed:,.0f} jobs/s submitted for {elapsed:.0f}s "
               f"({args.workers} worker(s)): start lag p50 {stats['p50_ms']} ms, "
               f"p99 {stats['p99_ms']} ms, max {stats['max_ms']} ms; Redis memory "
               f"{memory[0][1] / 2**20:.0f} -> {memory[-1][1] / 2**20:.0f} MiB")
    return {"summary": summary, "submitted": submitted, "seconds": elapsed, "lag": stats,
            "p99_by_second": curve, "memory": memory, "plot": png, "machine": machine(r)}


def _plot(curve: list[tuple[int, float]], memory: list[tuple[float, int]], path: Path,
          rate: int) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (lag_ax, mem_ax) = plt.subplots(2, 1, figsize=(7, 5.5), dpi=110, sharex=True)
    lag_ax.plot([s for s, _ in curve], [p for _, p in curve])
    lag_ax.set_ylabel("start lag p99 (ms)")
    lag_ax.set_title(f"Sustained {rate:,} jobs/s: start lag and Redis memory")
    lag_ax.grid(alpha=0.3)
    mem_ax.plot([t for t, _ in memory], [m / 2**20 for _, m in memory])
    mem_ax.set_ylabel("Redis used_memory (MiB)")
    mem_ax.set_xlabel("seconds")
    mem_ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)
