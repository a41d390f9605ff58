"""`sched verify --chaos`: extra workers and a scheduler node of the user's app, killed with
SIGKILL and restarted at random through a verify run, so reclaim and shard failover are on
the canaries' path.

The schedule is drawn from a seed (printed at the start of a run, so a failing one can be
repeated). Every worker it kills goes into the run's ground truth (`Truth.faulted_pids`: its
attempts may be lost), and every node it kills opens an outage for as long as its shards
wait for a new owner (no node may reclaim them then). A worker's kill waits, at most until
the canaries' submission ends, for that worker to hold a canary (`holding`: the slow ones
hold it a second), so the kill loses an attempt in flight and its reclaim is on the path;
`in_flight` counts the kills that did. Its children are stopped when the run ends, whatever
the outcome.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.redis.failures import REDIS_ERRORS
from scheduler.testing.truth import Outage, Truth, wall_ms

MIN_KILLS, MAX_KILLS = 1, 1000
MIN_WORKERS, MAX_WORKERS = 1, 16
MAX_SEED = 2**32 - 1
# A killed node's shards wait out their lease (the node's default, 5 s), then a tick of the
# node that takes them: a third of the lease.
NODE_TAKEOVER_MS = 5000 * 4 // 3
RESTART_S = (0.5, 2.0)  # how long a killed child stays down before it is restarted
STOP_S = 20.0  # how long a child may drain on SIGTERM before it is killed
AIM_POLL_S = 0.05  # how often a worker's kill looks for a canary it holds


@dataclass
class Child:
    """One process the chaos runs: its role and the `sched` arguments that (re)start it."""

    role: str  # "worker" | "scheduler"
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class Chaos:
    """The chaos of one run: `workers` extra `sched worker --app APP` children and one
    `sched scheduler`, on the run's Redis URL and namespace; `kills` SIGKILLs spread at
    random over `duration_s` from `begin()`, each victim restarted a moment later."""

    redis_url: str
    namespace: str
    app: str
    queue: str
    truth: Truth = field(default_factory=Truth)  # the run's: verify() hands it over
    kills: int = 5
    workers: int = 2
    seed: int = 0
    say: Callable[[str], None] = lambda line: None
    killed: list[str] = field(default_factory=list)  # "worker 1234" per kill, in order
    kill_ms: list[int] = field(default_factory=list)  # wall-clock ms of each kill
    # The pids of the workers holding a canary now (the run's: verify() hands it over);
    # None: kills are not aimed.
    holding: Callable[[], set[int]] | None = None
    in_flight: int = 0  # worker kills that found a canary in flight
    _children: list[Child] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        """Start the children (before the run probes: they may be what serves it)."""
        self._children = [Child("worker", ["worker", "--app", self.app, "--queues", self.queue])
                          for _ in range(self.workers)]
        self._children.append(Child("scheduler", ["scheduler"]))
        for child in self._children:
            self._spawn(child)

    def _spawn(self, child: Child) -> None:
        # `-m` puts the working directory on the path, as the `sched` script finds the app.
        env = {**os.environ, "SCHED_REDIS_URL": self.redis_url,
               "SCHED_NAMESPACE": self.namespace}
        child.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", *child.args, "--log-level", "error"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    def begin(self, duration_s: float) -> None:
        """Draw the schedule from the seed and run it in the background."""
        rng = random.Random(self.seed)
        # Within the run's first 80 %: a lost attempt is reclaimed while the run settles.
        at = sorted(rng.uniform(0.05, 0.8) * duration_s for _ in range(self.kills))
        plan = [(t, rng.randrange(len(self._children)), rng.uniform(*RESTART_S)) for t in at]
        self._thread = threading.Thread(target=self._run, args=(plan, duration_s),
                                        name="verify-chaos", daemon=True)
        self._thread.start()

    def _run(self, plan: list[tuple[float, int, float]], duration_s: float) -> None:
        start = time.monotonic()
        for at, index, down_s in plan:
            if self._stop.wait(max(0.0, start + at - time.monotonic())):
                return
            child = self._children[index]
            if child.role == "worker":
                self._aim(child, start + duration_s)
            self._kill(child)
            if self._stop.wait(down_s):
                return
            self._spawn(child)

    def _held(self, pid: int) -> bool:
        """Whether the worker `pid` holds a canary now (False when Redis cannot say)."""
        if self.holding is None:
            return False
        try:
            return pid in self.holding()
        except REDIS_ERRORS:
            return False

    def _aim(self, child: Child, until: float) -> None:
        """Wait until the worker holds a canary, its process ends, the submission ends
        (`until`: no new canary starts after) or the run stops."""
        proc = child.proc
        if self.holding is None or proc is None:
            return
        while proc.poll() is None and time.monotonic() < until and not self._held(proc.pid):
            if self._stop.wait(AIM_POLL_S):
                return

    def _kill(self, child: Child) -> None:
        proc = child.proc
        if proc is None or proc.poll() is not None:
            return
        self.truth.faulted_pids.add(proc.pid)
        now = wall_ms()
        self.kill_ms.append(now)
        if child.role == "scheduler":
            self.truth.outages.append(Outage("node killed", now, now + NODE_TAKEOVER_MS))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.killed.append(f"{child.role} {proc.pid}")
        # Read after its death: a canary it started and never ended was in flight.
        held = child.role == "worker" and self._held(proc.pid)
        self.in_flight += held
        self.say(f"chaos: killed {child.role} {proc.pid} ({len(self.killed)} of {self.kills})"
                 + (", a canary in flight" if held else ""))

    def wait(self) -> None:
        """Until every kill of the schedule is done and its victim restarted."""
        if self._thread is not None:
            self._thread.join()

    def stop(self) -> None:
        """Stop every child (SIGTERM: workers drain; SIGKILL after STOP_S)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        procs = [c.proc for c in self._children if c.proc is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def new_seed() -> int:
    """A seed for a run that was given none."""
    return random.SystemRandom().randrange(MAX_SEED + 1)
