"""Delayed jobs: start lag (attempt claimed_ms - fire_ms) under a burst and a steady stream.

Real processes: one `sched scheduler` node and one `sched worker` (no-op handler); this
process submits and then reads every slot's claim time from Redis.
- burst: `--burst` jobs (default 10,000) due within the same second, submitted ahead of it;
- stream: `--rate` delayed jobs per second (delay `--delay` s) for `--seconds`.
Prints p50 / p99 / max start lag of each, the median over `--runs` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from scheduler import Client
from scheduler.core.keys import Keys, shard_of, slot_id

from .common import drop_namespace, fresh_namespace, machine, stop_processes

ROOT = Path(__file__).parent.parent


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--burst", type=int, default=10_000, help="jobs due in one second")
    p.add_argument("--rate", type=int, default=200, help="stream: delayed jobs submitted per s")
    p.add_argument("--seconds", type=float, default=10.0, help="stream duration")
    p.add_argument("--delay", type=float, default=1.0, help="stream: delay of each job (s)")
    p.add_argument("--runs", type=int, default=3, help="repeat and report the median")
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own, so other "
                        "users of a shared Redis neither slow it nor blur its CPU figures")
    p.add_argument("--out", default=None)


def _procs(url: str, ns: str, concurrency: int, workers: int = 1,
           node_args: tuple[str, ...] = ()) -> list[subprocess.Popen[bytes]]:
    base = [sys.executable, "-m", "scheduler.cli", "--redis-url", url, "--namespace", ns]
    return [subprocess.Popen([*base, "scheduler", "--log-level", "warning", *node_args],
                             cwd=ROOT)] + [
        subprocess.Popen([*base, "worker", "--app", "bench.app:registry", "--concurrency",
                          str(concurrency), "--log-level", "warning"], cwd=ROOT)
        for _ in range(workers)]


@contextmanager
def fleet(r: redis.Redis, url: str, prefix: str, concurrency: int, workers: int = 1,
          node_args: tuple[str, ...] = (), pids: list[int] | None = None
          ) -> Iterator[tuple[str, Client]]:
    """A fresh namespace with a scheduler node and `workers` worker processes running on it,
    ready to take work; stopped and dropped afterwards. Yields (namespace, client)."""
    ns = fresh_namespace(prefix)
    procs: list[Any] = []
    try:
        with Client(url, ns) as client:
            client.create_namespace()  # the processes wait for it
            procs = _procs(url, ns, concurrency, workers, node_args)
            if pids is not None:
                pids += [p.pid for p in procs]  # the node's, then the workers'

            wait_ready(client, procs, workers)
            yield ns, client
    finally:
        stop_processes(procs)
        drop_namespace(r, ns)


def wait_ready(client: Client, procs: list[Any], workers: int, timeout_s: float = 60.0) -> None:
    """Until the node owns every shard and `workers` workers are registered and not waiting
    for the namespace: a worker's first heartbeat follows its setup, which gave each of its
    streams its group (a job promoted before that waits for the group, and a fixed sleep
    was too short on a busy machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = client.status()
        ready = sum(1 for w in s.workers if w.alive and not w.waiting)
        if s.shards_owned >= s.shards and ready >= workers:
            return
        exited = [p.args for p in procs if p.poll() is not None]
        if exited or time.monotonic() > deadline:
            raise SystemExit(f"bench: the node owns {s.shards_owned} of {s.shards} shards and "
                             f"{ready} of {workers} worker(s) are ready after "
                             f"{timeout_s - max(0.0, deadline - time.monotonic()):.0f} s"
                             + (f"; exited: {exited}" if exited else ""))
        time.sleep(0.1)


def _now_ms(r: redis.Redis) -> int:
    sec, usec = r.time()  # type: ignore[misc]
    return int(sec) * 1000 + int(usec) // 1000


def _drained(r: redis.Redis, ns: str, shards: int) -> bool:
    """Nothing due, nothing undelivered or pending in any stream: a few commands per poll, so
    polling does not load the Redis being measured (reading every slot each time did). A
    stream that holds entries and has no group yet is not drained: no worker read it."""
    k = Keys(ns)
    pipe = r.pipeline(transaction=False)
    for s in range(shards):
        pipe.zcard(k.due(s))
        pipe.xlen(k.queue(s, "default"))
        pipe.xinfo_groups(k.queue(s, "default"))
    replies = pipe.execute(raise_on_error=False)
    for due, length, groups in zip(replies[::3], replies[1::3], replies[2::3], strict=True):
        if isinstance(due, Exception) or due or isinstance(length, Exception):
            return False
        if isinstance(groups, Exception) or not groups:
            if length:
                return False
            continue  # no stream in this shard yet, or an empty one
        for g in groups:
            if (g.get("lag") or 0) or g.get("pending"):
                return False
    return True


def _lags(r: redis.Redis, ns: str, shards: int, jobs: list[tuple[str, int]],
          timeout_s: float) -> list[int]:
    """Wait for every slot to be claimed; return claimed_ms - fire_ms per slot. The slots
    are read once the streams look drained, and again later if one is not claimed yet."""
    k = Keys(ns)
    keys = [k.slot(shard_of(j, shards), slot_id(j, f)) for j, f in jobs]
    last_fire = max(f for _, f in jobs)
    deadline = time.monotonic() + timeout_s
    while True:
        drained = _now_ms(r) > last_fire and _drained(r, ns, shards)
        if drained or time.monotonic() > deadline:
            pipe = r.pipeline(transaction=False)
            for key in keys:
                pipe.hget(key, "claimed_ms")
            claimed = pipe.execute()
            missing = sum(1 for c in claimed if not c)
            if not missing:
                return [int(c) - f for c, (_, f) in zip(claimed, jobs, strict=True)]
            if time.monotonic() > deadline:
                raise SystemExit(f"delayed: {missing} of {len(jobs)} jobs never started")
            time.sleep(0.5)  # read again in a while, not at every poll
        time.sleep(0.1)


def _stats(lags: list[int]) -> dict[str, float]:
    lags = sorted(lags)
    return {"p50_ms": lags[len(lags) // 2], "p99_ms": lags[int(len(lags) * 0.99) - 1 or 0],
            "max_ms": lags[-1], "min_ms": lags[0], "n": len(lags)}


def _one(args: argparse.Namespace, r: redis.Redis) -> dict[str, Any]:
    with fleet(r, args.redis_url, "delayed", args.concurrency) as (ns, client):
        shards = client.shards
        # burst: every job due within one second, 3 s from now
        start = (_now_ms(r) // 1000 + 3) * 1000
        burst: list[str] = []
        for i in range(0, args.burst, 5000):
            now = _now_ms(r)
            n = min(5000, args.burst - i)
            burst += client.submit_many(
                [{"task": "bench.noop",
                  "delay": (start + (i + j) * 1000 // args.burst - now) / 1000}
                 for j in range(n)])
        fires = _fire_times(r, ns, shards, burst)
        burst_lags = _stats(_lags(r, ns, shards, list(zip(burst, fires, strict=True)), 60))
        # stream: a steady rate of delayed jobs
        stream: list[str] = []
        t_end = time.monotonic() + args.seconds
        tick = 0.1
        while time.monotonic() < t_end:
            t = time.monotonic()
            stream += client.submit_many([{"task": "bench.noop", "delay": args.delay}
                                          for _ in range(max(1, int(args.rate * tick)))])
            time.sleep(max(0.0, tick - (time.monotonic() - t)))
        fires = _fire_times(r, ns, shards, stream)
        stream_lags = _stats(_lags(r, ns, shards, list(zip(stream, fires, strict=True)),
                                   60))
        return {"burst": burst_lags, "stream": stream_lags}


def _fire_times(r: redis.Redis, ns: str, shards: int, ids: list[str]) -> list[int]:
    k = Keys(ns)
    pipe = r.pipeline(transaction=False)
    for j in ids:
        pipe.hget(k.job(shard_of(j, shards), j), "fire_ms")
    return [int(f) for f in pipe.execute()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    runs = [_one(args, r) for _ in range(args.runs)]

    def med(part: str, key: str) -> float:
        return statistics.median(x[part][key] for x in runs)

    ok = med("burst", "p99_ms") < 2000 and all(x[p]["min_ms"] >= 0 for x in runs
                                               for p in ("burst", "stream"))
    summary = (f"delayed: burst {args.burst} due in one second: start lag p50 "
               f"{med('burst', 'p50_ms'):.0f} ms, p99 {med('burst', 'p99_ms'):.0f} ms, max "
               f"{med('burst', 'max_ms'):.0f} ms; stream {args.rate}/s for {args.seconds:g}s: "
               f"p50 {med('stream', 'p50_ms'):.0f} ms, p99 {med('stream', 'p99_ms'):.0f} ms, "
               f"max {med('stream', 'max_ms'):.0f} ms (median of {args.runs}); never early: "
               f"{'yes' if ok else 'NO'}")
    return {"summary": summary, "ok": ok, "runs": runs, "machine": machine(r),
            "args": {k: v for k, v in vars(args).items() if k != "out"}}
