"""Commits the outcomes of finished runs in batches: one pipelined round trip carries every
shard's `complete`, `fail` and `release` calls. Usually that round trip is the worker's next
claim (`board`: the claim takes what is pending along, ahead of its claims); the committer's
own loop sends what no claim took, and whatever came back from a claim that failed.

Outcomes wait in memory until Redis took them. A call that fails for a reason that passes
(a dropped connection, a timeout, OOM, a read-only or loading server) is kept and sent again
after a backoff, however long Redis takes to come back; the calls of the same round trip
that succeeded are not sent again. Sending one twice is harmless anyway: the scripts fence by
token and answer "already" to a repeat of the same attempt's outcome. A call that fails for
any other reason (a bug: Lua raised, an argument Redis cannot take) is split, and each of its
outcomes sent alone; one that still fails alone is dropped with an error line, and its slot
is reclaimed when its lease runs out, like a crashed worker's. So one bad outcome never holds
up, or takes down, the others.

A round trip carries at most CHUNK outcomes per script call, so no single call holds Redis
long however many outcomes waited (a Redis that was away for a while).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any, NamedTuple

import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.redis.clock import Clock
from scheduler.redis.service import Service, transient
from scheduler.scripts.replies import Code, codes

log = logging.getLogger("scheduler.worker.worker")

KINDS = ("complete", "fail", "release")
CHUNK = 1000  # outcomes per script call: bounds how long one call holds Redis
Built = tuple[str, int, list[Any], scripts.Call]  # kind, shard, items, their call


class Boarding(NamedTuple):
    """Pending outcomes handed to a claim's round trip (Committer.board)."""
    batch: dict[str, defaultdict[int, list[Any]]]
    built: list[Built]
    calls: list[scripts.Call]


class Committer(Service):
    what = "commit"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, clock: Clock, worker_id: str,
                 events_maxlen: int) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.worker_id = worker_id
        self.events_maxlen = events_maxlen
        # kind -> shard -> items, in arrival order
        self.pending: dict[str, defaultdict[int, list[Any]]] = {
            k: defaultdict(list) for k in KINDS}
        self.alone: list[tuple[str, int, Any]] = []  # (kind, shard, item) to send one by one
        # What the round trip in flight carries: still this worker's to commit (slots()), so
        # a recovery read meanwhile does not take those slots' entries back and run them again.
        self.flying: list[dict[str, defaultdict[int, list[Any]]]] = []  # batches (board())
        self.flying_alone: list[tuple[str, int, Any]] = []
        self.wake = asyncio.Event()
        self.refused = 0
        self.committed = 0
        self.dropped = 0

    def add_succeeded(self, shard: int, item: scripts.Succeeded) -> None:
        self.pending["complete"][shard].append(item)
        self.wake.set()

    def add_failed(self, shard: int, item: scripts.Failed) -> None:
        self.pending["fail"][shard].append(item)
        self.wake.set()

    def add_released(self, shard: int, item: scripts.Released) -> None:
        self.pending["release"][shard].append(item)
        self.wake.set()

    def __len__(self) -> int:
        return sum(len(items) for by in self.pending.values() for items in by.values()) + len(
            self.alone)

    def slots(self) -> set[str]:
        """The slots whose outcome waits to be committed, or is on its way."""
        batches = [self.pending, *self.flying]
        return {item.slot_id for batch in batches for by in batch.values()
                for items in by.values() for item in items} | {
            item.slot_id for _, _, item in (*self.alone, *self.flying_alone)}

    def _call(self, kind: str, shard: int, items: list[Any], now: int) -> scripts.Call:
        build: Any = {"complete": scripts.complete, "fail": scripts.fail,
                      "release": scripts.release}[kind]
        call: scripts.Call = build(self.keys.prefix(shard), now, self.events_maxlen,
                                   self.worker_id, items)
        return call

    async def run_once(self) -> int:
        """Send everything pending in one round trip (and each outcome set aside alone in
        its own); returns how many outcomes Redis took. Raises the first error after keeping
        what it could not send."""
        batch = self._take()
        try:
            return await self._send(batch)
        finally:
            self._landed(batch)
            self.flying_alone = []

    # --- riding a claim's round trip ----------------------------------------------------
    # A claim about to go out takes what is pending (`board`) and sends its calls in its own
    # pipeline, ahead of the claims; `land` takes the replies back as run_once would. At the
    # default concurrency the burn-down runs faster so (`python -m bench burndown`).

    def board(self) -> Boarding | None:
        """The pending outcomes' calls, now carried by the caller's round trip (and counted
        in slots() until `land`); None when nothing is pending or some outcome waits to go
        alone (the committer's own loop sends those, in order)."""
        if self.alone or not any(self.pending[k] for k in KINDS):
            return None
        batch = self._take()
        built = self._build(batch, self.clock.now_ms())
        if self.alone:
            self.wake.set()
        return Boarding(batch, built, [call for *_, call in built])

    def land(self, boarding: Boarding, results: list[Any] | BaseException) -> None:
        """The replies of a boarded round trip, one per call, or the error that failed it
        (a cancelled one may have run or not: its outcomes are sent again, harmlessly)."""
        self._landed(boarding.batch)
        if isinstance(results, asyncio.CancelledError):
            for kind, shard, items, _ in boarding.built:
                self.pending[kind][shard][:0] = items
        else:
            if isinstance(results, BaseException):
                results = [results] * len(boarding.built)
            self._absorb(boarding.built, results)
        if len(self):
            self.wake.set()  # what came back goes in the committer's own round trips

    def _take(self) -> dict[str, defaultdict[int, list[Any]]]:
        """What is pending, now in flight."""
        batch, self.pending = self.pending, {k: defaultdict(list) for k in KINDS}
        self.flying.append(batch)
        return batch

    def _landed(self, batch: dict[str, defaultdict[int, list[Any]]]) -> None:
        self.flying = [b for b in self.flying if b is not batch]

    # --- sending --------------------------------------------------------------------------

    def _build(self, batch: dict[str, defaultdict[int, list[Any]]], now: int) -> list[Built]:
        """A call per kind, shard and CHUNK; an outcome its call cannot carry goes alone."""
        built: list[Built] = []
        for kind, by in batch.items():
            for shard, items in by.items():
                for i in range(0, len(items), CHUNK):
                    part = items[i:i + CHUNK]
                    try:
                        built.append((kind, shard, part, self._call(kind, shard, part, now)))
                    except Exception:
                        self.alone += [(kind, shard, item) for item in part]
        return built

    def _absorb(self, built: list[Built], results: list[Any]) -> tuple[int, BaseException | None]:
        """Tally the replies; keep the outcomes of a call that failed. Returns how many
        outcomes Redis took, and the first error."""
        took, first_error = 0, None
        for (kind, shard, items, _), result in zip(built, results, strict=True):
            if isinstance(result, BaseException):
                first_error = first_error or result
                self._keep(kind, shard, items, result)
            else:
                took += self._tally(kind, result, items)
        return took, first_error

    async def _send(self, batch: dict[str, defaultdict[int, list[Any]]]) -> int:
        now = self.clock.now_ms()
        built = self._build(batch, now)
        took, first_error = 0, None
        if built:
            try:
                results: list[Any] = await scripts.run_async(
                    self.redis, [call for *_, call in built], raise_errors=False)
            except Exception as exc:  # the round trip itself: every call failed alike
                results = [exc] * len(built)
            took, first_error = self._absorb(built, results)
        alone, self.alone = self.alone, []
        self.flying_alone = alone
        for kind, shard, item in alone:
            try:
                call = self._call(kind, shard, [item], now)
                [result] = await scripts.run_async(self.redis, [call])
            except Exception as exc:
                if transient(exc):
                    self.alone.append((kind, shard, item))
                    first_error = first_error or exc
                else:
                    self.dropped += 1
                    # %r: the id may hold what Redis refused (a lone surrogate), which a
                    # UTF-8 log file could not take either
                    log.error("dropped the %s outcome of %r: Redis will not take it (%s: %s); "
                              "its lease will expire and the slot be reclaimed", kind, item.slot_id,
                              type(exc).__name__, exc)
                continue
            took += self._tally(kind, result, [item])
        if first_error is not None:
            raise first_error
        return took

    def _keep(self, kind: str, shard: int, items: list[Any], exc: BaseException) -> None:
        if transient(exc):  # the same call will do later: keep it first in line
            self.pending[kind][shard][:0] = items
        else:
            self.alone += [(kind, shard, item) for item in items]

    def _tally(self, kind: str, reply: list[Any], items: list[Any]) -> int:
        answers = codes(reply, kind)
        refused = answers.count(Code.STALE)
        if kind == "fail":
            metrics.RETRIES.inc(answers.count(Code.RETRY))
            dead = answers.count(Code.DEAD)
            if dead:
                metrics.DEAD_LETTERED.inc(dead)
                self._dead(answers, items)
        if refused:
            self.refused += refused
            metrics.COMMITS_REFUSED.inc(refused)
            log.warning("%d commit(s) refused: their lease was lost before the outcome arrived "
                        "(the slots were reclaimed or cancelled); see the 'refused' events",
                        refused)
        self.committed += len(answers) - refused
        return len(answers)

    @staticmethod
    def _dead(answers: list[Code], items: list[Any]) -> None:
        """One line per slot that this commit dead-lettered, whatever the handler's traceback
        rate limit held back (execution.HandlerErrors): a dead slot needs a person."""
        for answer, item in zip(answers, items, strict=True):
            if answer is Code.DEAD:
                log.warning("slot %s of task %s is dead: attempt %s %s: %s", item.slot_id,
                            item.task, item.token, item.outcome, item.error or "(no error text)",
                            extra={"slot_id": item.slot_id, "task": item.task,
                                   "attempt": item.token})

    # --- the loop (a Service: scheduler/redis/service.py) ------------------------------
    # Flush whenever outcomes arrive; while a flush is in flight new ones accumulate, so
    # batches grow with load. run() returns after stop() once nothing is pending (or, when
    # Redis fails every try, never: the caller bounds that wait).

    async def ready(self) -> None:
        while not len(self) and not self.stopping:
            self.wake.clear()
            await self.wake.wait()
            # The runs that just ended freed their slots: a claim loop woken with this one
            # goes first, and takes these outcomes along in its round trip (board).
            await asyncio.sleep(0)

    def finished(self) -> bool:
        return self.stopping and not len(self)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # stopping does not cut the backoff short: Redis is down

    def delay(self, result: Any) -> float:
        return 0

    def error_context(self) -> str:
        return f" ({len(self)} outcome(s) kept)"

    def stop(self) -> None:
        """Idempotent: finish what is pending, then return from run()."""
        super().stop()
        self.wake.set()
