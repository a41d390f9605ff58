"""`sched verify --redis-restart CMD`: an operator's command run once mid-run (a Sentinel
failover, a restart of the Redis server, a managed service's failover drill), so the run
judges the canaries across it.

The command is split like a shell line (shlex) and run without a shell, so nothing in it is
interpreted twice. The span Redis was away is measured by the run itself: from the moment the
command starts until the first of the run's submits that went through after the command
ended (one sent while Redis was away returns only once it is back; one refused is sent
again under the same ids). That span goes into the run's
ground truth twice: as an outage (no node could reclaim then, so the lease rule does not count
it) and as Redis away (an attempt in flight across it may lose its lease on any worker).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.testing.chaos import NODE_TAKEOVER_MS
from scheduler.testing.truth import Outage, Truth, wall_ms

# The command runs in the run's first 80 %: what it disturbs settles while the run waits.
MAX_AT_SHARE = 0.8
TIMEOUT_S = 300.0  # how long the command may take before the run gives up on it
OUTPUT_CHARS = 200  # of the command's output, in its one line of report
STOP_GRACE_S = 5.0  # a command stopped with the run gets SIGTERM, then SIGKILL after this


def split(command: str) -> list[str]:
    """The command's argv (shlex rules); ValueError naming the problem for an empty or
    unbalanced one."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"{command!r} is not a command line ({exc})") from None
    if not argv:
        raise ValueError("the command is empty")
    return argv


def at_seconds(at: str, duration_s: float) -> float:
    """When the command runs, from `at`: a share of the run (`50%`) or seconds (`12`,
    `12s`); ValueError naming the bound for one outside the run's first 80 %."""
    text = at.strip()
    latest = MAX_AT_SHARE * duration_s
    try:
        seconds = (float(text[:-1]) / 100 * duration_s if text.endswith("%")
                   else float(text.removesuffix("s")))
    except ValueError:
        raise ValueError(f"{at!r} is neither a share of the run (50%) nor seconds "
                         f"(12s)") from None
    if not 0 <= seconds <= latest:
        raise ValueError(f"{at!r} is not within the run: must be from 0% to "
                         f"{MAX_AT_SHARE:.0%} of --duration (0 to {latest:g} s)")
    return seconds


@dataclass
class RedisRestart:
    """One operator command, run once `at_s` seconds after `begin()` in a thread of its own.
    `report()` is its one line (exit code and output); `failed` says whether it failed."""

    argv: list[str]
    at_s: float
    truth: Truth = field(default_factory=Truth)  # the run's: verify() hands it over
    say: Callable[[str], None] = lambda line: None
    started_ms: int | None = None
    ended_ms: int | None = None
    code: int | None = None  # its exit code; None: it did not run or did not end in time
    output: str = ""
    _away: Outage | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _proc: subprocess.Popen[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    @property
    def failed(self) -> bool:
        return self.started_ms is not None and self.code != 0

    def begin(self) -> None:
        self._thread = threading.Thread(target=self._run, name="verify-redis-restart",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(self.at_s):
            return
        with self._lock:  # stop() either drops the command or sees its process
            if self._stop.is_set():
                return
            self.started_ms = wall_ms()
            # The outage opens now; the run closes it at its first submit through after the end.
            self._away = Outage("redis restart", self.started_ms)
            self.truth.outages.append(self._away)
            self.truth.redis_away.append(self._away)
            self.say(f"redis restart: running {self.command}")
            try:
                # A session of its own: the run stops it, and whatever it started, as one
                # group (stop), on Ctrl-C too: the terminal's SIGINT reaches only the run.
                self._proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:  # not found, not executable
                self.code, self.output = 127, str(exc)
                self.ended_ms = wall_ms()
                return
        try:
            out, _ = self._proc.communicate(timeout=TIMEOUT_S)
            self.code, self.output = self._proc.returncode, out.strip()
        except subprocess.TimeoutExpired:
            self._kill()
            self.output = f"did not end within {TIMEOUT_S:g} s"
        self.ended_ms = wall_ms()

    def came_back(self, at_ms: int) -> None:
        """A submit of the run went through at `at_ms`: the first after the command ended
        closes the outage (one issued while Redis was away returns only once it is back),
        one shard takeover later (a node's shard leases that ran out meanwhile are taken
        back at its next tick)."""
        away = self._away
        if away is None or away.end_ms is not None or self.ended_ms is None:
            return
        away.end_ms = max(at_ms, self.ended_ms) + NODE_TAKEOVER_MS

    def wait(self) -> None:
        """Until the command ran and ended."""
        if self._thread is not None:
            self._thread.join()

    def stop(self) -> None:
        """The run ends: drop the command if it has not started; stop it, and what it
        started, if it is still running (SIGTERM, then SIGKILL after STOP_GRACE_S)."""
        with self._lock:
            self._stop.set()
            proc = self._proc
        if proc is not None and proc.poll() is None:
            self._kill()
            if self._thread is not None:
                self._thread.join(STOP_GRACE_S)

    def _kill(self) -> None:
        """SIGTERM the command's process group, SIGKILL it if it is still there after
        STOP_GRACE_S; reaps the command."""
        proc = self._proc
        if proc is None:
            return
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue

    def as_json(self) -> dict[str, object]:
        """The command's outcome and the outage the run measured, for --json."""
        away = self._away
        return {"command": self.command, "exit_code": self.code, "output": self.output,
                "started_ms": self.started_ms, "ended_ms": self.ended_ms,
                "away_until_ms": None if away is None else away.end_ms}

    def report(self) -> str:
        """One line: the command, its exit code and the end of its output."""
        if self.started_ms is None:
            return f"redis restart: {self.command} did not run (the run ended first)"
        out = " ".join(self.output.split())
        if len(out) > OUTPUT_CHARS:
            out = "..." + out[-OUTPUT_CHARS:]
        took = ((self.ended_ms or self.started_ms) - self.started_ms) / 1000
        return (f"redis restart: {self.command} exited "
                f"{'(timed out)' if self.code is None else self.code} after {took:.1f} s"
                + (f": {out}" if out else ""))
