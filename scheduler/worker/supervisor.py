"""`sched worker --processes N`: a supervisor that runs N worker processes over the cores.

The supervisor holds no lease, runs no handler and never talks to Redis. It starts each child
by running the same command line again (`python -m scheduler.cli ... worker ...` without
`--processes` and `--metrics-port`), so a restart, and a SIGHUP's rolling restart, picks up
code deployed since. It:

* restarts a child that dies (logged with its exit code or signal, counted in
  `sched_worker_restarts_total`) after a backoff that doubles with each of its recent deaths,
  from BACKOFF_FIRST_S up to BACKOFF_MAX_S; `CRASH_LOOP` deaths of one child in a row before
  it was up (a bad --app, a broken deploy), or `CRASH_LOOP` deaths of one child within
  `CRASH_WINDOW_S` however long each was up (a leak the OOM killer ends, a crash under
  load), stop every child and end the supervisor with an error naming the cause;
* on SIGTERM/SIGINT, at any point (the start of the children included: a stop is looked at
  before each start), starts no more children and sends SIGTERM to every child, which
  drains within its --grace as a lone worker does; children still there `STOP_MARGIN_S`
  after the grace are killed;
* on SIGHUP replaces the children one at a time: the new one starts, and once it is up the
  old one gets SIGTERM and drains. A replacement that dies before it is up ends the rolling
  restart, and the old children keep running;
* passes SIGUSR1 on to the children (each logs where its tasks wait).

A child knows its supervisor from `SCHED_SUPERVISOR` (JSON: id, pid, host, index, processes,
restarts) and tells it that it is up by writing `CHILD_FILE_ENV`'s file ({"metrics_port":
port or null}). It dies with the supervisor: PR_SET_PDEATHSIG on Linux, and a watch for its
parent pid changing everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from scheduler.core.bounds import MAX_PROCESSES
from scheduler.core.errors import ConfigError, SchedulerError
from scheduler.observe import metrics
from scheduler.worker.config import SupervisorRef

log = logging.getLogger("scheduler.worker.supervisor")

# Tells each child who supervises it: a SupervisorRef as JSON (scheduler/worker/config.py).
SUPERVISOR_ENV = "SCHED_SUPERVISOR"
# Where a child writes {"metrics_port": ...} once it is up (its presence is the "up").
CHILD_FILE_ENV = "SCHED_SUPERVISOR_CHILD_FILE"
# Consecutive deaths of one child before it was up (or within UP_GRACE_S of it) that stop
# the supervisor: a child that cannot start will not start on the sixth try either.
CRASH_LOOP = 5
UP_GRACE_S = 1.0
# CRASH_LOOP deaths of one child within this long stop the supervisor too, however long each
# was up: a child killed every few seconds serves nothing, and the supervisor looks healthy.
CRASH_WINDOW_S = 60.0
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
# A SIGHUP replacement that is not up after this long is given up (the old child stays).
START_TIMEOUT_S = 60.0
# After SIGTERM, children get their --grace and this much more to release what they hold and
# exit before they are killed.
STOP_MARGIN_S = 1.5
TICK_S = 0.1
# The worker options the children do not get: they are one process each, and they serve
# their metrics on a loopback port of their own for the supervisor's /metrics.
SUPERVISOR_ONLY = ("--processes", "--metrics-port")
SUPERVISOR_ONLY_ENV = ("SCHED_METRICS_PORT",)


class CrashLoop(SchedulerError):
    """A child died before it was up CRASH_LOOP times in a row, or CRASH_LOOP times within
    CRASH_WINDOW_S; or a child could not be started at all."""


def cores() -> int:
    """The cores this process may run on (its affinity, where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def child_argv(argv: Sequence[str]) -> list[str]:
    """The command line of a child: the supervisor's own (`sys.argv[1:]`) without the
    options only a supervisor takes."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in SUPERVISOR_ONLY:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in SUPERVISOR_ONLY)):
            out.append(arg)
    return [sys.executable, "-m", "scheduler.cli", *out]


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class Child:
    index: int
    proc: subprocess.Popen[bytes]
    file: str  # where it says it is up
    started: float = field(default_factory=time.monotonic)
    up_at: float | None = None
    metrics_port: int | None = None
    retiring: bool = False  # asked to stop (SIGHUP replaced it, or the supervisor stops)

    def poll_up(self) -> bool:
        if self.up_at is None:
            try:
                with open(self.file) as f:
                    said = json.load(f)
            except (OSError, ValueError):
                return False
            self.up_at = time.monotonic()
            self.metrics_port = said.get("metrics_port")
        return True


class Supervisor:
    """Runs `processes` children of `command`; run() returns the exit code for the process."""

    def __init__(self, command: Sequence[str], processes: int, grace_s: float, *,
                 env: dict[str, str] | None = None, metrics: bool = False) -> None:
        if type(processes) is not int or not 1 <= processes <= MAX_PROCESSES:
            raise ConfigError(f"processes must be 1 to {MAX_PROCESSES:,}, not {processes!r}")
        self.command = list(command)
        self.processes = processes
        self.grace_s = grace_s
        self.metrics = metrics  # whether children serve metrics for the supervisor to merge
        self.env = {k: v for k, v in (os.environ if env is None else env).items()
                    if k not in SUPERVISOR_ONLY_ENV}
        self.host = socket.gethostname()
        self.id = f"{self.host}-{os.getpid()}"
        self.dir = ""  # made by run(), where the children say they are up
        self.children: dict[int, Child] = {}
        self.retiring: list[Child] = []  # replaced by SIGHUP, draining
        self.restarts = 0
        self.starts = 0
        self.early_deaths: dict[int, int] = {}  # index -> deaths before up, in a row
        self.deaths: dict[int, deque[float]] = {}  # index -> its deaths within CRASH_WINDOW_S
        self.due: dict[int, float] = {}  # index -> monotonic time of its restart
        self.rolling: deque[int] = deque()
        self.replacing: Child | None = None
        self.stopping = False
        self.failed: str | None = None
        self.dumps = 0  # SIGUSR1s received; forwarded up to `dumped`
        self.dumped = 0
        # Signal handlers wake the loop through a pipe (made by run()): a threading.Event's
        # lock could be held by the very code the handler interrupted.
        self._wake_r = self._wake_w = -1

    # --- control (safe from signal handlers) ---------------------------------------------

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending; closed: run() ended
            os.write(self._wake_w, b"w")

    def _sleep(self, seconds: float) -> None:
        if select.select([self._wake_r], [], [], seconds)[0]:
            os.read(self._wake_r, 4096)

    def stop(self) -> None:
        self.stopping = True
        self.wake()

    def dump_children(self) -> None:
        """SIGUSR1: each child logs where its tasks wait (the supervisor has none)."""
        self.dumps += 1
        self.wake()

    def restart_all(self) -> None:
        """SIGHUP: replace every child, one at a time."""
        if not self.stopping:
            self.rolling = deque(range(self.processes))
            self.wake()

    # --- children ------------------------------------------------------------------------

    def _start(self, index: int) -> Child:
        self.starts += 1
        path = os.path.join(self.dir, f"child-{self.starts}.json")
        ref = SupervisorRef(id=self.id, pid=os.getpid(), host=self.host, index=index,
                            processes=self.processes, restarts=self.restarts)
        env = {**self.env, SUPERVISOR_ENV: msgspec.json.encode(ref).decode(),
            CHILD_FILE_ENV: path, CHILD_METRICS_ENV: "1" if self.metrics else "0"}
        proc = subprocess.Popen(self.command, env=env)
        log.info("worker child %d started (pid %d)", index, proc.pid)
        return Child(index, proc, path)

    def alive(self) -> list[Child]:
        kids = [*list(self.children.values()), *list(self.retiring)]  # read by /metrics too
        if self.replacing is not None:
            kids.append(self.replacing)
        return [c for c in kids if c.proc.poll() is None]

    def metrics_targets(self) -> list[tuple[str, int]]:
        """(process label, port) of every live child that serves metrics; a child being
        replaced and its replacement share their index, so the label is the pid."""
        return [(str(c.proc.pid), c.metrics_port) for c in self.alive()
                if c.metrics_port is not None]

    def _died(self, child: Child, now: float) -> None:
        code = child.proc.returncode
        early = child.up_at is None or now - child.up_at < UP_GRACE_S
        streak = self.early_deaths[child.index] = (
            self.early_deaths.get(child.index, 0) + 1 if early else 0)
        if streak >= CRASH_LOOP:
            self.failed = (f"worker child {child.index} died {streak} times in a row before it "
                           f"was up (last: {describe_exit(code)}); stopping: fix what its own "
                           f"error above says (e.g. --app), then start again")
            return
        deaths = self.deaths.setdefault(child.index, deque())
        deaths.append(now)
        while now - deaths[0] > CRASH_WINDOW_S:
            deaths.popleft()
        if len(deaths) >= CRASH_LOOP:
            self.failed = (f"worker child {child.index} died {len(deaths)} times within "
                           f"{CRASH_WINDOW_S:.0f}s (last: {describe_exit(code)}); stopping: "
                           f"see what ended it above (its own error, the OOM killer, a "
                           f"crash), then start again")
            return
        tries = max(streak, len(deaths))
        delay = min(BACKOFF_FIRST_S * 2 ** (tries - 1), BACKOFF_MAX_S)
        log.warning("worker child %d (pid %d) %s; restarting it in %.2fs (%d death(s) within "
                    "%.0fs)", child.index, child.proc.pid, describe_exit(code), delay,
                    len(deaths), CRASH_WINDOW_S)
        self.due[child.index] = now + delay

    def run_once(self) -> None:
        """One pass: reap the dead, restart what is due, advance a rolling restart."""
        now = time.monotonic()
        for index, child in list(self.children.items()):
            if child.proc.poll() is not None:
                del self.children[index]
                if not self.stopping:
                    self._died(child, now)
            elif child.poll_up() and child.up_at is not None and now - child.up_at >= UP_GRACE_S:
                self.early_deaths[index] = 0
        for child in [c for c in self.retiring if c.proc.poll() is not None]:
            self.retiring.remove(child)
            log.info("worker child %d (pid %d) replaced, %s", child.index, child.proc.pid,
                     describe_exit(child.proc.returncode))
        if self.dumped < self.dumps:
            self.dumped = self.dumps
            for c in self.alive():
                _signal(c, signal.SIGUSR1)
        if self.failed or self.stopping:
            return
        self._restart_due(now)
        self._roll(now)
        metrics.SUPERVISOR_CHILDREN.set(len(self.alive()))

    def _restart_due(self, now: float) -> None:
        for index, at in list(self.due.items()):
            if index in self.children:  # a SIGHUP replacement took its place meanwhile
                del self.due[index]
            elif at <= now:
                del self.due[index]
                self.restarts += 1
                metrics.SUPERVISOR_RESTARTS.inc()
                try:
                    self.children[index] = self._start(index)
                except OSError as exc:  # no fork (EAGAIN, ENOMEM): try again later
                    log.error("could not start worker child %d (%s); trying again in %.0fs",
                              index, exc, BACKOFF_MAX_S)
                    self.due[index] = now + BACKOFF_MAX_S

    def _roll(self, now: float) -> None:
        new = self.replacing
        if new is None:
            while self.rolling:
                index = self.rolling.popleft()
                if index in self.children:  # one restarting after a death is new anyway
                    self.replacing = self._start(index)
                    return
            return
        if new.proc.poll() is not None or now - new.started > START_TIMEOUT_S:
            why = (describe_exit(new.proc.returncode) if new.proc.poll() is not None
                   else f"not up after {START_TIMEOUT_S:.0f}s")
            log.error("the replacement of worker child %d (pid %d) failed (%s); the old "
                      "children keep running", new.index, new.proc.pid, why)
            with contextlib.suppress(ProcessLookupError):
                new.proc.kill()
            new.proc.wait()
            self.replacing = None
            self.rolling.clear()
            return
        if new.poll_up():
            old = self.children.get(new.index)
            self.children[new.index] = new
            self.replacing = None
            if old is not None:
                old.retiring = True
                self.retiring.append(old)
                _signal(old, signal.SIGTERM)
            log.info("worker child %d replaced by pid %d", new.index, new.proc.pid)

    def _stop_children(self) -> bool:
        """SIGTERM to every child, then wait for them (killing any still there after the
        grace and a margin); True when none had to be killed."""
        kids = self.alive()
        for c in kids:
            c.retiring = True
            _signal(c, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s + STOP_MARGIN_S
        clean = True
        for c in kids:
            try:
                c.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker child %d (pid %d) did not stop within the grace; killing it",
                          c.index, c.proc.pid)
                c.proc.kill()
                c.proc.wait()
                clean = False
        metrics.SUPERVISOR_CHILDREN.set(0)
        return clean

    def run(self) -> int:
        """Until stop() (0 once every child drained) or a crash loop (raises CrashLoop)."""
        log.info("supervisor %s starting %d worker processes", self.id, self.processes)
        self.dir = tempfile.mkdtemp(prefix="sched-supervisor-")
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        try:
            for i in range(self.processes):
                if self.stopping:  # SIGTERM during the start: start no more
                    break
                try:
                    self.children[i] = self._start(i)
                except OSError as exc:
                    self.failed = f"could not start worker child {i}: {exc}"
                    break
            while not self.stopping and self.failed is None:
                self.run_once()
                self._sleep(TICK_S)
            clean = self._stop_children()
        finally:
            for c in self.alive():  # an exception on the way: no child outlives us
                c.proc.kill()
            shutil.rmtree(self.dir, ignore_errors=True)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1
        if self.failed is not None:
            raise CrashLoop(self.failed)
        log.info("supervisor %s stopped", self.id)
        return 0 if clean else 1


def _signal(child: Child, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.proc.send_signal(sig)


def serve_supervisor(supervisor: Supervisor) -> int:
    """Run a supervisor in the main thread: SIGTERM/SIGINT stop it, SIGHUP rolls."""
    signal.signal(signal.SIGTERM, lambda *_: supervisor.stop())
    signal.signal(signal.SIGINT, lambda *_: supervisor.stop())
    signal.signal(signal.SIGHUP, lambda *_: supervisor.restart_all())
    signal.signal(signal.SIGUSR1, lambda *_: supervisor.dump_children())
    signal.signal(signal.SIGCHLD, lambda *_: supervisor.wake())
    return supervisor.run()


# --- the child's side -----------------------------------------------------------------------

# Whether the supervisor merges the children's metrics ("1"): then a child serves its own.
CHILD_METRICS_ENV = "SCHED_SUPERVISOR_CHILD_METRICS"
PR_SET_PDEATHSIG = 1
PARENT_CHECK_S = 1.0


@dataclass
class ChildLink:
    """What a worker started by a supervisor knows of it."""

    supervisor_pid: int
    file: str
    serve_metrics: bool

    @classmethod
    def from_env(cls, supervisor: SupervisorRef | None,
                 env: Mapping[str, str]) -> ChildLink | None:
        """The link of a child its supervisor started (`env` as the CLI read it); None for a
        worker started on its own."""
        if supervisor is None or CHILD_FILE_ENV not in env:
            return None
        return cls(supervisor.pid, env[CHILD_FILE_ENV], env.get(CHILD_METRICS_ENV) == "1")

    def orphaned(self) -> bool:
        return os.getppid() != self.supervisor_pid

    def die_with_parent(self) -> None:
        """On Linux the kernel sends SIGTERM (a drain, as from the supervisor) when the
        supervisor dies, even by SIGKILL; watch_parent() covers the rest."""
        if sys.platform.startswith("linux"):
            import ctypes

            with contextlib.suppress(OSError, AttributeError):
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if self.orphaned():  # it died before the prctl took
            os.kill(os.getpid(), signal.SIGTERM)

    def up(self, metrics_port: int | None) -> None:
        """Tell the supervisor this child is up (atomically: it never reads half a file)."""
        tmp = f"{self.file}.tmp"
        with open(tmp, "w") as f:
            json.dump({"metrics_port": metrics_port}, f)
        os.replace(tmp, self.file)

    async def watch_parent(self, stop: Callable[[], None]) -> None:
        while True:  # a poll: no event tells a process its parent is gone
            if self.orphaned():
                log.warning("supervisor pid %d is gone; stopping", self.supervisor_pid)
                stop()
                return
            await asyncio.sleep(PARENT_CHECK_S)
