"""Cluster: the burn-down on a 3-master Redis Cluster against a single Redis, same box, same run.

Each round pre-submits N no-op jobs with submit_many and burns them down with one in-process
worker, first on one target then the other (the order alternates by round). Redis CPU per job
is summed over the cluster's masters (INFO cpu of each); COMMAND GETKEYS is counted per
script call on each master (INFO commandstats), since redis-py sends one before a
movable-keys command whose node it is not told. Neither target has replicas, so the figures
compare the work of serving the commands, not of replicating them.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path
from typing import Any

import redis
import uvloop

from scheduler.redis.clients import process_redis

from .burndown import _burn, submit
from .common import (
    commandstats,
    commandstats_per_job,
    drop_namespace,
    fresh_namespace,
    machine,
    private_redis,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3, help="rounds; medians and pair ratios")
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--masters", type=int, default=3)
    p.add_argument("--out", default=None)


@contextlib.contextmanager
def _cluster(masters: int) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from faults.cluster import cluster_set  # the tests' launcher: redis-cli --cluster create

    with cluster_set(masters=masters, replicas=0) as c:
        yield c


def _nodes(url: str, ports: list[int]) -> list[redis.Redis]:
    return [redis.Redis(port=p) for p in ports] if ports else [redis.Redis.from_url(url)]


def _cpu(nodes: list[redis.Redis]) -> float:
    total = 0.0
    for n in nodes:
        info: Any = n.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def _commandstats(nodes: list[redis.Redis]) -> dict[str, tuple[int, int]]:
    total: dict[str, tuple[int, int]] = {}
    for n in nodes:
        for name, (calls, usec) in commandstats(n).items():
            c, u = total.get(name, (0, 0))
            total[name] = (c + calls, u + usec)
    return total


def _scripts_and_getkeys(nodes: list[redis.Redis]) -> list[tuple[int, int]]:
    out = []
    for n in nodes:
        stats = commandstats(n)
        out.append((stats.get("evalsha", (0, 0))[0],
                    stats.get("command|getkeys", (0, 0))[0]))
    return out


def _round(url: str, ports: list[int], jobs: int, concurrency: int) -> dict[str, Any]:
    nodes = _nodes(url, ports)
    ns = fresh_namespace("cluster" if ports else "single")
    try:
        submit_s = submit(url, ns, jobs)
        before, stats0 = _scripts_and_getkeys(nodes), _commandstats(nodes)
        result = uvloop.run(_burn(url, ns, jobs, concurrency, 500, 2,
                                  client=process_redis(url, 30.0),
                                  cpu=lambda: _cpu(nodes)))
        after, stats1 = _scripts_and_getkeys(nodes), _commandstats(nodes)
        result["commands_per_job"] = commandstats_per_job(stats0, stats1, jobs)
        result["submit_per_s"] = jobs / submit_s
        result["per_master"] = [{"script_calls": a[0] - b[0], "getkeys": a[1] - b[1]}
                                for a, b in zip(after, before, strict=True)]
        return result
    finally:
        for n in nodes:
            drop_namespace(n, ns)
            n.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    with private_redis() as single, _cluster(args.masters) as c:
        masters = c.masters()
        for i in range(args.runs):
            order = ["single", "cluster"] if i % 2 == 0 else ["cluster", "single"]
            pair = {}
            for target in order:
                pair[target] = _round(single if target == "single" else c.url,
                                      [] if target == "single" else masters, args.jobs,
                                      args.concurrency)
            rounds.append(pair)
        info = machine(redis.Redis(port=masters[0]))

    def med(target: str, key: str) -> float:
        return statistics.median(r[target][key] for r in rounds)

    ratio = statistics.median(r["cluster"]["redis_us_per_job"] / r["single"]["redis_us_per_job"]
                              for r in rounds)
    getkeys = max(m["getkeys"] / max(1, m["script_calls"])
                  for r in rounds for m in r["cluster"]["per_master"])
    ok = all(r[t]["duplicates"] == 0 and r[t]["committed"] == args.jobs
             for r in rounds for t in r)
    summary = (f"cluster: {args.jobs} jobs x{args.runs} on {len(masters)} masters vs one "
               f"Redis: {med('cluster', 'per_s'):,.0f} vs {med('single', 'per_s'):,.0f} "
               f"executions/s; Redis CPU {med('cluster', 'redis_us_per_job'):.1f} vs "
               f"{med('single', 'redis_us_per_job'):.1f} us/job (summed over masters; pair "
               f"ratio median {ratio:.2f}); worker {med('cluster', 'worker_us_per_job'):.1f} vs "
               f"{med('single', 'worker_us_per_job'):.1f} us/job; COMMAND GETKEYS per script "
               f"call, worst master: {getkeys:.2%}; exactly once: {'yes' if ok else 'NO'}")
    return {"summary": summary, "ok": ok, "jobs": args.jobs, "rounds": rounds,
            "cpu_ratio_median": ratio, "getkeys_worst": getkeys, "machine": info}
