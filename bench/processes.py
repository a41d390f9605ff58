"""Processes: no-op burn-down through real `sched worker` processes, plain and with --processes.

N no-op jobs are submitted to a fresh namespace, then one `sched worker` command starts on it:
as today (no --processes), with `--processes 1`, and with `--processes P` (default 2), in
interleaved rounds. The rate is jobs per second from about 10% to about 90% of the jobs done, read
from the worker's own `sched_runs_total` on its --metrics-port (for --processes P, the
supervisor's merged endpoint), so the start-up of the processes is not counted. Prints the
median of each and the ratios to the plain worker.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

import redis

from .common import drop_namespace, fresh_namespace, machine, stop_processes

APP = "bench.app:registry"
# Each poll is a scrape the worker serves from a thread of its own (and the supervisor from
# each child): polled seldom, it takes little from the run; the rate is counted between two
# polls, so the interval does not round it.
POLL_S = 0.1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=60_000)
    p.add_argument("--processes", type=int, default=2, help="P of the third mode")
    p.add_argument("--runs", type=int, default=6,
                   help="rounds (a multiple of 3 puts each mode in each place equally); each "
                        "figure is their median")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def _succeeded(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0  # not serving yet
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sched_runs_total{") and 'outcome="succeeded"' in line)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one(args: argparse.Namespace, r: redis.Redis, extra: tuple[str, ...]) -> float:
    from scheduler import Client

    ns = fresh_namespace("processes")
    try:
        with Client(args.redis_url, ns) as client:
            for i in range(0, args.jobs, 10_000):
                client.submit_many([{"task": "bench.noop"}] * min(10_000, args.jobs - i))
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", "--redis-url", args.redis_url,
             "--namespace", ns, "worker", "--app", APP, *extra, "--metrics-port",
             str(port), "--log-level", "warning"])
        try:
            first: tuple[float, float] | None = None  # (time, done) at the first poll past 10%
            deadline = time.monotonic() + 600
            while True:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"processes: the worker {extra} did not burn down")
                done, now = _succeeded(port), time.monotonic()
                if first is None and done >= args.jobs * 0.1:
                    first = (now, done)
                if first is not None and done >= args.jobs * 0.9:
                    if now == first[0]:
                        raise SystemExit("processes: the jobs ran between two polls; give "
                                         "more --jobs")
                    return (done - first[1]) / (now - first[0])
                time.sleep(POLL_S)
        finally:
            stop_processes([proc])
    finally:
        drop_namespace(r, ns)


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    modes = {"plain": (), "processes_1": ("--processes", "1"),
             f"processes_{args.processes}": ("--processes", str(args.processes))}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(args.runs):
        # Interleaved, and rotated: each mode takes each place in a round as often (a
        # round's first run finds Redis fresher than its last).
        names = list(modes)
        order = names[i % len(names):] + names[:i % len(names)]
        for mode in order:
            rates[mode].append(_one(args, r, modes[mode]))
    med = {m: statistics.median(v) for m, v in rates.items()}
    p = f"processes_{args.processes}"
    summary = (f"processes: {args.jobs} no-op jobs x{args.runs}: plain worker "
               f"{med['plain']:,.0f} jobs/s, --processes 1 {med['processes_1']:,.0f} "
               f"({med['processes_1'] / med['plain']:.2f}x), --processes {args.processes} "
               f"{med[p]:,.0f} ({med[p] / med['plain']:.2f}x) (median)")
    return {"summary": summary, "jobs": args.jobs, "rates": rates, "median": med,
            "machine": machine(r)}
