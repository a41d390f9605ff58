"""A worker's claims: one claim round trip for a batch of entries (one claim.lua call per
shard), and the start of the runs it grants. `Worker` (worker.py) is a `Claiming`; the
limiter (limiter.py) claims through it too, with a reader of its own.

A grant starts a run at once. An EARLY answer (the slot was dispatched ahead of its time and
the time has not come: promote.lua, claim.lua) hands the entry back to the reader it came
from, held until then. A claim trims a shard's streams once per TRIM_EVERY entries claimed
there, not every call: a trim costs Redis about as much as ten claims of one entry.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import scheduler.observe.metrics as metrics
import scheduler.redis.cluster as cluster
import scheduler.scripts.calls as scripts
import scheduler.scripts.replies as replies
from scheduler.core.keys import queue_of
from scheduler.worker.inflight import Run

if TYPE_CHECKING:
    import redis.asyncio

    from scheduler.core.keys import Keys
    from scheduler.redis.clock import Clock
    from scheduler.worker.committer import Committer
    from scheduler.worker.config import WorkerConfig
    from scheduler.worker.execution import Execution
    from scheduler.worker.inflight import Inflight
    from scheduler.worker.reader import Reader
    from scheduler.worker.registry import Registry

log = logging.getLogger("scheduler.worker.worker")

TRIM_EVERY = 256  # entries claimed on a shard between two trims of its streams (claim.lua)
_msg_id = operator.itemgetter(1)


class Claiming:
    """The claim path of a Worker (which sets these attributes)."""

    redis: redis.asyncio.Redis
    keys: Keys
    clock: Clock
    config: WorkerConfig
    registry: Registry
    worker_id: str
    lease_ms: int
    reader: Reader
    committer: Committer
    running: Inflight
    execution: Execution
    _run_metrics: dict[tuple[str, str], metrics.RunMetrics]
    _by_lane: dict[tuple[str, str], metrics.RunMetrics]
    _untrimmed: dict[int, int]

    def _claim_time(self, entries: dict[int, list[tuple[str, bytes, str]]]) -> int:
        """Redis time as this worker estimates it, but never before the newest dispatch in the
        batch (entry ids carry Redis's own time): the claim surely came after it. Only a lag
        under a second is corrected; a clock further off is a test's injected clock."""
        now = self.clock.now_ms()
        # Entry ids compare as bytes by their time while it has 13 digits (until 2286): the
        # max is found in C, and only it is parsed.
        newest = int(max(max(map(_msg_id, items)) for items in entries.values())
                     .partition(b"-")[0])
        return newest if 0 < newest - now < 1000 else now

    async def _claim(self, entries: dict[int, list[tuple[str, bytes, str]]],
                     prefetch: bool = False,
                     on_start: Callable[[Run], None] | None = None,
                     reader: Reader | None = None) -> int:
        now = self._claim_time(entries)
        shards, tracer = list(entries), self.execution.tracer
        source = reader or self.reader
        # The job fields the entries carry (a tracing worker needs the job's trace fields:
        # its claims read the job), and what the claim is told of them (claim.lua ARGV[7]).
        carry = {s: self._carried(source, entries[s]) for s in shards} if tracer is None \
            else {}
        calls = [scripts.claim(self.keys.prefix(s), now, self.worker_id, self.lease_ms,
                               entries[s], tracer, self._trim(s, len(entries[s])),
                               carry[s][0] if carry else "") for s in shards]
        deadline = self.clock.monotonic() + self.config.lease_s  # the lease holds at least so long
        answers, unconfirmed = await self._send(calls, prefetch)
        started, begun = 0, set()  # begun: slots started here, which may have ended already
        loop = asyncio.get_running_loop()
        # Locals: this loop runs once per claimed slot.
        start, running, cache = self.execution.start, self.running, self._by_lane
        held = source.carried
        for shard, reply in zip(shards, answers, strict=True):
            batch = entries[shard]
            grants = replies.claimed(reply, batch, carry=carry[shard][1]) if tracer is None \
                else tracer.claimed(reply, batch)  # tracing.py
            for (lane, msg, slot_id), grant in zip(batch, grants, strict=True):
                if isinstance(grant, int):  # EARLY: not before this time
                    source.hold((shard, lane, msg, slot_id), grant)
                    continue
                held.pop(slot_id, None)
                # An entry twice in a batch is granted twice: run it once, even when its
                # first run ended within start() (an eager start: execution.py).
                if grant is None or slot_id in running or slot_id in begun:
                    continue
                if unconfirmed is not None and grant[4] == "at_most_once":
                    self._not_replicated(slot_id, unconfirmed)
                    continue
                run = Run(shard, slot_id, grant, deadline, lane,
                          "" if grant[4] == "at_most_once" else msg)
                run.started_ms = now
                m = cache.get((lane, run.task)) or self._metrics_for(lane, run.task)
                run.metrics = m
                lag = m.start_lag  # its observe_ms, inlined: once per job
                lag.counts[bisect_left(lag.bounds_ms, now - run.fire_ms)] += 1
                lag.sum_ms += now - run.fire_ms
                running[slot_id] = run
                if on_start is not None:
                    on_start(run)
                start(run, loop)
                begun.add(slot_id)
                started += 1
        return started

    async def _send(self, calls: list[scripts.Call], prefetch: bool) -> tuple[list[Any], Any]:
        """The claim round trip: the claims' replies, and the fewest replicas that confirmed
        them when short of claim_replicas (_take_tails). The outcomes waiting to be committed
        ride along, ahead of the claims: one round trip instead of two (committer.py)."""
        boarding = self.committer.board()
        if boarding is not None:
            calls = [*boarding.calls, *calls]
        unconfirmed = None
        try:
            if prefetch or self.config.claim_replicas:
                answers, tails = await scripts.run_async_then(
                    self.redis, calls, self._tail(prefetch), raise_errors=boarding is None)
                unconfirmed = self._take_tails(tails, prefetch)
            else:
                answers = await scripts.run_async(self.redis, calls,
                                                  raise_errors=boarding is None)
        except BaseException as exc:
            if boarding is not None:
                self.committer.land(boarding, exc)
            raise
        if boarding is not None:
            n = len(boarding.calls)
            self.committer.land(boarding, answers[:n])
            answers = answers[n:]
            for answer in answers:
                if isinstance(answer, Exception):
                    raise answer
        return answers, unconfirmed

    @staticmethod
    def _carried(reader: Reader, batch: list[tuple[str, bytes, str]]
                 ) -> tuple[str, list[replies.Carried | None]]:
        """claim.lua's ARGV[7] for a batch ("k", "a" for at_most_once, "-" for an entry
        carrying nothing), and the carried fields of each entry."""
        held = reader.carried
        if not held:
            return "", []
        flags: list[str] = []
        fields: list[replies.Carried | None] = []
        for _, _, slot_id in batch:
            raw = held.get(slot_id)
            if raw is None:
                flags.append("-")
                fields.append(None)
            else:
                job = replies.carried(raw)
                flags.append("a" if job[3] == "at_most_once" else "k")
                fields.append(job)
        return "".join(flags), fields

    def _trim(self, shard: int, n: int) -> bool:
        """Whether this claim trims the shard's streams: once per TRIM_EVERY entries."""
        claimed = self._untrimmed.get(shard, 0) + n
        self._untrimmed[shard] = 0 if claimed >= TRIM_EVERY else claimed
        return claimed >= TRIM_EVERY

    def _tail(self, prefetch: bool) -> Any:
        def tail(pipe: Any) -> int:
            n = self.reader.prefetch(pipe, self.config.batch) if prefetch else 0
            if self.config.claim_replicas:
                cluster.each_node(pipe, "WAIT", self.config.claim_replicas,
                                  max(1, int(self.config.replica_timeout_s * 1000)))
                n += 1
            return n
        return tail

    def _take_tails(self, tails: list[list[Any]], prefetch: bool) -> Any:
        """Each claim pipeline's tail (scripts.run_async_then): its prefetched read, then its
        WAIT. Returns the fewest replicas a pipeline's WAIT confirmed when short of
        `claim_replicas` (an error counts as none), else None."""
        short: list[Any] = []
        for tail in tails:
            if self.config.claim_replicas:
                for got in replies.wait_replies(tail.pop(), self.reader.per_shard):
                    if not (isinstance(got, int) and got >= self.config.claim_replicas):
                        short.append(got)
            if prefetch and not isinstance(tail[0], Exception):  # NOGROUP etc.: the next
                self.reader.add(tail[0])                       # blocking read says
            elif prefetch:
                self.reader.must_recover = True
        return min(short, key=lambda got: got if isinstance(got, int) else -1) if short else None

    def _not_replicated(self, slot_id: str, confirmed: Any) -> None:
        metrics.CLAIMS_NOT_REPLICATED.inc()
        log.warning("at_most_once slot %s not started: %s of %d replica(s) confirmed its "
                    "claim; its lease will run out and it ends lost", slot_id, confirmed,
                    self.config.claim_replicas)

    def _metrics_for(self, lane: str, task: str) -> metrics.RunMetrics:
        """The RunMetrics of a (queue, task), one per pair whatever lanes its runs come
        from (the heartbeat's tallies sum them by queue), found by (lane, task) on the hot
        path."""
        queue = queue_of(lane)
        m = self._run_metrics.get((queue, task))
        if m is None:
            # Task names come from Redis: label only the ones this worker knows, so a flood
            # of unknown names cannot grow the metrics without bound.
            label = task if self.registry.get(task) is not None else "(unknown)"
            m = self._run_metrics[(queue, task)] = metrics.RunMetrics(queue, label)
        self._by_lane[(lane, task)] = m
        return m
