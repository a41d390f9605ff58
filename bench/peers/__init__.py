"""Peers: the burn-down and delayed-precision workloads against arq, BullMQ, celery, dramatiq,
rq, saq and taskiq in one invocation, with ratios (ours / theirs).

`python -m bench peers [--jobs N] [--runs R] [--only ours,arq,...] [--delayed N]`
- sets up each peer in its own environment under bench/.peers/ (idempotent; a peer whose
  install fails is reported as unavailable and the others still run);
- starts a private redis-server (or uses --redis-url) that every system shares;
- burn-down, R rounds, each round running every system in turn: N pre-enqueued no-op jobs
  (slower peers get a share of N, see runner.PEERS), one worker process, executions/s and the
  worker's and Redis's CPU per job;
- delayed, R rounds: `--delayed` jobs due at the same whole second ~3 s ahead; start lag
  p50/p99/max (start - due).
Ratios are medians of the per-round ratios (ours / theirs, same round).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..common import machine
from . import env, ours, runner
from .report import summarize

ALL = ["ours", *runner.PEERS]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=20_000,
                   help="burn-down jobs for ours and BullMQ; slower peers run a share of it")
    p.add_argument("--runs", type=int, default=3, help="rounds; medians are reported")
    p.add_argument("--only", default=",".join(ALL), help="comma-separated: " + ",".join(ALL))
    p.add_argument("--delayed", type=int, default=2000,
                   help="jobs due at once in the delayed run (0: skip it)")
    p.add_argument("--lead", type=float, default=3.0, help="delayed: seconds ahead (at least)")
    p.add_argument("--timeout", type=float, default=60.0, help="per peer run, seconds")
    p.add_argument("--redis-url", default=None,
                   help="Redis to use (its db is flushed for each peer run); default: a "
                        "private redis-server on a free port, so Redis CPU is ours alone")
    p.add_argument("--out", default=None)


def _attempt(results: dict[str, list[dict[str, Any]]], name: str, fn: Any,
             *args: Any) -> None:
    try:
        results.setdefault(name, []).append(fn(*args))
    except Exception as exc:  # a peer failing must not stop the others
        results.setdefault(name, []).append({"error": f"{type(exc).__name__}: {exc}"[:400]})


def run(args: argparse.Namespace) -> dict[str, Any]:
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(ALL))
    if unknown:
        raise SystemExit(f"peers: unknown {', '.join(unknown)}; choose from {', '.join(ALL)}")
    peers = [n for n in ALL if n in names and n != "ours"]
    unavailable = env.setup(peers)
    active = [n for n in ALL if n in names and n not in unavailable]
    versions = {p: env.version(p) for p in peers if p not in unavailable}
    server = None
    url = args.redis_url
    if url is None:
        from scheduler.dev.embedded import EmbeddedRedis

        server = EmbeddedRedis().start()
        url = server.url[: -len("/0")] + "/15"
    try:
        import redis

        conn = redis.Redis.from_url(url)
        info = machine(conn)
        conn.close()
        burn: dict[str, list[dict[str, Any]]] = {}
        delayed: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.runs):
            for name in active:
                if name == "ours":
                    _attempt(burn, name, ours.burn, url, args.jobs)
                else:
                    n = max(2, int(args.jobs * runner.PEERS[name].scale))
                    _attempt(burn, name, runner.burn, name, url, n, args.timeout)
        if args.delayed:
            for _ in range(args.runs):
                for name in active:
                    if name == "ours":
                        _attempt(delayed, name, ours.delayed, url, args.delayed, args.lead,
                                 args.timeout)
                    elif runner.PEERS[name].delayed:
                        _attempt(delayed, name, runner.delayed, name, url, args.delayed,
                                 args.lead, args.timeout)
    finally:
        if server is not None:
            server.stop()
    result = summarize(burn, delayed, unavailable, versions)
    ours_runs = burn.get("ours", [])
    result["ok"] = ("ours" not in names) or bool(ours_runs) and all(
        "error" not in x and x["duplicates"] == 0 and x["done"] == x["jobs"] for x in ours_runs)
    result.update(machine=info, redis=("private redis-server" if server else url),
                  args={k: v for k, v in vars(args).items() if k != "out"},
                  burn_runs=burn, delayed_runs=delayed)
    return result

