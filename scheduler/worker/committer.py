"""The outcomes of finished runs, held until Redis took them: what a commit sends, and what
its replies do. It sends nothing itself: the worker's exchange (exchange.py) packs the
pending outcomes ahead of its next claim or take (`board`, `land`), and its commit loop
sends what no claim took, and whatever came back from a round trip that failed.

Each shard's successes go in one `complete` call, its failures in one `fail` and its hand-
backs in one `release`. Outcomes wait in memory until Redis took them. A call that fails for
a reason that passes (a dropped connection, a timeout, OOM, a read-only or loading server) is
kept and sent again after a backoff, however long Redis takes to come back; the calls of the
same round trip that succeeded are not sent again. Sending one twice is harmless anyway: the
scripts fence by token and answer "already" to a repeat of the same attempt's outcome. A call
that fails for any other reason (a bug: Lua raised, an argument Redis cannot take) is split,
and each of its outcomes sent alone (`take_alone`, `land_alone`); one that still fails alone
is dropped with an error line, and its slot is reclaimed when its lease runs out, like a
crashed worker's. So one bad outcome never holds up, or takes down, the others.

A round trip carries at most CHUNK outcomes per script call, so no single call holds Redis
long however many outcomes waited (a Redis that was away for a while).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any, NamedTuple

import scheduler.observe.metrics as metrics
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.redis.clock import Clock
from scheduler.redis.service import transient
from scheduler.scripts.replies import Code, codes

log = logging.getLogger("scheduler.worker.worker")

KINDS = ("complete", "fail", "release")
CHUNK = 1000  # outcomes per script call: bounds how long one call holds Redis
Built = tuple[str, int, list[Any], scripts.Call]  # kind, shard, items, their call
Alone = tuple[str, int, Any]  # kind, shard, the one outcome


class Boarding(NamedTuple):
    """Pending outcomes handed to a round trip (Committer.board)."""
    batch: dict[str, defaultdict[int, list[Any]]]
    built: list[Built]
    calls: list[scripts.Call]


class Committer:
    """The outcomes a worker holds: pending, on their way in a round trip, or set aside to
    go alone; and its tallies of what Redis answered. `wake` is set when one arrives."""

    def __init__(self, keys: Keys, clock: Clock, worker_id: str, events_maxlen: int) -> None:
        self.keys = keys
        self.clock = clock
        self.worker_id = worker_id
        self.events_maxlen = events_maxlen
        # kind -> shard -> items, in arrival order
        self.pending: dict[str, defaultdict[int, list[Any]]] = {
            k: defaultdict(list) for k in KINDS}
        self.alone: list[Alone] = []  # to send one by one
        # What the round trip in flight carries: still this worker's to commit (slots()), so
        # a recovery read meanwhile does not take those slots' entries back and run them again.
        self.flying: list[dict[str, defaultdict[int, list[Any]]]] = []  # batches (board())
        self.flying_alone: list[Alone] = []
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

    # --- a round trip's share --------------------------------------------------------------
    # The exchange takes what is pending (`board`) into its round trip and gives the replies
    # back (`land`); the outcomes stay this worker's (slots()) in between.

    def board(self, riding: bool = True) -> Boarding | None:
        """The pending outcomes' calls, now carried by a round trip (and counted in slots()
        until `land`); None when nothing is pending. `riding`: for a claim's round trip,
        which takes nothing while some outcome waits to go alone (the commit loop sends
        those, in order, after the rest)."""
        if (riding and self.alone) or not any(self.pending[k] for k in KINDS):
            return None
        batch = self._take()
        built = self._build(batch, self.clock.now_ms())
        if self.alone:
            self.wake.set()
        return Boarding(batch, built, [call for *_, call in built])

    def land(self, boarding: Boarding, results: list[Any] | BaseException
             ) -> BaseException | None:
        """The replies of a boarded round trip, one per call (an error in the place of a
        call that failed), or the error that failed it whole (a cancelled one may have run
        or not: its outcomes are sent again, harmlessly). Returns the first error."""
        self._landed(boarding.batch)
        first_error: BaseException | None = None
        if isinstance(results, asyncio.CancelledError):
            for kind, shard, items, _ in boarding.built:
                self.pending[kind][shard][:0] = items
        else:
            if isinstance(results, BaseException):
                results = [results] * len(boarding.built)
            first_error = self._absorb(boarding.built, results)
        if len(self):
            self.wake.set()  # what came back goes in the commit loop's own round trips
        return first_error

    def take_alone(self) -> list[Alone]:
        """The outcomes set aside to go one by one, each in a round trip of its own (and
        counted in slots() until `landed_alone`)."""
        alone, self.alone = self.alone, []
        self.flying_alone = alone
        return alone

    def call_alone(self, kind: str, shard: int, item: Any) -> scripts.Call:
        """The call of one outcome sent alone (it may raise: an outcome no call can carry)."""
        return self._call(kind, shard, [item], self.clock.now_ms())

    def land_alone(self, kind: str, shard: int, item: Any, result: Any) -> BaseException | None:
        """The reply to one outcome sent alone, or the error that failed it: kept to go
        alone again when the error passes, else dropped. Returns the error if kept."""
        if not isinstance(result, BaseException):
            self._tally(kind, result, [item])
            return None
        if transient(result):
            self.alone.append((kind, shard, item))
            return result
        self.dropped += 1
        # %r: the id may hold what Redis refused (a lone surrogate), which a UTF-8 log file
        # could not take either
        log.error("dropped the %s outcome of %r: Redis will not take it (%s: %s); its lease "
                  "will expire and the slot be reclaimed", kind, item.slot_id,
                  type(result).__name__, result)
        return None

    def landed_alone(self) -> None:
        """The outcomes sent alone are back: kept (alone) or taken."""
        self.flying_alone = []

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

    def _absorb(self, built: list[Built], results: list[Any]) -> BaseException | None:
        """Tally the replies; keep the outcomes of a call that failed. Returns the first
        error."""
        first_error = None
        for (kind, shard, items, _), result in zip(built, results, strict=True):
            if isinstance(result, BaseException):
                first_error = first_error or result
                self._keep(kind, shard, items, result)
            else:
                self._tally(kind, result, items)
        return first_error

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
