"""Objectives: the Redis load of the scheduler node's objective watch with many schedules.

Submits `--schedules` per-minute cron jobs and no worker, so each occurrence waits past its
objective: every job is counted late once a minute and sits in `behind`, the watch's writes
as well as its reads. An in-process materializer makes their slots throughout. Two phases
of `--seconds` each, on the same schedules: the materializer alone, then the materializer
and the objective watch at its own pace (scheduler/node/objectives.py), measured from the
end of the watch's first sweep (which reads every schedule once, as after a node starts). The watch's load is
the second less the first: Redis commands per second and Redis CPU (% of one core, summed
over the masters), and Redis CPU per job read; with its sweeps (each looks at every
schedule once, reading those that may have an occurrence to count) and their mean duration. `--cluster`: on a `--masters` Redis Cluster
(tests/faults/cluster.py's launcher), the namespace's `--shards` over its masters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import warnings
from collections.abc import Iterator
from typing import Any

import redis

from scheduler import Client, UnknownTaskWarning
from scheduler.core.keys import Keys
from scheduler.node.materializer import Materializer
from scheduler.node.objectives import ObjectiveWatch
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import RedisClock

from .cluster import _cluster, _cpu, _nodes
from .common import drop_namespace, fresh_namespace, machine


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedules", type=int, default=10_000, help="per-minute cron jobs")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--seconds", type=float, default=60.0, help="each phase's length")
    p.add_argument("--cluster", action="store_true",
                   help="on a Redis Cluster of --masters masters instead of one Redis")
    p.add_argument("--masters", type=int, default=3)
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def _commands(nodes: list[redis.Redis]) -> int:
    return sum(int(n.info("stats")["total_commands_processed"]) for n in nodes)


class _Counted(ObjectiveWatch):
    """The watch, counting the sweeps it ends (one shard's cron index walked through) and
    the jobs it reads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.swept = self.read = 0
        self.swept_once = asyncio.Event()  # every shard walked through once

    async def run_once(self) -> int:
        busy = await super().run_once()
        self.read += self.looked
        return busy

    async def _shard(self, shard: int, now: int) -> int:
        busy = await super()._shard(shard, now)
        self.swept += not busy
        if self.swept >= len(self.shards):
            self.swept_once.set()
        return busy


async def _phase(url: str, ns: str, shards: int, seconds: float, watch: bool,
                 nodes: list[redis.Redis]) -> dict[str, Any]:
    client = async_redis(url)
    keys = Keys(ns)
    clock = RedisClock()
    services: list[Any] = [Materializer(client, [keys.prefix(s) for s in range(shards)], clock)]
    counted = _Counted(client, keys, range(shards), clock) if watch else None
    if counted:
        services.append(counted)
    tasks = [asyncio.create_task(s.run()) for s in services]
    if counted:  # measured from its second sweep on: the first reads every schedule once
        await asyncio.wait_for(counted.swept_once.wait(), 300)
        counted.swept = counted.read = 0
    cpu0, cmd0, t0 = _cpu(nodes), _commands(nodes), time.monotonic()
    await asyncio.sleep(seconds)
    for s in services:
        s.stop()
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - t0
    cpu, cmds = _cpu(nodes) - cpu0, _commands(nodes) - cmd0
    await client.aclose()
    out: dict[str, Any] = {"seconds": elapsed, "redis_cpu_pct": 100 * cpu / elapsed,
                           "commands_per_s": cmds / elapsed, "redis_cpu_s": cpu}
    if counted:
        out["sweeps"] = counted.swept / shards  # every schedule looked at once
        out["sweep_s"] = elapsed / out["sweeps"] if counted.swept else None
        out["jobs_read"] = counted.read  # a job is read only when it may have one to count
    return out


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[tuple[str, list[int]]]:
    if args.cluster:
        with _cluster(args.masters) as c:
            yield c.url, list(c.ports)
    else:
        yield args.redis_url, []


def run(args: argparse.Namespace) -> dict[str, Any]:
    ns = fresh_namespace("bench-objectives")
    with _target(args) as (url, ports):
        nodes = _nodes(url, ports)
        with Client(url, ns, shards=args.shards) as client:
            client.create_namespace()
            warnings.simplefilter("ignore", UnknownTaskWarning)  # no worker runs them
            for start in range(0, args.schedules, 1000):
                client.submit_many([{"task": "bench.noop", "cron": "* * * * *"}
                                    for _ in range(start, min(args.schedules, start + 1000))])
        alone = asyncio.run(_phase(url, ns, args.shards, args.seconds, False, nodes))
        both = asyncio.run(_phase(url, ns, args.shards, args.seconds, True, nodes))
        with Client(url, ns) as client:
            behind = client.status().schedules_behind
        info = machine(nodes[0])
        if not ports:
            drop_namespace(nodes[0], ns)
    cpu_pct = both["redis_cpu_pct"] - alone["redis_cpu_pct"]
    per_s = both["commands_per_s"] - alone["commands_per_s"]
    us_per_job = 1e4 * cpu_pct * both["seconds"] / max(1, both["jobs_read"])
    per_minute = both["jobs_read"] / args.schedules / (both["seconds"] / 60)
    where = f"{args.masters}-master cluster" if args.cluster else "one Redis"
    summary = (f"objectives: {args.schedules:,} per-minute schedules, {args.shards} shards, "
               f"{where}: sweep {both['sweep_s'] or 0:.1f} s ({both['sweeps']:.1f} sweeps); watch "
               f"+{cpu_pct:.1f}% Redis CPU, +{per_s:,.0f} commands/s; each schedule read "
               f"{per_minute:.1f} times a minute, {us_per_job:.0f} us Redis CPU a read; "
               f"{behind:,} behind")
    return {"summary": summary, "schedules": args.schedules, "shards": args.shards,
            "cluster": args.cluster, "alone": alone, "with_watch": both,
            "watch_redis_cpu_pct": cpu_pct, "watch_commands_per_s": per_s,
            "watch_redis_us_per_read": us_per_job, "reads_per_schedule_minute": per_minute, "behind": behind, "machine": info}
