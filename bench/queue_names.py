"""Queue names: what `sched status` and one `stats.lua` call cost with many queue names of
which a few hold work, before and after a queue-cleaning pass (queue_cleaner.py).

    python -m bench queue_names [--names 5000] [--busy 5] [--shards 2] [--runs 5]
                                [--before TREE]

One job is submitted to each of `--names` queues; every queue but the first `--busy` is then
drained (its entries read and acked, as workers leave them). Measured, median of `--runs`:
`sched status` as a user runs it (a process, so interpreter start included), the status read
alone (`Client.status()`), and one `stats.lua` call per shard (timed EVALSHA, and its usec
in `INFO commandstats`): with every lane the names used still indexed, then after one pass of
the cleaner. `--before TREE` (a checkout, e.g. `git archive main`) also measures that tree's
`sched status` and stats.lua on the same data, its queue names listed as it lists them (in
`<ns>:queues`). On a private redis-server by default."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from scheduler import Client
from scheduler.core.keys import DISPATCH_GROUP, Keys
from scheduler.node.queue_cleaner import QueueCleaner
from scheduler.redis.clock import RedisClock
from scheduler.redis.connection import async_redis
from scheduler.scripts import calls as scripts
from scheduler.scripts import source as sources

from .common import fresh_namespace, machine

ROOT = Path(__file__).resolve().parents[1]

# Another tree's stats.lua, called as that tree calls it (names as arguments when its header
# takes them), timed from the Redis side.
_BEFORE_STATS = """
import json, sys, time, redis
from scheduler.scripts import source as sources
url, ns, shards, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = redis.Redis.from_url(url)
text = sources.SOURCES["stats"].text
sha = r.script_load(text)
names = sorted(q.decode() for q in r.smembers(ns + ":queues"))
takes_names = "ARGV[2]" in text.split("]]", 1)[0]
out = []
for _ in range(runs):
    for s in range(shards):
        args = [int(time.time() * 1000)] + ([len(names), *names] if takes_names else [])
        r.config_resetstat()
        t0 = time.perf_counter()
        r.evalsha(sha, 1, f"{ns}:{{s{s:02d}}}:", *args)
        wall = time.perf_counter() - t0
        out.append([wall, r.info("commandstats")["cmdstat_evalsha"]["usec"]])
print(json.dumps(out))
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--names", type=int, default=5000)
    p.add_argument("--busy", type=int, default=5, help="queues that keep their job")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--before", default=None, help="a source tree to measure as well")
    p.add_argument("--redis-url", default="private")
    p.add_argument("--out", default=None)


def _cli_status_s(tree: Path, url: str, ns: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "scheduler.cli", "--redis-url", url, "--namespace", ns,
                    "status"], env=env, cwd=tree, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def _measure(r: redis.Redis, client: Client, url: str, ns: str, shards: int,
             runs: int) -> dict[str, float]:
    sha = r.script_load(sources.SOURCES["stats"].text)
    cli, read, wall, usec = [], [], [], []
    for _ in range(runs):
        cli.append(_cli_status_s(ROOT, url, ns))
        t0 = time.perf_counter()
        client.status()
        read.append(time.perf_counter() - t0)
        for s in range(shards):
            call = scripts.stats(Keys(ns).prefix(s), int(time.time() * 1000))
            r.config_resetstat()
            t0 = time.perf_counter()
            r.evalsha(sha, 1, *call.keys, *call.args)
            wall.append(time.perf_counter() - t0)
            usec.append(r.info("commandstats")["cmdstat_evalsha"]["usec"])
    return {"sched_status_s": statistics.median(cli), "status_read_s": statistics.median(read),
            "stats_call_ms": statistics.median(wall) * 1000,
            "stats_redis_ms": statistics.median(usec) / 1000}


def _before(tree: Path, url: str, ns: str, shards: int, runs: int) -> dict[str, float]:
    cli = [_cli_status_s(tree, url, ns) for _ in range(runs)]
    out = subprocess.check_output([sys.executable, "-c", _BEFORE_STATS, url, ns, str(shards),
                                   str(runs)], cwd=tree, env={**os.environ,
                                                              "PYTHONPATH": str(tree)})
    calls = json.loads(out)
    return {"sched_status_s": statistics.median(cli),
            "stats_call_ms": statistics.median(c[0] for c in calls) * 1000,
            "stats_redis_ms": statistics.median(c[1] for c in calls) / 1000}


def _seed(r: redis.Redis, client: Client, ns: str, names: list[str], busy: int,
          shards: int) -> None:
    for i in range(0, len(names), 500):
        client.submit_many([{"task": "bench.noop", "queue": q} for q in names[i:i + 500]])
    keys = Keys(ns)
    pipe = r.pipeline(transaction=False)
    for q in names[busy:]:  # drained: read and acked, as workers leave a queue
        for s in range(shards):
            stream = keys.queue(s, q)
            pipe.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
            pipe.xreadgroup(DISPATCH_GROUP, "bench", {stream: ">"})
    replies = pipe.execute()
    pipe = r.pipeline(transaction=False)
    for reply in replies[1::2]:
        for stream, msgs in reply or []:
            pipe.xack(stream, DISPATCH_GROUP, *[m for m, _ in msgs])
    pipe.execute()


def _clean(url: str, ns: str, shards: int) -> int:
    async def once() -> int:
        async with async_redis(url) as conn:
            return await QueueCleaner(conn, Keys(ns), range(shards), RedisClock(),
                                      idle_s=0.001, total_shards=shards).run_to_end()
    time.sleep(0.01)  # past the idle time
    return asyncio.run(once())


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    ns = fresh_namespace("queues")
    names = [f"q{i:05d}" for i in range(args.names)]
    result: dict[str, Any] = {"names": args.names, "busy": args.busy, "shards": args.shards,
                              "machine": machine(r)}
    with Client(args.redis_url, ns, shards=args.shards) as client:
        _seed(r, client, ns, names, args.busy, args.shards)
        if args.before:  # its queue names where it lists them, for its measure only
            r.sadd(Keys(ns).queues, *names)
            result["before"] = _before(Path(args.before).resolve(), args.redis_url, ns,
                                       args.shards, args.runs)
            r.delete(Keys(ns).queues)
        result["indexed"] = _measure(r, client, args.redis_url, ns, args.shards, args.runs)
        result["removed"] = _clean(args.redis_url, ns, args.shards)
        result["cleaned"] = _measure(r, client, args.redis_url, ns, args.shards, args.runs)
        result["listed"] = len(client.status().queues)
    r.close()
    a, b = result["indexed"], result["cleaned"]
    before = ""
    if args.before:
        x = result["before"]
        before = (f"; {args.before}: sched status {x['sched_status_s']:.2f} s, stats.lua "
                  f"{x['stats_call_ms']:.1f} ms ({x['stats_redis_ms']:.1f} ms in Redis)")
    result["summary"] = (
        f"queue_names: {args.names} names, {args.busy} holding work, {args.shards} shards: "
        f"sched status {a['sched_status_s']:.2f} -> {b['sched_status_s']:.2f} s, status read "
        f"{a['status_read_s'] * 1000:.1f} -> {b['status_read_s'] * 1000:.1f} ms, stats.lua "
        f"{a['stats_call_ms']:.2f} -> {b['stats_call_ms']:.2f} ms per shard "
        f"({a['stats_redis_ms']:.2f} -> {b['stats_redis_ms']:.2f} ms in Redis) after one "
        f"cleaning pass ({result['removed']} lanes dropped, {result['listed']} queues "
        f"listed){before}")
    result["ok"] = result["listed"] == args.busy
    return result
