"""Submit: `submit_many` throughput from one process, and the latency of a single `submit`.

Throughput: `--jobs` no-op immediate jobs with a small payload, `--batch` per `submit_many`
call, the blocking Client; reports jobs/s and the CPU per job of this process (the client)
and of Redis (INFO cpu). Latency: `--singles` sequential `submit()` calls, each timed from
the call to its return (one round trip: the submit script runs before the reply). Median of
`--runs` rounds; every job submitted is checked to exist once in its shard. The task has a
catalog entry (its defaults the built-in ones), as an app's task has once its workers start.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import msgspec
import redis

from scheduler import Client
from scheduler.core.keys import Keys

from .common import drop_namespace, fresh_namespace, machine, private_redis, redis_cpu_s


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=10_000, help="jobs per submit_many call")
    p.add_argument("--singles", type=int, default=5_000, help="single submit() calls timed")
    p.add_argument("--runs", type=int, default=3, help="repeat and report the median")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--replicated", action="store_true",
                   help="also start a replica of the private Redis and run every round with "
                        "durability=\"replicated\" too (interleaved with the plain rounds)")
    p.add_argument("--out", default=None)


def _round(url: str, r: redis.Redis, args: argparse.Namespace,
           durability: str = "primary") -> dict[str, Any]:
    ns = fresh_namespace("submit")
    try:
        # The task has a catalog entry, as an app's has once its workers start: every
        # submit looks it up. Its defaults are the built-in ones, so the jobs written are
        # the same as without it (a tree without a catalog ignores the hash).
        r.hset(Keys(ns).tasks, "bench.noop", msgspec.json.encode(
            {"task": "bench.noop", "queue": "default", "priority": 3}))
        with Client(url, ns, durability=durability, replica_timeout_s=5.0) as client:
            client.submit("bench.noop")  # creates the namespace, loads the scripts
            cpu0, rcpu0, t0 = time.process_time(), redis_cpu_s(r), time.perf_counter()
            ids: list[str] = []
            for i in range(0, args.jobs, args.batch):
                ids += client.submit_many([{"task": "bench.noop", "payload": j}
                                           for j in range(i, min(args.jobs, i + args.batch))])
            elapsed = time.perf_counter() - t0
            cpu, rcpu = time.process_time() - cpu0, redis_cpu_s(r) - rcpu0
            latencies = []
            for _ in range(args.singles):
                t = time.perf_counter()
                client.submit("bench.noop", {"n": 1})
                latencies.append((time.perf_counter() - t) * 1e6)
            pipe = r.pipeline(transaction=False)
            for job_id in ids[:: max(1, len(ids) // 1000)]:
                pipe.exists(client._core.job_key(job_id))
            every = all(pipe.execute()) and len(set(ids)) == args.jobs
    finally:
        drop_namespace(r, ns)
    latencies.sort()
    return {"per_s": args.jobs / elapsed, "client_us_per_job": cpu / args.jobs * 1e6,
            "redis_us_per_job": rcpu / args.jobs * 1e6, "ok": every,
            "single_p50_us": latencies[len(latencies) // 2],
            "single_p99_us": latencies[int(len(latencies) * 0.99)],
            "single_max_us": latencies[-1]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    if args.replicated:
        return _run_replicated(args, r)
    runs = [_round(args.redis_url, r, args) for _ in range(args.runs)]

    def med(key: str) -> float:
        return statistics.median(x[key] for x in runs)

    ok = all(x["ok"] for x in runs)
    summary = (f"submit: submit_many {med('per_s'):,.0f} jobs/s (median of {args.runs}, "
               f"batches of {args.batch:,}), client {med('client_us_per_job'):.1f} + redis "
               f"{med('redis_us_per_job'):.1f} us/job CPU; single submit p50 "
               f"{med('single_p50_us'):.0f} us, p99 {med('single_p99_us'):.0f} us, max "
               f"{med('single_max_us'):.0f} us; every job written: {'yes' if ok else 'NO'}")
    return {"summary": summary, "ok": ok, "jobs": args.jobs, "runs": runs,
            "median_per_s": med("per_s"), "machine": machine(r)}


def _run_replicated(args: argparse.Namespace, r: redis.Redis) -> dict[str, Any]:
    """Plain and replicated rounds, alternating which goes first, against one primary with
    one replica: the ratio of their medians is what WAIT costs."""
    rounds: dict[str, list[dict[str, Any]]] = {"primary": [], "replicated": []}
    with private_redis(replica_of=args.redis_url):
        for i in range(args.runs):
            for mode in (("primary", "replicated") if i % 2 == 0 else ("replicated", "primary")):
                rounds[mode].append(_round(args.redis_url, r, args, mode))

    def med(mode: str, key: str) -> float:
        return statistics.median(x[key] for x in rounds[mode])

    ok = all(x["ok"] for xs in rounds.values() for x in xs)
    ratio = med("replicated", "per_s") / med("primary", "per_s")
    summary = (f"submit, one replica: submit_many {med('primary', 'per_s'):,.0f} jobs/s plain, "
               f"{med('replicated', 'per_s'):,.0f} replicated ({ratio:.2f}); single submit "
               f"p50 {med('primary', 'single_p50_us'):.0f} vs "
               f"{med('replicated', 'single_p50_us'):.0f} us (median of {args.runs}, "
               f"interleaved); every job written: {'yes' if ok else 'NO'}")
    return {"summary": summary, "ok": ok, "jobs": args.jobs, "runs": rounds,
            "ratio": ratio, "machine": machine(r)}
