"""A worker's exchange with Redis for its work: every round trip that carries its claims,
takes, commits and read-ahead is packed, sent and answered here, in one order.

A round trip (`Exchange.send`) carries, in this order:

1. the outcomes waiting to be committed (the `complete`, `fail` and `release` calls of the
   committer, committer.py);
2. the caller's claims or takes (claim.lua from claims.py and limiter.py, take.lua from
   keyed.py);
3. the read-ahead: the main reader's next XREADGROUP (reader.py), when the caller asks;
4. a WAIT on every primary, when the worker is told to have its claims replicated
   (`claim_replicas`).

Commits go first because they free what the claims behind them count: a committed run's
key leaves its running count (complete.lua), which the takes behind it read (take.lua), and
an ended run's slot is no longer this worker's to be granted again (claim.lua grants a
running slot to the worker that holds it, as the repeat of a claim whose reply was lost:
ahead of the commit, a run that just ended would start a second time). The read-ahead comes
after the scripts (nothing in them waits for it) and the WAIT last, so that it confirms
every write before it. ORDER names the scripts' part of that order; the transport appends
the tail (3, 4) after every script.

Each part's replies go back to their owner: the commits' to the committer (`land`, which
keeps what failed for the next round trip), the read-ahead's to the reader's backlog, the
claims' and the replicas' count to the caller. Outcomes no claim took go in the commit
loop's own round trips (`Exchange.commit`, `CommitLoop`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio

import scheduler.redis.cluster as cluster
import scheduler.scripts.calls as scripts
import scheduler.scripts.replies as replies
from scheduler.redis.service import Service
from scheduler.worker.committer import Committer
from scheduler.worker.config import WorkerConfig
from scheduler.worker.reader import Reader

log = logging.getLogger("scheduler.worker.worker")

# The scripts of a round trip, in the order they run (the module docstring says why).
ORDER = ("commits", "claims")


class Exchange:
    """The round trips of a worker's claims, takes and commits: packs the committer's
    pending outcomes ahead of the claims, the read-ahead into `reader` and a replicas'
    WAIT behind, and hands each part's replies back. `reader`: the backlog the read-ahead
    fills (None: round trips that never read ahead)."""

    def __init__(self, client: redis.asyncio.Redis, committer: Committer,
                 config: WorkerConfig, reader: Reader | None = None) -> None:
        self.redis = client
        self.committer = committer
        self.replicas = config.claim_replicas
        self.replica_timeout_ms = max(1, int(config.replica_timeout_s * 1000))
        self.reader = reader

    async def send(self, calls: list[scripts.Call], prefetch: int = 0
                   ) -> tuple[list[Any], Any]:
        """One round trip for these claims or takes, with the outcomes waiting to be
        committed ahead of them and, with `prefetch` > 0, a read of that many entries into
        the reader's backlog behind. Returns the calls' replies, and the fewest replicas
        that confirmed them when short of `claim_replicas` (else None). Raises the first
        error of the calls (the commits' are kept by the committer)."""
        committer = self.committer
        boarding = committer.board()
        parts = {"commits": boarding.calls if boarding is not None else [], "claims": calls}
        packed = [call for part in ORDER for call in parts[part]]
        unconfirmed = None
        try:
            if prefetch or self.replicas:
                answers, tails = await scripts.run_async_then(
                    self.redis, packed, self._tail(prefetch), raise_errors=boarding is None)
                unconfirmed = self._take_tails(tails, prefetch)
            else:
                answers = await scripts.run_async(self.redis, packed,
                                                  raise_errors=boarding is None)
        except BaseException as exc:
            if boarding is not None:
                committer.land(boarding, exc)
            raise
        if boarding is None:
            return answers, unconfirmed
        got, at = {}, 0
        for part in ORDER:
            got[part], at = answers[at:at + len(parts[part])], at + len(parts[part])
        committer.land(boarding, got["commits"])
        for answer in got["claims"]:
            if isinstance(answer, Exception):
                raise answer
        return got["claims"], unconfirmed

    async def commit(self) -> int:
        """The commit loop's round trip: every pending outcome (even those no claim would
        take, behind one waiting to go alone), then each outcome set aside alone in a round
        trip of its own. Returns how many outcomes Redis answered; raises the first error
        after keeping what it could not send."""
        committer = self.committer
        before = committer.committed + committer.refused
        first_error = None
        boarding = committer.board(riding=False)
        if boarding is not None:
            results: list[Any] | BaseException
            try:
                results = await scripts.run_async(self.redis, boarding.calls,
                                                  raise_errors=False) if boarding.calls else []
            except Exception as exc:  # the round trip itself: every call failed alike
                results = exc
            except BaseException as exc:
                committer.land(boarding, exc)
                raise
            first_error = committer.land(boarding, results)
        try:
            for kind, shard, item in committer.take_alone():
                try:
                    [result] = await scripts.run_async(
                        self.redis, [committer.call_alone(kind, shard, item)])
                except Exception as exc:
                    result = exc
                first_error = committer.land_alone(kind, shard, item, result) or first_error
        finally:
            committer.landed_alone()
        if first_error is not None:
            raise first_error
        return committer.committed + committer.refused - before

    def _tail(self, prefetch: int) -> Any:
        def tail(pipe: Any) -> int:
            n = 0
            if prefetch and self.reader is not None:
                n = self.reader.prefetch(pipe, prefetch)
            if self.replicas:
                cluster.each_node(pipe, "WAIT", self.replicas, self.replica_timeout_ms)
                n += 1
            return n
        return tail

    def _take_tails(self, tails: list[list[Any]], prefetch: int) -> Any:
        """Each pipeline's tail (scripts.run_async_then): its read-ahead, then its WAIT.
        Returns the fewest replicas a pipeline's WAIT confirmed when short of
        `claim_replicas` (an error counts as none), else None."""
        short: list[Any] = []
        reader = self.reader
        per_shard = reader.per_shard if reader is not None else False
        for tail in tails:
            if self.replicas:
                for got in replies.wait_replies(tail.pop(), per_shard):
                    if not (isinstance(got, int) and got >= self.replicas):
                        short.append(got)
            if not prefetch or reader is None:
                continue
            if not isinstance(tail[0], Exception):
                reader.add(tail[0])
            else:  # NOGROUP etc.: the next blocking read says
                reader.must_recover = True
        return min(short, key=lambda got: got if isinstance(got, int) else -1) if short else None


class CommitLoop(Service):
    """The commit loop: sends the outcomes no claim's round trip took along, as soon as they
    arrive; while one round trip is in flight new ones accumulate, so batches grow with
    load. `run()` returns after `stop()` once nothing is pending (or, when Redis fails every
    try, never: the caller bounds that wait)."""

    what = "commit"
    log = log

    def __init__(self, exchange: Exchange) -> None:
        super().__init__()
        self.exchange = exchange
        self.committer = exchange.committer

    async def ready(self) -> None:
        committer = self.committer
        while not len(committer) and not self.stopping:
            committer.wake.clear()
            await committer.wake.wait()
            # The run that just ended freed its slot, and woke a claim loop too: let that
            # one go first, so that its round trip takes these outcomes along (one round
            # trip instead of two). What it took is not pending any more, and this loop
            # waits again. (`python -m bench burndown` shows the difference.)
            await asyncio.sleep(0)

    async def run_once(self) -> int:
        return await self.exchange.commit()

    def finished(self) -> bool:
        return self.stopping and not len(self.committer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # stopping does not cut the backoff short: Redis is down

    def delay(self, result: Any) -> float:
        return 0

    def error_context(self) -> str:
        return f" ({len(self.committer)} outcome(s) kept)"

    def stop(self) -> None:
        """Idempotent: finish what is pending, then return from run()."""
        super().stop()
        self.committer.wake.set()
