"""What every background loop shares: how it sleeps, backs off, reports errors, and never dies.

A loop of a long-running process (worker, scheduler node, snapshotter) treats every error as a
reason to wait and try again, never to exit: Redis refusing writes (OOM), a replica that is
read-only, a server loading its data set, a script running too long, a timeout, a protocol
error, or a bug of ours. It logs the first error of each kind at once, then at most one line
per kind every `ErrorLog.every_s` with a count of what it held back, and one line when it
works again. Between tries it backs off with jitter, capped at one second, so a Redis that
answers again is used again within about a second.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import redis.exceptions

from scheduler.core.errors import NamespaceError, NamespaceMissing, RedisUnavailable
from scheduler.redis.failures import REDIS_ERRORS, error_code

# Redis error codes that say "not now" rather than "never": the same call succeeds once the
# server has memory, a primary, its data set loaded, or its running script finished.
TRANSIENT_CODES = frozenset({"OOM", "READONLY", "LOADING", "MASTERDOWN", "BUSY", "TRYAGAIN",
                             "CLUSTERDOWN", "NOREPLICAS", "MISCONF", "NOSCRIPT", "UNBLOCKED"})


def transient(exc: BaseException) -> bool:
    """Would the same call succeed later without any change of ours?"""
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError
                  | redis.exceptions.RedisClusterException | RedisUnavailable
                  | ConnectionError | TimeoutError | OSError):
        return True  # (a cluster's RedisClusterException: no node reachable, a slot unserved)
    if isinstance(exc, RuntimeError) and "closed=True" in str(exc):
        return True  # uvloop's "unable to perform operation on <TCPTransport closed=True>"
    return error_code(exc) in TRANSIENT_CODES or error_code(
        getattr(exc, "__cause__", None) or exc) in TRANSIENT_CODES


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less if `stop` is set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def pause_until(event: asyncio.Event, stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less if `event` or `stop` is set meanwhile."""
    waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in waits:
            t.cancel()


class Backoff:
    """Exponential backoff with full jitter between half and all of the step."""

    def __init__(self, base_s: float = 0.05, cap_s: float = 1.0) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0

    def next(self) -> float:
        step: float = min(self.cap_s, self.base_s * 2.0 ** self.failures)
        self.failures += 1
        return step * random.uniform(0.5, 1.0)  # nosec B311 # jitter, not a secret

    def reset(self) -> None:
        self.failures = 0


class ErrorLog:
    """Rate-limited error lines for one loop. Redis errors are logged as one line each;
    anything else (a bug) with its traceback, at the same rate."""

    def __init__(self, log: logging.Logger, what: str, every_s: float = 30.0) -> None:
        self.log = log
        self.what = what
        self.every_s = every_s
        self._last: dict[str, tuple[float, int]] = {}  # kind -> (logged at, held back)
        self.errors = 0  # failed tries since the last success
        self._said = False  # a line about them was logged

    def error(self, exc: BaseException, extra: str = "") -> None:
        kind = _kind(exc)
        now = time.monotonic()
        last = self._last.get(kind)
        if isinstance(exc, NamespaceMissing):  # not a failure: started before the first submit
            if last is None or now - last[0] >= self.every_s:
                self._last[kind] = (now, 0)
                self.log.info("%s: %s; waiting for it", self.what, exc)
            return
        self.errors += 1
        if last is not None and now - last[0] < self.every_s:
            self._last[kind] = (last[0], last[1] + 1)
            return
        held = f" ({last[1]} more like it in the last {now - last[0]:.0f}s)" if last and \
            last[1] else ""
        self._last[kind] = (now, 0)
        self._said = True
        line = f"{self.what} failed: {_describe(exc)}{extra}{held}; retrying"
        if transient(exc) or isinstance(exc, (*REDIS_ERRORS, NamespaceError)):
            self.log.warning(line)
        else:
            self.log.error(line, exc_info=exc)

    def ok(self) -> None:
        """Call after a success: says that the loop works again, if a failure was logged
        since the last success (a loop that flips between failing and working, as under
        OOM where reads work and writes do not, logs at the same rate as its errors)."""
        if self._said:
            self.log.warning("%s works again after %d failed tries", self.what, self.errors)
            self._said = False
        self.errors = 0


def _kind(exc: BaseException) -> str:
    text = str(exc).lstrip("-")
    return f"{type(exc).__name__}:{text.split(' ', 1)[0][:40] if text else ''}"


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Service:
    """A background loop: `run_once()` does one pass (what tests call), `run()` repeats it
    until `finished()` (by default: once `stop()` was called), waiting for `ready()` before
    each pass and `delay(result)` seconds after it (0: go again at once), and backing off
    after an error. `stop()` is idempotent; a pass in flight finishes.

    Loops of one process that stop together share a `stop` event; loops that share an
    `errors` log report a failure they all see once."""

    what = "background loop"
    log = logging.getLogger("scheduler")
    progress_every_s = 60.0  # how often `progress()` is logged (INFO)

    def __init__(self, stop: asyncio.Event | None = None,
                 errors: ErrorLog | None = None) -> None:
        self._stop = stop or asyncio.Event()
        self.backoff = Backoff()
        self.errors = errors or ErrorLog(self.log, self.what)
        self._progress_at = 0.0  # monotonic time of the last progress line

    async def run_once(self) -> Any:
        raise NotImplementedError

    def delay(self, result: Any) -> float:
        raise NotImplementedError

    async def ready(self) -> None:
        """Wait until there is work for a pass (default: there always is)."""

    def finished(self) -> bool:
        return self._stop.is_set()

    async def sleep(self, seconds: float) -> None:
        """How the loop waits between passes and after errors: cut short by stop()."""
        await pause(self._stop, seconds)

    def progress(self) -> str | None:
        """One line on what the loop did since the last one, logged every
        `progress_every_s` so an operator sees it working (None: nothing to say)."""
        return None

    def _report_progress(self) -> None:
        now = time.monotonic()
        if now - self._progress_at >= self.progress_every_s:
            self._progress_at = now
            line = self.progress()
            if line:
                self.log.info(line)

    async def run(self) -> None:
        self._progress_at = time.monotonic()
        while not self.finished():
            await self.ready()
            if self.finished():
                break
            try:
                result = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors.error(exc, self.error_context())
                await self.sleep(self.backoff.next())
                continue
            self.backoff.reset()
            self.errors.ok()
            self._report_progress()
            seconds = self.delay(result)
            if seconds > 0:
                await self.sleep(seconds)
            else:
                await asyncio.sleep(0)  # let the other loops of the process run

    def error_context(self) -> str:
        """Appended to an error line (e.g. what the loop holds on to meanwhile)."""
        return ""

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()
