"""CPU-bound handlers: jobs/s of pure-Python work in the thread pool, the process pool, and
`sched worker --processes N`.

Each job spins a fixed number of pure-Python iterations (calibrated once, in this process,
to `--work-ms`; every mode then does the same work per job). A backlog of `--jobs` jobs is
submitted first, then the workers start as real processes (`python -m scheduler.cli worker
--app bench.app:cpu_threads` or `cpu_pool`), and the rate is taken while they drain it: jobs finished between
10% and 90% of the backlog over the time that took (worker start-up is left out).

`--after-start` turns it round, as users meet load: the workers start and register first,
then the jobs come in one `submit_many` (a burst), and each worker process must get its
share of what it reads. Each result also gives the share of the jobs the busiest process ran
(`busiest`: 0.5 is an even split between two).

Modes, `--mode` (a comma-separated list runs them interleaved, `--runs` rounds, and reports
the median of each and the median of the per-round ratios of the first to each other):
- `threads`: a plain `def` in the worker's thread pool, `--concurrency` runs at once;
- `pool[:N]`: the same handler with `pool="process"` and `--process-pool N` (default 2), the
  same concurrency;
- `processes[:N]`: the thread-pool handler under `sched worker --processes N` (default
  `--processes`). `--separate` starts N plain workers instead (before the supervisor).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from scheduler import Client

from .app import spin
from .common import drop_namespace, fresh_namespace, machine, process_cpu_s, stop_processes

ROOT = Path(__file__).resolve().parents[1]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", default="threads",
                   help="threads, pool[:N] or processes[:N]; a comma-separated list compares "
                        "them (e.g. pool,threads or processes:2,processes:1)")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--work-ms", type=float, default=5.0,
                   help="pure-Python CPU per job, calibrated once in this process")
    p.add_argument("--concurrency", type=int, default=4, help="each worker's")
    p.add_argument("--processes", type=int, default=2, help="for processes without :N")
    p.add_argument("--process-pool", type=int, default=2, help="for pool without :N")
    p.add_argument("--runs", type=int, default=1, help="rounds of every mode, interleaved")
    p.add_argument("--separate", action="store_true",
                   help="processes: N separate `sched worker` processes instead of "
                        "`--processes N`")
    p.add_argument("--after-start", action="store_true",
                   help="start the workers, wait for them to register, then submit the jobs "
                        "in one burst (default: submit first, then start the workers)")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def calibrate(work_ms: float) -> int:
    """Iterations of `spin` that take `work_ms` here (the fastest of a few tries)."""
    n = 20_000
    best = min(_timed(n) for _ in range(5))
    return max(1, int(n * work_ms / 1000 / best))


def _timed(n: int) -> float:
    t = time.perf_counter()
    spin(n)
    return time.perf_counter() - t


def _parse(mode: str, args: argparse.Namespace) -> tuple[str, int]:
    kind, _, n = mode.partition(":")
    if kind not in ("threads", "pool", "processes"):
        raise SystemExit(f"bench cpu: unknown mode {mode!r} (threads, pool[:N], processes[:N])")
    default = {"threads": 1, "pool": args.process_pool, "processes": args.processes}[kind]
    return kind, int(n) if n else default


def _workers(url: str, ns: str, kind: str, n: int, concurrency: int, separate: bool,
             env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    base = [sys.executable, "-m", "scheduler.cli", "--redis-url", url, "--namespace", ns,
            "worker", "--app", f"bench.app:cpu_{'pool' if kind == 'pool' else 'threads'}",
            "--concurrency", str(concurrency),
            "--log-level", "warning"]
    if kind == "pool":
        base += ["--process-pool", str(n)]
    copies = n if kind == "processes" and separate else 1
    if kind == "processes" and not separate:
        base += ["--processes", str(n)]
    return [subprocess.Popen(base, cwd=ROOT, env=env) for _ in range(copies)]


def _submit(client: Client, jobs: int, iterations: int) -> None:
    for i in range(0, jobs, 1000):
        client.submit_many([{"task": "bench.cpu", "payload": iterations}
                            for _ in range(i, min(jobs, i + 1000))])


def _registered(client: Client, kind: str, n: int, procs: list[subprocess.Popen[bytes]]
                ) -> None:
    """Until every worker process of the mode is in the registry (and so reading)."""
    want = n if kind == "processes" else 1
    deadline = time.perf_counter() + 120
    while len(client.workers()) < want:
        if time.perf_counter() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit(f"bench cpu: {kind}:{n}'s workers did not register")
        time.sleep(0.05)
    time.sleep(0.5)  # each in its blocking read


def _children(pid: int) -> list[int]:
    """The child processes of `pid` (Linux /proc; none elsewhere)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            pass
    return out


def _cpu(procs: list[subprocess.Popen[bytes]]) -> tuple[float, float]:
    """CPU seconds so far of the worker processes, and of their children."""
    return (sum(process_cpu_s(p.pid) for p in procs),
            sum(process_cpu_s(c) for p in procs for c in _children(p.pid)))


def once(url: str, kind: str, n: int, args: argparse.Namespace, iterations: int
         ) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    ns = fresh_namespace("cpu")
    key = f"bench-cpu-done:{ns}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        env = {**os.environ, "BENCH_REDIS_URL": url, "BENCH_DONE_KEY": key}
        with Client(url, ns) as client:
            if args.after_start:
                client.create_namespace()
                procs = _workers(url, ns, kind, n, args.concurrency, args.separate, env)
                _registered(client, kind, n, procs)
                started = time.perf_counter()
                _submit(client, args.jobs, iterations)
            else:
                _submit(client, args.jobs, iterations)
                started = time.perf_counter()
                procs = _workers(url, ns, kind, n, args.concurrency, args.separate, env)
        low, high = max(1, args.jobs // 10), args.jobs - args.jobs // 10
        marks: dict[int, float] = {}
        cpu: dict[int, tuple[float, float]] = {}  # mark -> (workers', their children's) CPU s
        deadline = started + 600
        while True:
            done = int(r.get(key) or 0)
            now = time.perf_counter()
            if done >= low and low not in marks:
                marks[low], low_count = now, done
                cpu[low] = _cpu(procs)
            if done >= high and high not in marks:
                marks[high], high_count = now, done
                cpu[high] = _cpu(procs)
            if done >= args.jobs:
                break
            if now > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"bench cpu: {kind}:{n} did not drain ({done} done)")
            time.sleep(0.01)
        total = time.perf_counter() - started
        window = marks[high] - marks[low]
        by_pid = [int(v) for v in r.hvals(f"{key}:by-pid")]
        # CPU per job over the same window, not wall time: on a shared box wall time is
        # mostly the neighbours'. (Children that retire within it take theirs along.)
        ran = max(1, high_count - low_count)
        parents, children = (b - a for a, b in zip(cpu[low], cpu[high], strict=True))
        return {"mode": f"{kind}:{n}", "per_s": (high_count - low_count) / window
                if window > 0 else 0.0, "drain_s": total, "done": done,
                "busiest": max(by_pid) / sum(by_pid) if by_pid else 0.0,
                "parent_ms_per_job": parents * 1000 / ran,
                "children_ms_per_job": children * 1000 / ran}
    finally:
        stop_processes(procs)
        r.delete(key, f"{key}:by-pid")
        drop_namespace(r, ns)
        r.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    modes = [_parse(m.strip(), args) for m in args.mode.split(",") if m.strip()]
    names = [f"{k}:{n}" for k, n in modes]
    iterations = calibrate(args.work_ms)
    rounds: list[dict[str, dict[str, Any]]] = []
    for _ in range(args.runs):
        rounds.append({f"{k}:{n}": once(args.redis_url, k, n, args, iterations)
                       for k, n in modes})
    median = {m: statistics.median(r[m]["per_s"] for r in rounds) for m in names}
    ratios = {f"{names[0]}/{m}": statistics.median(r[names[0]]["per_s"] / r[m]["per_s"]
                                                   for r in rounds)
              for m in names[1:]}
    ok = all(r[m]["done"] >= args.jobs for r in rounds for m in names)
    busiest = {m: statistics.median(r[m]["busiest"] for r in rounds) for m in names}
    cpu = {m: (statistics.median(r[m]["parent_ms_per_job"] for r in rounds),
               statistics.median(r[m]["children_ms_per_job"] for r in rounds)) for m in names}
    shown = ", ".join(f"{m} {median[m]:,.0f} jobs/s (busiest process {busiest[m]:.0%}; CPU "
                      f"ms/job: worker {cpu[m][0]:.2f}, its children {cpu[m][1]:.2f})"
                      for m in names)
    more = "".join(f"; {k} {v:.2f}x" for k, v in ratios.items())
    flags = (" --separate" if args.separate else "") + (
        " --after-start" if args.after_start else "")
    summary = (f"cpu{flags} ({args.jobs} jobs of {args.work_ms:g} ms pure-Python CPU, "
               f"concurrency {args.concurrency}, x{args.runs}): {shown} (median){more}")
    return {"summary": summary, "ok": ok, "iterations": iterations, "modes": names,
            "median_per_s": median, "median_busiest": busiest, "ratios": ratios,
            "median_cpu_ms_per_job": cpu,
            "rounds": rounds,
            "machine": machine(redis.Redis.from_url(args.redis_url))}
