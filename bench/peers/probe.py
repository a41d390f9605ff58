"""Runs inside a peer's worker process (the peers' venv, stdlib only): counts executions.

A peer's no-op task calls `PROBE.hit()` (burn-down) or `PROBE.hit(due_s)` (delayed). Every
`every` executions and at the last one it rewrites the progress file named by
`PEER_PROGRESS` (JSON: count, first and last wall times, this process's CPU seconds since the
first execution, and the start lags in ms). The bench polls that file: the rate is
(count - 1) / (t_last - t_first), so the worker's start-up is not timed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable


class Probe:
    def __init__(self) -> None:
        self.path = os.environ.get("PEER_PROGRESS", "")
        self.jobs = int(os.environ.get("PEER_JOBS", "0") or 0)
        delayed = os.environ.get("PEER_MODE") == "delayed"
        self.every = max(1, self.jobs // (10 if delayed else 50))
        self.count = 0
        self.t_first = 0.0
        self.cpu_first = 0.0
        self.lags_ms: list[float] = []
        self.lock = threading.Lock()

    def hit(self, due_s: float | None = None) -> None:
        now = time.time()
        with self.lock:
            if self.count == 0:
                self.t_first, self.cpu_first = now, time.process_time()
            self.count += 1
            if due_s is not None:
                self.lags_ms.append((now - due_s) * 1000)
            if self.count % self.every == 0 or self.count == self.jobs:
                self._write(now)

    def _write(self, now: float) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"count": self.count, "t_first": self.t_first, "t_last": now,
                       "cpu_s": time.process_time() - self.cpu_first, "pid": os.getpid(),
                       "lags_ms": self.lags_ms}, f)
        os.replace(tmp, self.path)


PROBE = Probe()


def main(enqueue: Callable[[int, float | None], None], worker: Callable[[], None]) -> None:
    """`python <peer>.py enqueue N [DUE_EPOCH_S]` or `python <peer>.py worker`."""
    if sys.argv[1] == "enqueue":
        due = float(sys.argv[3]) if len(sys.argv) > 3 else None
        enqueue(int(sys.argv[2]), due)
    elif sys.argv[1] == "worker":
        worker()
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")


def exec_worker(*argv: str) -> Callable[[], None]:
    """A worker that exec's the peer's own CLI from the venv (same pid: the bench's child)."""
    def run() -> None:
        path = os.path.join(os.path.dirname(sys.executable), argv[0])
        os.execv(path, [path, *argv[1:]])
    return run


def redis_url() -> str:
    return os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/15")
