"""Runs one peer's workload: pre-enqueue, then its worker as a child process, polled.

The worker's no-op task reports through a progress file (probe.py / bullmq_peer.cjs), so the
rate is (count - 1) / (last - first execution) and the worker CPU is the executing process's
own CPU over that window. Redis CPU is the INFO cpu delta from the worker's start to the last
execution seen. The peer's Redis db is flushed before and after each run.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from ..common import redis_cpu_s
from .env import HERE, NODE_DIR, NODE_PEERS, python


@dataclass(frozen=True)
class Peer:
    name: str
    scale: float  # share of --jobs this peer gets in the burn-down (slow peers get fewer)
    delayed: bool = True  # runs the delayed-precision workload


PEERS = {p.name: p for p in [
    Peer("bullmq", 1.0), Peer("arq", 0.5), Peer("saq", 0.5), Peer("taskiq", 0.5, delayed=False),
    Peer("celery", 0.25), Peer("dramatiq", 0.25), Peer("rq", 0.1)]}


def _argv(peer: str, *args: str) -> list[str]:
    if peer in NODE_PEERS:
        return ["node", str(HERE / f"{peer}_peer.cjs"), *args]
    return [str(python(peer)), str(HERE / f"{peer}_peer.py"), *args]


def _env(url: str, jobs: int, mode: str, progress: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PEER_REDIS_URL=url, PEER_JOBS=str(jobs), PEER_MODE=mode,
               PEER_PROGRESS=str(progress), PYTHONPATH=str(HERE),
               NODE_PATH=str(NODE_DIR / "node_modules"))
    return env


def _read(progress: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(progress.read_text()))
    except (FileNotFoundError, ValueError):
        return {"count": 0}


def _enqueue(peer: str, env: dict[str, str], n: int, due: float | None = None) -> None:
    args = ["enqueue", str(n)] + ([repr(due)] if due else [])
    out = subprocess.run(_argv(peer, *args), cwd=HERE, env=env, capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{peer} enqueue failed: {out.stderr.strip()[-300:]}")


class _Worker:
    """The peer's worker process; `stop()` returns its whole-life CPU seconds (children
    included), from getrusage(RUSAGE_CHILDREN) around its reaping."""

    def __init__(self, peer: str, env: dict[str, str], log: Path) -> None:
        self.log = log.open("w")
        self.before = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.proc = subprocess.Popen(_argv(peer, "worker"), cwd=HERE, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> float:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.log.close()
        return (after.ru_utime - self.before.ru_utime) + (after.ru_stime - self.before.ru_stime)


def _wait(worker: _Worker, progress: Path, jobs: int, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    state = _read(progress)
    while state["count"] < jobs and time.monotonic() < deadline and worker.alive():
        time.sleep(0.02)
        state = _read(progress)
    return state


def burn(peer: str, url: str, jobs: int, timeout_s: float) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    r.flushdb()
    with tempfile.TemporaryDirectory(prefix=f"peer-{peer}-") as tmp:
        progress = Path(tmp) / "progress.json"
        env = _env(url, jobs, "burn", progress)
        t = time.perf_counter()
        _enqueue(peer, env, jobs)
        enqueue_s = time.perf_counter() - t
        rcpu0 = redis_cpu_s(r)
        worker = _Worker(peer, env, Path(tmp) / "worker.log")
        try:
            state = _wait(worker, progress, jobs, timeout_s)
            rcpu = redis_cpu_s(r) - rcpu0
        finally:
            total_cpu = worker.stop()
            log = (Path(tmp) / "worker.log").read_text()[-500:]
    r.flushdb()
    r.close()
    n = int(state["count"])
    if n < 2:
        raise RuntimeError(f"{peer}: {n} jobs ran before the worker exited or {timeout_s:g} s "
                           f"passed; worker log: {log}")
    span = state["t_last"] - state["t_first"]
    return {"jobs": jobs, "done": n, "finished": n >= jobs, "seconds": span,
            "per_s": (n - 1) / span if span > 0 else 0.0,
            "worker_us_per_job": state["cpu_s"] / (n - 1) * 1e6,
            "worker_total_cpu_s": total_cpu, "redis_us_per_job": rcpu / n * 1e6,
            "enqueue_per_s": jobs / enqueue_s}


def lag_stats(lags_ms: list[float]) -> dict[str, float]:
    lags = sorted(lags_ms)
    return {"p50_ms": lags[len(lags) // 2], "p99_ms": lags[max(0, math.ceil(len(lags) * 0.99) - 1)],
            "max_ms": lags[-1], "min_ms": lags[0], "n": len(lags)}


def delayed(peer: str, url: str, jobs: int, lead_s: float, timeout_s: float) -> dict[str, Any]:
    """`jobs` jobs all due at one whole second `lead_s`+ from now; lag = start - due."""
    r = redis.Redis.from_url(url)
    r.flushdb()
    with tempfile.TemporaryDirectory(prefix=f"peer-{peer}-") as tmp:
        progress = Path(tmp) / "progress.json"
        env = _env(url, jobs, "delayed", progress)
        worker = _Worker(peer, env, Path(tmp) / "worker.log")
        try:
            time.sleep(2.0)  # the worker starts up
            due = float(math.ceil(time.time() + lead_s))
            _enqueue(peer, env, jobs, due)
            late_enqueue = time.time() > due
            state = _wait(worker, progress, jobs, timeout_s + lead_s + 1)
        finally:
            worker.stop()
            log = (Path(tmp) / "worker.log").read_text()[-500:]
    r.flushdb()
    r.close()
    if state["count"] == 0:
        raise RuntimeError(f"{peer}: no delayed job ran; worker log: {log}")
    return {**lag_stats(state["lags_ms"]), "jobs": jobs, "done": int(state["count"]),
            "enqueue_finished_after_due": late_enqueue}
