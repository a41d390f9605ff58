"""Sustained: an open-loop producer submits `--rate` jobs/s (half immediate, half delayed by
1 s) for `--seconds` while real worker and scheduler-node processes run them.

Reports start lag (claimed_ms - fire_ms, Redis time) p50 / p99 / max over every `--sample`th
job, whether executions kept pace (the backlog at the end), and Redis memory over the run;
writes the lag per second of fire time and memory over time to bench/out/sustained.png when
matplotlib is installed (`pip install '.[bench]'`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from scheduler import Client
from scheduler.core.keys import Keys, shard_of, slot_id

from .common import (
    commandstats,
    commandstats_per_job,
    drop_namespace,
    fresh_namespace,
    history_schema,
    machine,
    postgres_cpu_s,
    process_cpu_s,
    redis_cpu_s,
    stop_processes,
)
from .delayed import ROOT, _fire_times, _now_ms, _stats, wait_ready


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=int, default=10_000, help="jobs submitted per second")
    p.add_argument("--seconds", type=float, default=60.0, help="how long the producer runs")
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--sample", type=int, default=10, help="measure every Nth job's lag")
    p.add_argument("--history", default=None, metavar="DSN",
                   help="also run `sched snapshotter` into this store (a Postgres DSN or "
                        "sqlite://PATH) with --retention seconds of finished slots in Redis; "
                        "in Postgres, into a schema of the run's own, dropped afterwards")
    p.add_argument("--keep-history", action="store_true",
                   help="keep the run's Postgres schema (named after its namespace)")
    p.add_argument("--retention", type=float, default=10.0)
    p.add_argument("--snapshotters", type=int, default=1, help="snapshotter processes")
    p.add_argument("--settle", type=float, default=0.5,
                   help="the snapshotters' --settle (seconds between caught-up batches)")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def _start(url: str, ns: str, workers: int, concurrency: int, history: str | None,
           retention: float, snapshotters: int, settle: float = 0.5
           ) -> list[tuple[str, subprocess.Popen[bytes]]]:
    """(role, process) of the node, the snapshotters and the workers."""
    base = [sys.executable, "-m", "scheduler.cli", "--redis-url", url, "--namespace", ns]
    procs = [("node", subprocess.Popen([*base, "scheduler", "--log-level", "warning"], cwd=ROOT))]
    if history:
        store = (["--postgres-dsn", history] if not history.startswith("sqlite://")
                 else ["--history-file", history.removeprefix("sqlite://")])
        subprocess.run([*base, "db", "upgrade", *store], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
        procs += [("snapshotter", subprocess.Popen(
            [*base, "snapshotter", *store, "--retention", str(retention), "--settle",
             str(settle), "--log-level", "warning"], cwd=ROOT)) for _ in range(snapshotters)]
    procs += [("worker", subprocess.Popen(
        [*base, "worker", "--app", "bench.app:registry", "--concurrency", str(concurrency),
         "--log-level", "warning"], cwd=ROOT)) for _ in range(workers)]
    return procs


def run(args: argparse.Namespace) -> dict[str, Any]:
    ns = fresh_namespace("sustained")
    with history_schema(args.history, ns, args.keep_history) as history:
        return _run(args, ns, history)


def _run(args: argparse.Namespace, ns: str, history: str | None) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    with Client(args.redis_url, ns) as first:
        first.create_namespace()  # the processes wait for it
    procs = _start(args.redis_url, ns, args.workers, args.concurrency, history,
                   args.retention, args.snapshotters, args.settle)
    pending: list[tuple[str, int]] = []  # sampled (job id, fire_ms) not yet seen claimed
    results: list[tuple[int, int]] = []  # (fire_ms, start lag ms) of sampled slots
    memory: list[tuple[float, int]] = []
    submitted = 0
    try:
        with Client(args.redis_url, ns) as client:
            shards = client.shards
            keys = Keys(ns)
            wait_ready(client, [p for _, p in procs], args.workers)
            cpu0, stats0 = _cpu(r, procs), commandstats(r)

            def harvest(final: bool) -> None:
                """Read the claim times of sampled slots already due: as the run goes, since
                with retention on a finished slot leaves Redis after a few seconds."""
                nonlocal pending
                now_ms = _now_ms(r)
                due = [(j, f) for j, f in pending if final or f < now_ms - 500]
                pipe = r.pipeline(transaction=False)
                for j, f in due:
                    pipe.hget(keys.slot(shard_of(j, shards), slot_id(j, f)), "claimed_ms")
                seen = set()
                for (j, f), claimed in zip(due, pipe.execute(), strict=True):
                    if claimed:
                        seen.add(j)
                        results.append((f, int(claimed) - f))
                pending = [(j, f) for j, f in pending if j not in seen]

            tick = 0.1
            per_tick = max(2, int(args.rate * tick))
            t0 = time.monotonic()
            next_tick = t0
            submit_cpu = 0.0  # the producer's own work: the jobs built and submitted
            while (now := time.monotonic()) < t0 + args.seconds:
                c0 = time.process_time()
                batch = [{"task": "bench.noop"} if i % 2 else {"task": "bench.noop", "delay": 1}
                         for i in range(per_tick)]
                ids = client.submit_many(batch)
                submit_cpu += time.process_time() - c0
                chosen = [j for i, j in enumerate(ids) if (submitted + i) % args.sample == 0]
                submitted += len(ids)
                pending += list(zip(chosen, _fire_times(r, ns, shards, chosen), strict=True))
                if int(now - t0) >= len(memory):
                    memory.append((now - t0, int(r.info("memory")["used_memory"])))
                    harvest(final=False)
                next_tick += tick
                time.sleep(max(0.0, next_tick - time.monotonic()))
            elapsed = time.monotonic() - t0
            deadline = time.monotonic() + 60
            while pending and time.monotonic() < deadline:
                harvest(final=True)
                time.sleep(0.2)
            if pending:
                raise SystemExit(f"sustained: {len(pending)} sampled jobs never started")
            cpu = {k: round(1e6 * (v - cpu0[k]) / submitted, 1)
                   for k, v in _cpu(r, procs).items()}
            # "producer" is the bench process's whole CPU: its submits and its sampling of
            # lags and memory (HGETs and INFO, the bench's own instrument, not the stack's)
            submit_us = round(1e6 * submit_cpu / submitted, 1)
            commands = commandstats_per_job(stats0, commandstats(r), submitted)
    finally:
        stop_processes([p for _, p in procs])
        drop_namespace(r, ns)
    by_second: dict[int, list[int]] = {}
    start = min(f for f, _ in results)
    for f, lag in results:
        by_second.setdefault((f - start) // 1000, []).append(lag)
    lags = [lag for _, lag in results]
    curve = [(s, _stats(v)["p99_ms"]) for s, v in sorted(by_second.items())]
    stats = _stats(lags)
    out = Path(args.out) if args.out else Path(__file__).parent / "out"
    out.mkdir(parents=True, exist_ok=True)
    png = _plot(curve, memory, out / "sustained.png", args.rate)
    summary = (f"sustained: {submitted / elapsed:,.0f} jobs/s submitted for {elapsed:.0f}s "
               f"({args.workers} worker(s), "
               + (f"{args.snapshotters} snapshotter(s) with {args.retention:g}s retention"
                  if args.history
                  else "no snapshotter") + f"): start lag p50 {stats['p50_ms']} ms, "
               f"p99 {stats['p99_ms']} ms, max {stats['max_ms']} ms; Redis memory "
               f"{memory[0][1] / 2**20:.0f} -> {memory[-1][1] / 2**20:.0f} MiB; CPU us/job "
               + ", ".join(f"{k} {v:g}" for k, v in cpu.items())
               + f" (of the producer's, building and submitting the jobs {submit_us:g})")
    return {"summary": summary, "submitted": submitted, "seconds": elapsed, "lag": stats,
            "cpu_us_per_job": cpu, "producer_submit_us_per_job": submit_us,
            "redis_commands_per_job": commands,
            "p99_by_second": curve, "memory": memory, "plot": png, "machine": machine(r)}


def _cpu(r: redis.Redis, procs: list[tuple[str, subprocess.Popen[bytes]]]
         ) -> dict[str, float]:
    """CPU seconds so far by role; the run's difference over jobs submitted is its cost."""
    out = {"redis": redis_cpu_s(r), "producer": time.process_time()}
    for role, proc in procs:
        out[role] = out.get(role, 0.0) + process_cpu_s(proc.pid)
    if any(role == "snapshotter" for role, _ in procs):
        out["postgres"] = postgres_cpu_s()
    return out


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
