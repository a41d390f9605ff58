"""A worker's claims: what its free run slots can take, claimed in one round trip per batch
(one claim.lua call per shard, sent by the worker's exchange: exchange.py, which packs the
outcomes waiting to be committed ahead of them and the next read behind), and the start of
the runs that round trip grants.

A pass (`Claims.run_once`) reads when the reader's backlog is empty, takes what still fits
the free slots, and claims it; each of the worker's claim pipelines (`ClaimLoop`) runs passes
while slots are free. The limited queues' loop (limiter.py) claims through `claim` too, with
a reader of its own.

A read asks for no more than the worker can start soon (`read_ahead`): its free slots plus
what it ends within a short horizon at its recent pace (slots.Pace), `batch` at most, and
only once it holds less than that. Entries it does not ask for stay in the stream for
whichever worker (or `--processes` child) reads next, so a burst spreads over every worker
that reads the queue; a no-op worker still reads whole batches, one of 100 ms jobs little
more than its free slots.

A grant starts a run at once. An EARLY answer (the slot was dispatched ahead of its time and
the time has not come: promote.lua, claim.lua) hands the entry back to the reader it came
from, held until then. A LIMITED answer (the entry's queue has a queue-wide limit this worker
has not read yet: scheduler/core/limits.py) hands the entry back to its stream and reads the
limits at once, so the limited queues' loop takes the queue over. A claim trims a shard's streams once per TRIM_EVERY entries claimed
there, not every call: a trim costs Redis several claims' worth of work.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.scripts.calls as scripts
import scheduler.scripts.replies as replies
from scheduler.core.keys import Keys, queue_of
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import ErrorLog, Service
from scheduler.worker.backlog import Entry
from scheduler.worker.config import WorkerConfig
from scheduler.worker.exchange import Exchange
from scheduler.worker.execution import Execution
from scheduler.worker.inflight import Run
from scheduler.worker.reader import Reader
from scheduler.worker.registry import Registry
from scheduler.worker.slots import Slots
from scheduler.worker.turns import Turns

if TYPE_CHECKING:
    from scheduler.worker.pool import ProcessPool

log = logging.getLogger("scheduler.worker.worker")

TRIM_EVERY = 256  # entries claimed on a shard between two trims of its streams (claim.lua)
UNKNOWN_TASK = "(unknown)"  # the task label of runs of a task this worker has no handler for
_msg_id = operator.itemgetter(1)


class Claims:
    """The claim path of a worker: its passes, the claim round trip, and the runs' start.
    It keeps the run metrics (one per queue and task, filled as runs start) and how many
    entries each shard had claimed since its last trim."""

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, clock: Clock,
                 config: WorkerConfig, registry: Registry, worker_id: str, slots: Slots,
                 reader: Reader, exchange: Exchange, execution: Execution,
                 stopping: asyncio.Event, block_ms: int) -> None:
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.config = config
        self.registry = registry
        self.worker_id = worker_id
        self.lease_ms = int(config.lease_s * 1000)
        self.slots = slots
        self.running = slots.running
        self.reader = reader
        self.turns = Turns(slots, reader)  # the unkeyed jobs' turn among a queue's keys
        self.exchange = exchange  # its round trips, and the outcomes it holds
        self.execution = execution
        self.stopping = stopping
        self.block_ms = block_ms  # a pipeline's blocking read (ClaimLoop)
        self.run_metrics: dict[tuple[str, str], metrics.RunMetrics] = {}  # (queue, task)
        self._by_lane: dict[tuple[str, str], metrics.RunMetrics] = {}  # the same, by lane
        self._untrimmed: dict[int, int] = {}  # shard -> entries claimed since its last trim
        self.pool: ProcessPool | None = None  # the worker's process pool, once started
        self.pool_only = False  # every task of the registry runs in that pool
        # Read the limits now (limiter.py sets it): a claim was refused for a queue-wide
        # limit this worker had not seen yet.
        self.on_limited: Callable[[], Awaitable[Any]] | None = None
        # False only in the testing harness, which runs one claim at a time and enforces no
        # queue-wide limit: its claims are sent as holding permits.
        self.wide_limits = True

    def tallies(self) -> dict[str, tuple[int, int, int, int]]:
        """Per queue, what this worker's runs did (the heartbeat turns it into rates)."""
        return metrics.tallies(self.run_metrics)

    def task_tallies(self) -> dict[str, tuple[int, int]]:
        """Per task, what this worker's runs did (the heartbeat turns it into rates)."""
        return metrics.task_tallies(self.run_metrics)

    # --- a pass --------------------------------------------------------------------------

    async def run_once(self, block_ms: int | None = None) -> int:
        """Claim what the free run slots can take (reading one batch when the local backlog
        is empty) and start their handlers; returns how many started."""
        slots = self.slots
        free = slots.free()
        if free <= 0:
            return 0
        await resync(self.clock, self.redis)
        reader = self.reader
        if reader.must_recover:
            await reader.recover(self.known())
        if not reader.ready():
            count = self.read_ahead(free)
            if count <= 0:  # every process-pool child is busy: nothing could start now
                await self._until_a_run_ends(block_ms)
                return 0
            await reader.read(count, block_ms)
        mixed = reader.backlog.mixed()
        # Another pipeline may have claimed while this one read: take only what still fits,
        # and no more than this pipeline's share of the run slots, so that at any
        # concurrency every pipeline has a claim in flight while the others' runs go.
        n = min(slots.free(), slots.share(self.config.batch, self.config.pipelines))
        turns = self.turns
        if not turns.waiting:
            take, counted, on_start = reader.take(n), None, None
        else:  # a queue's keys wait: its entries take no more than their turn (turns.py)
            take, counted, held = turns.take(n)
            on_start = turns.on_start
            if not take:
                turns.claimed(counted)
                if held:  # a run's end, or the keys' take, may give them room
                    await self._until_a_run_ends(block_ms)
                return 0
        if not take:
            return 0
        entries: dict[int, list[tuple[str, bytes, str]]] = {}
        for shard, lane, msg_id, slot_id in take:
            entries.setdefault(shard, []).append((lane, msg_id, slot_id))
        slots.claiming += len(take)
        # While busy, the next read (without blocking) rides the claim's round trip, so a
        # busy worker pays one round trip per batch instead of two.
        ahead = 0 if self.stopping.is_set() or reader.per_shard else \
            self.read_ahead(slots.free(), len(take), mixed)
        prefetch = ahead > 0
        try:
            return await self.claim(entries, ahead, on_start)
        except BaseException:
            # The claim may or may not have run: put the entries back first in line. A claim
            # sent again by this worker for an entry it already holds is granted again
            # (claim.lua), so nothing waits for its lease to run out.
            reader.give_back(take)
            reader.must_recover = reader.must_recover or prefetch
            raise
        finally:
            slots.claiming -= len(take)
            if counted:
                turns.claimed(counted)

    def read_ahead(self, free: int, taking: int = 0, mixed: bool = False) -> int:
        """How many entries a read may ask for, with `free` run slots and `taking` entries
        about to be claimed (0: read nothing now). The target is what this worker can start
        soon: its free slots (for a worker whose tasks all run in the process pool, no more
        than its children can start now or next: ProcessPool.startable) plus what it ends
        within slots.HORIZON_S at its recent pace, `batch` at most. While it holds less than
        that (entries unclaimed, runs waiting for a child) it reads the target again, so a
        busy worker reads in chunks, one read per several claims, and holds under twice
        the target; the rest of a burst stays in the stream for the other workers.

        After a read that brought entries of several priorities (`mixed`) the target is a
        whole batch: the backlog can start the best first only among entries in hand, and a
        worker reading a few at a time would start worse work while better waits unread."""
        held = len(self.reader.backlog)
        pool = self.pool
        if pool is not None:
            if self.pool_only:
                free = min(free, pool.startable() - taking)
            else:
                held += pool.waiting
        if mixed:
            target = self.config.batch
        else:
            ahead = self.slots.pace.ahead(self.clock.monotonic())
            target = max(0, min(self.config.batch, free + ahead))
        return target if held < target else 0

    async def _until_a_run_ends(self, block_ms: int | None) -> None:
        """Wait for a run to end (a child to be free), at most a blocking read's time."""
        capacity = self.slots.capacity
        capacity.clear()
        try:
            await asyncio.wait_for(capacity.wait(),
                                   None if block_ms is None else block_ms / 1000)
        except TimeoutError:
            pass

    def known(self) -> set[str]:
        """Slots this worker has in hand besides its backlog: runs in flight, outcomes
        waiting to be committed, and runs given up on (for two leases)."""
        cutoff = self.clock.monotonic() - 2 * self.config.lease_s
        abandoned = self.execution.abandoned
        for slot in [s for s, t in abandoned.items() if t < cutoff]:
            del abandoned[slot]
        return self.running.keys() | self.exchange.committer.slots() | abandoned.keys()

    # --- the claim round trip ------------------------------------------------------------

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

    async def claim(self, entries: dict[int, list[tuple[str, bytes, str]]],
                    prefetch: int = 0,
                    on_start: Callable[[Run], None] | None = None,
                    reader: Reader | None = None, permitted: bool = False) -> int:
        """One claim round trip for these entries (shard -> lane, entry id, slot id), and
        the start of every run it grants; returns how many started. `prefetch`: entries to
        read into the main reader's backlog in the same round trip (0: none). `reader` is
        where the entries came from (the main one by default): EARLY ones go back to it.
        `permitted`: each entry holds a queue-wide permit (limiter.py); without, entries of
        a queue with a queue-wide limit are refused (LIMITED) and handed back."""
        now = self._claim_time(entries)
        shards, tracer = list(entries), self.execution.tracer
        source = reader or self.reader
        # The job fields the entries carry (a tracing worker needs the job's trace fields:
        # its claims read the job), and what the claim is told of them (claim.lua ARGV[7]).
        carry = {s: self._carried(source, entries[s]) for s in shards} if tracer is None \
            else {}
        permitted = permitted or not self.wide_limits
        calls = [scripts.claim(self.keys.prefix(s), now, self.worker_id, self.lease_ms,
                               entries[s], tracer, self._trim(s, len(entries[s])),
                               carry[s][0] if carry else "", permitted) for s in shards]
        deadline = self.clock.monotonic() + self.config.lease_s  # the lease holds at least so long
        answers, unconfirmed = await self.send(calls, prefetch)
        granted = []
        for shard, reply in zip(shards, answers, strict=True):
            batch = entries[shard]
            granted.append((shard, batch, replies.claimed(reply, batch, carry=carry[shard][1])
                            if tracer is None else tracer.claimed(reply, batch)))
        refused: list[Entry] = []
        started = self.start(granted, now, deadline, unconfirmed, source, on_start, refused)
        if refused:
            await self._refused(source, refused, now)
        return started

    async def _refused(self, source: Reader, refused: list[Entry], now: int) -> None:
        """Entries refused for a queue-wide limit this worker had not seen: back to their
        streams, for a worker's limited queues' reader (this one's too, once it has read the
        limits, which it does now rather than at its next refresh)."""
        log.info("%d entries of %s handed back: a queue-wide limit was set",
                 len(refused), ", ".join(sorted({queue_of(e[1]) for e in refused})))
        by_shard: dict[int, list[tuple[str, bytes, str]]] = {}
        for shard, lane, msg, slot_id in refused:
            by_shard.setdefault(shard, []).append((lane, msg, slot_id))
            source.carried.pop(slot_id, None)
        try:
            await scripts.run_async(self.redis, [
                scripts.requeue(self.keys.prefix(s), now, self.config.events_maxlen, items)
                for s, items in by_shard.items()])
        except BaseException:
            source.must_recover = True  # still this consumer's: taken back and tried again
            raise
        if self.on_limited is not None:
            await self.on_limited()

    def start(self, granted: list[tuple[int, list[tuple[str, bytes, str]], list[Any]]],
              now: int, deadline: float, unconfirmed: Any, source: Reader,
              on_start: Callable[[Run], None] | None = None,
              refused: list[Entry] | None = None) -> int:
        """Start the run of every grant of a claim round trip: (shard, its entries, their
        grants) each; EARLY ones go back to `source`, held; LIMITED ones go to `refused`.
        Returns how many started."""
        started, begun = 0, set()  # begun: slots started here, which may have ended already
        loop = asyncio.get_running_loop()
        # Locals: this loop runs once per claimed slot.
        start, running, cache = self.execution.start, self.running, self._by_lane
        held = source.carried
        for shard, batch, grants in granted:
            for (lane, msg, slot_id), grant in zip(batch, grants, strict=True):
                if isinstance(grant, int):
                    if grant == replies.LIMITED:
                        if refused is not None:
                            refused.append((shard, lane, msg, slot_id))
                    else:  # EARLY: not before this time
                        source.hold((shard, lane, msg, slot_id), grant)
                    continue
                held.pop(slot_id, None)
                # An entry twice in a batch is granted twice: run it once, even when its
                # first run ended within start() (an eager start: execution.py).
                if grant is None or slot_id in running or slot_id in begun:
                    continue
                if unconfirmed is not None and grant.delivery == "at_most_once":
                    self._not_replicated(slot_id, unconfirmed)
                    continue
                run = Run(shard, slot_id, grant, deadline, lane,
                          "" if grant.delivery == "at_most_once" else msg)
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

    async def send(self, calls: list[scripts.Call], prefetch: int) -> tuple[list[Any], Any]:
        """The round trip of these claims or takes (Exchange.send: the outcomes waiting to be
        committed ahead of them, a read of `prefetch` entries behind): their replies, and the
        fewest replicas that confirmed them when short of claim_replicas. The keyed and
        limited queues' claims go through it too."""
        return await self.exchange.send(calls, prefetch)

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
        # Task names come from Redis: only the ones this worker knows get metrics and a
        # place in the caches of their own; every unknown name shares one, found again
        # each time, so a flood of distinct names costs the worker nothing that stays.
        known = self.registry.get(task) is not None or task in self.execution.reserved
        label = task if known else UNKNOWN_TASK
        m = self.run_metrics.get((queue, label))
        if m is None:
            m = self.run_metrics[(queue, label)] = metrics.RunMetrics(queue, label)
        if known:
            self._by_lane[(lane, task)] = m
        return m


class ClaimLoop(Service):
    """One claim pipeline of a worker (there are `pipelines` of them, sharing its reader,
    its stop event and its error log): claims what the free run slots can take, and waits
    for capacity while every slot is busy."""

    what = "reading from Redis"
    log = log

    def __init__(self, claims: Claims, errors: ErrorLog) -> None:
        super().__init__(stop=claims.stopping, errors=errors)
        self.claims = claims

    async def ready(self) -> None:
        await self.claims.slots.wait(self.finished)

    async def run_once(self) -> int:
        return await self.claims.run_once(block_ms=self.claims.block_ms)

    def delay(self, result: Any) -> float:
        return 0
