"""Retention soak: Redis memory with no snapshotter, only the namespace's retention bounding
finished work (`sched namespace set --retention`), under real `sched worker` and
`sched scheduler` processes on a redis-server of the bench's own.

An open-loop producer submits `--rate` jobs/s (`bench.echo`, a small payload it returns as
its result) for `--seconds`. Every second it samples `used_memory` and the finished slots
kept (the shards' `done` lists and `finished` sets); the figure is the median of the last quarter over the
median of the second quarter (flat: within 10%). Every few seconds it asks `result()` for a
job that finished within the window (it must return the payload) and for one past it (it
must raise ResultExpired). Bytes per finished job: `MEMORY USAGE` of sampled slot and job
hashes plus the `done` list's entry, and `used_memory` over the finished slots kept.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import redis

from scheduler import Client, ResultExpired
from scheduler.core.keys import Keys, shard_of

from .common import machine, private_redis, process_cpu_s, stop_processes
from .delayed import ROOT


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=int, default=1000, help="jobs submitted per second")
    p.add_argument("--seconds", type=float, default=600.0, help="how long the producer runs")
    p.add_argument("--retention", type=float, default=60.0,
                   help="the namespace's retention, seconds")
    p.add_argument("--retain-max", type=int, default=500_000)
    p.add_argument("--concurrency", type=int, default=500)
    p.add_argument("--out", default=None)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with private_redis() as url:
        return _run(args, url)


def _run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    ns = "soak"
    keys = Keys(ns)
    with Client(url, ns) as client:
        client.create_namespace()
        client.set_retention(args.retention, retain_max=args.retain_max)
        shards = client.shards
        base = [sys.executable, "-m", "scheduler.cli", "--redis-url", url, "--namespace", ns]
        procs = [subprocess_of([*base, "scheduler", "--log-level", "warning"]),
                 subprocess_of([*base, "worker", "--app", "bench.app:registry",
                                "--concurrency", str(args.concurrency), "--log-level",
                                "warning"])]
        samples: list[tuple[float, int, int]] = []  # (s, used_memory, finished kept)
        submitted: list[tuple[float, str, int]] = []  # (s, job id, n) one per tick
        checks = {"within": 0, "within_failed": 0, "after": 0, "after_failed": 0}
        per_job: dict[str, float] = {}
        try:
            tick = 0.1
            per_tick = max(1, round(args.rate * tick))
            t0 = time.monotonic()
            next_tick, next_check, n = t0, t0 + args.retention / 2, 0
            while (now := time.monotonic()) < t0 + args.seconds:
                ids = client.submit_many([{"task": "bench.echo", "payload": {"n": n + i}}
                                          for i in range(per_tick)])
                submitted.append((now - t0, ids[0], n))
                n += per_tick
                if now - t0 >= len(samples):
                    samples.append((now - t0, int(r.info("memory")["used_memory"]),
                                    _finished(r, keys, shards)))
                if not per_job and now - t0 >= min(args.seconds / 2, args.retention * 1.5):
                    per_job = _bytes_per_job(r, keys, shards, samples[0], samples[-1])
                if now >= next_check:
                    next_check = now + max(2.0, args.retention / 4)
                    _check(client, submitted, now - t0, args.retention, checks)
                next_tick += tick
                time.sleep(max(0.0, next_tick - time.monotonic()))
            elapsed = time.monotonic() - t0
            cpu = {"node": process_cpu_s(procs[0].pid), "worker": process_cpu_s(procs[1].pid)}
        finally:
            stop_processes(procs)
    quarter = max(1, len(samples) // 4)
    q2 = statistics.median(m for _, m, _ in samples[quarter:2 * quarter])
    q4 = statistics.median(m for _, m, _ in samples[-quarter:])
    kept = statistics.median(k for _, _, k in samples[-quarter:])
    ratio = q4 / q2
    ok = (abs(ratio - 1) <= 0.10 and checks["within_failed"] == 0
          and checks["after_failed"] == 0 and checks["within"] > 0 and checks["after"] > 0)
    total = n
    summary = (f"retention-soak: {total / elapsed:,.0f} jobs/s for {elapsed:.0f}s with "
               f"--retention {args.retention:g}s, no snapshotter: Redis memory median "
               f"{q2 / 2**20:.1f} MiB (2nd quarter) -> {q4 / 2**20:.1f} MiB (last quarter), "
               f"ratio {ratio:.3f} ({'flat' if abs(ratio - 1) <= 0.10 else 'NOT flat'}); "
               f"finished slots kept {kept:,.0f}; "
               f"{per_job.get('memory_usage_bytes', 0):,.0f} B/finished job (MEMORY USAGE), "
               f"{per_job.get('used_memory_bytes', 0):,.0f} B (used_memory growth over kept); "
               f"result() within the window {checks['within'] - checks['within_failed']}/"
               f"{checks['within']}, ResultExpired after it {checks['after'] - checks['after_failed']}"
               f"/{checks['after']}")
    return {"summary": summary, "ok": ok, "submitted": total, "seconds": elapsed,
            "rate": args.rate, "retention_s": args.retention, "memory_q2": q2,
            "memory_q4": q4, "ratio": ratio, "finished_kept": kept, "per_job": per_job,
            "checks": checks, "cpu_s": cpu, "samples": samples, "machine": machine(r)}


def subprocess_of(argv: list[str]) -> Any:
    import subprocess

    return subprocess.Popen(argv, cwd=ROOT)


def _finished(r: redis.Redis, keys: Keys, shards: int) -> int:
    pipe = r.pipeline(transaction=False)
    for shard in range(shards):
        pipe.zcard(keys.finished(shard))
        pipe.llen(keys.done(shard))
    return sum(pipe.execute())


def _bytes_per_job(r: redis.Redis, keys: Keys, shards: int, base: tuple[float, int, int],
                   sample: tuple[float, int, int], n: int = 200) -> dict[str, float]:
    """What one finished job costs: its slot and job hashes and its entry in the `done` list
    (successes' index; MEMORY USAGE of a sample), and used_memory's growth since the first
    sample over the finished slots kept (everything else Redis holds for the load included)."""
    slot_b, job_b, index_b, listed = [], [], 0, 0
    for shard in range(shards):
        ids = [m.decode().partition(":")[2]
               for m in r.lrange(keys.done(shard), -n // shards, -1)]
        for slot in ids:
            job_id = slot.rpartition(":")[0]
            slot_b.append(r.memory_usage(keys.slot(shard, slot)) or 0)
            job_b.append(r.memory_usage(keys.job(shard_of(job_id, shards), job_id)) or 0)
        index_b += r.memory_usage(keys.done(shard), samples=0) or 0
        listed += r.llen(keys.done(shard))
    usage = statistics.mean(slot_b) + statistics.mean(job_b) + index_b / max(1, listed)
    return {"slot_bytes": statistics.mean(slot_b), "job_bytes": statistics.mean(job_b),
            "finished_entry_bytes": index_b / max(1, listed), "memory_usage_bytes": usage,
            "used_memory_bytes": (sample[1] - base[1]) / max(1, sample[2] - base[2])}


def _check(client: Client, submitted: list[tuple[float, str, int]], now_s: float,
           retention: float, checks: dict[str, int]) -> None:
    """result() of a job submitted retention/2 ago returns its payload; of one submitted
    twice the retention ago (it ran, then left Redis), raises ResultExpired."""
    for at, job_id, n in reversed(submitted):
        if at <= now_s - retention / 2:
            checks["within"] += 1
            try:
                if client.result(job_id, timeout=5) != {"n": n}:
                    checks["within_failed"] += 1
            except Exception as exc:
                print(f"retention-soak: result() within the window: {exc}", file=sys.stderr)
                checks["within_failed"] += 1
            break
    for at, job_id, _ in reversed(submitted):
        if at <= now_s - retention * 2 - 2:
            checks["after"] += 1
            try:
                client.result(job_id, timeout=0)
                checks["after_failed"] += 1
            except ResultExpired:
                pass
            except Exception as exc:
                print(f"retention-soak: result() after the window: {exc!r}", file=sys.stderr)
                checks["after_failed"] += 1
            break
