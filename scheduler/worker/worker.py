"""The worker: reads dispatch streams, claims in batches, runs handlers, commits in batches.

Shutdown order (`stop()`, e.g. on SIGTERM):
  1. the reader stops reading (it finishes the XREADGROUP in flight and claims what it got);
  2. in-flight runs get `grace_s` to finish;
  3. runs still going are cancelled and released for redelivery (a new stream entry; the
     attempt is recorded `released` and does not count as a failure);
  4. the committer flushes every outcome, then the heartbeat stops and the worker leaves the
     registry.

A worker started before its namespace exists waits for it, registered meanwhile as waiting
(heartbeat.waiting: `sched status` and `sched workers` show it), and starts once it exists.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

import redis.asyncio

import scheduler.core.namespace as namespace
import scheduler.observe.metrics as metrics
import scheduler.redis.transport as transport
from scheduler.core.errors import NamespaceMissing
from scheduler.core.keys import Keys
from scheduler.redis.clients import socket_timeout
from scheduler.redis.clock import Clock, RedisClock, resync
from scheduler.redis.service import Backoff, ErrorLog, Service, pause
from scheduler.worker.autoscale import Autoscaler
from scheduler.worker.claiming import Claiming
from scheduler.worker.committer import Committer
from scheduler.worker.config import WorkerConfig
from scheduler.worker.execution import Execution
from scheduler.worker.heartbeat import Heartbeat
from scheduler.worker.inflight import Inflight
from scheduler.worker.limiter import LimitedClaims
from scheduler.worker.reader import Reader
from scheduler.worker.registry import Registry

log = logging.getLogger("scheduler.worker.worker")

__all__ = ["ClaimLoop", "Worker", "WorkerConfig"]

# Entries dispatched early a worker holds for their time, per run slot: enough to read a whole
# minute-boundary burst before its instant (2 workers of concurrency 1000 hold 100,000: the
# burst's XREADGROUP work then happens before it, and the 100k burst of bench/RESULTS.md
# starts ~25% sooner than with 10), at the cost that a worker dying with them delays them
# by a lease, and of ~0.3 KB each in its memory.
HOLD_RUNS = 50


class Worker(Claiming):
    def __init__(self, client: redis.asyncio.Redis, registry: Registry, *,
                 namespace: str = "sched", config: WorkerConfig | None = None,
                 clock: Clock | None = None, worker_id: str | None = None) -> None:
        self.redis = client
        self.registry = registry
        self.config = config or WorkerConfig()
        self.keys = Keys(namespace)
        self.clock = clock or RedisClock()
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.shards = 0
        self.running: Inflight = {}
        self.claiming = 0  # entries taken from the backlog whose claim has not returned yet
        auto = self.config.autoscale
        # The run slots now, read by _free(); only set_concurrency() changes it.
        self.concurrency = auto.min_concurrency if auto else self.config.concurrency
        most = auto.max_concurrency if auto else self.config.concurrency
        self.reader = Reader(client, self.keys, self.worker_id, self.config.batch,
                             self.config.events_maxlen, self.clock, HOLD_RUNS * most)
        self.stopping = asyncio.Event()
        self.capacity = asyncio.Event()
        lease_ms = int(self.config.lease_s * 1000)
        self.lease_ms = lease_ms
        # A blocking read must return before the socket timeout calls it a hang.
        timeout = socket_timeout(client)
        self.block_ms = (self.config.block_ms if not timeout
                         else max(10, min(self.config.block_ms, int(timeout * 500))))
        self.committer = Committer(client, self.keys, self.clock, self.worker_id,
                                   self.config.events_maxlen)
        self.heartbeat = Heartbeat(client, self.keys, self.clock, self.worker_id, lease_ms,
                                   self.concurrency, self.config.queues, self.running,
                                   lambda: metrics.tallies(self._run_metrics), most,
                                   self.config.events_maxlen)
        self.execution = Execution(client, self.keys, self.clock, registry, self.committer,
                                   self.running, self.capacity, lease_s=self.config.lease_s,
                                   threads=min(most, 64), tracing=self.config.tracing,
                                   eager=self.config.eager_start)
        self._run_metrics: dict[tuple[str, str], metrics.RunMetrics] = {}  # (queue, task)
        self._by_lane: dict[tuple[str, str], metrics.RunMetrics] = {}  # the same, by lane
        self._untrimmed: dict[int, int] = {}  # shard -> entries claimed since its last trim
        self.errors = ErrorLog(log, "reading from Redis")
        self.limited = LimitedClaims(self)

    # --- setup ---------------------------------------------------------------------------

    async def setup(self) -> None:
        """Learn the shard count (NamespaceMissing until the namespace's first submit creates
        it: namespace.py) and make sure every stream this worker reads has the group."""
        meta = namespace.parse(self.keys.ns,
                               await transport.call(self.redis, "hmget", self.keys.meta,
                                                    *namespace.META_FIELDS))
        self.shards = meta.shards
        if meta.max_payload_bytes:  # results are held to the payload limit
            self.execution.result_limit = meta.max_payload_bytes
        await self.reader.open(self.shards, self.config.queues)
        await resync(self.clock, self.redis)
        await self.limited.refresh()  # limited queues move from self.reader to its own

    # --- reading and claiming ------------------------------------------------------------

    async def run_once(self, block_ms: int | None = None) -> int:
        """Claim what the free run slots can take (reading one batch when the local backlog
        is empty) and start their handlers; returns how many started."""
        free = self._free()
        if free <= 0:
            return 0
        await resync(self.clock, self.redis)
        reader = self.reader
        if reader.must_recover:
            await reader.recover(self._known())
        if not reader.ready():
            await reader.read(free, block_ms)
        # Another pipeline may have claimed while this one read: take only what still fits,
        # and no more than this pipeline's share of the run slots, so that at any
        # concurrency every pipeline has a claim in flight while the others' runs go.
        take = reader.take(min(self._free(), self._share()))
        if not take:
            return 0
        entries: dict[int, list[tuple[str, bytes, str]]] = {}
        for shard, lane, msg_id, slot_id in take:
            entries.setdefault(shard, []).append((lane, msg_id, slot_id))
        # While busy, the next batch is read (without blocking) in the claim's round trip,
        # so a busy worker pays one round trip per batch instead of two.
        prefetch = (len(reader.backlog) < self.config.batch and not self.stopping.is_set()
                    and not reader.per_shard)
        self.claiming += len(take)
        try:
            return await self._claim(entries, prefetch)
        except BaseException:
            # The claim may or may not have run: put the entries back first in line. A claim
            # sent again by this worker for an entry it already holds is granted again
            # (claim.lua), so nothing waits for its lease to run out.
            reader.give_back(take)
            reader.must_recover = reader.must_recover or prefetch
            raise
        finally:
            self.claiming -= len(take)

    async def wait_for_capacity(self, finished: Callable[[], bool]) -> None:
        """Until a run slot is free (or `finished()`): every claim loop waits here."""
        while self._free() <= 0 and not finished():
            self.capacity.clear()
            await self.capacity.wait()

    def _free(self) -> int:
        return self.concurrency - len(self.running) - self.claiming

    def _share(self) -> int:
        """Most entries one claim takes: a batch, or a pipeline's share of the run slots."""
        return max(1, min(self.config.batch, -(-self.concurrency // self.config.pipelines)))

    def set_concurrency(self, concurrency: int) -> None:
        """Change the run slots while running (the autoscaler does). Fewer take effect as
        runs end, none is stopped; more wake a claim loop waiting for a free slot."""
        self.concurrency = concurrency
        self.heartbeat.info["concurrency"] = concurrency
        self.capacity.set()

    def _known(self) -> set[str]:
        """Slots this worker has in hand besides its backlog: runs in flight, outcomes
        waiting to be committed, and runs given up on (for two leases)."""
        cutoff = self.clock.monotonic() - 2 * self.config.lease_s
        abandoned = self.execution.abandoned
        for slot in [s for s, t in abandoned.items() if t < cutoff]:
            del abandoned[slot]
        return self.running.keys() | self.committer.slots() | abandoned.keys()

    # --- the loops -----------------------------------------------------------------------

    async def _setup(self) -> bool:
        """setup(), tried until Redis lets it (a worker may start before Redis does, or
        before its namespace's first submit); False when stopped first."""
        backoff = Backoff()
        errors = ErrorLog(log, "worker setup")
        waited = False
        while not self.stopping.is_set():
            try:
                await self.setup()
                return True
            except Exception as exc:
                errors.error(exc)
                if isinstance(exc, NamespaceMissing):
                    waited = await self._wait_visibly() or waited
                await pause(self.stopping, backoff.next())
        if waited:
            await self._leave()
        return False

    async def _wait_visibly(self) -> bool:
        """While the namespace does not exist: registered as waiting (heartbeat.waiting),
        refreshed at each setup try. A failure is the next try's to report."""
        try:
            await resync(self.clock, self.redis)
            await self.heartbeat.waiting()
            return True
        except Exception as exc:
            log.debug("could not register as waiting (%s: %s)", type(exc).__name__, exc)
            return False

    async def _leave(self) -> None:
        try:
            await self.heartbeat.leave()
        except Exception as exc:  # the registry entry expires by itself
            log.debug("could not leave the worker registry (%s: %s)", type(exc).__name__, exc)

    async def run(self) -> None:
        """Run until stop(); then shut down in the order the module docstring gives."""
        if not await self._setup():
            return
        transport.enable(self.redis)  # claims and commits on connections of their own
        auto = self.config.autoscale
        log.info("worker %s reading %s across %d shards (concurrency %s)", self.worker_id,
                 ",".join(self.config.queues), self.shards,
                 f"{auto.min_concurrency}..{auto.max_concurrency}, autoscaled" if auto
                 else self.concurrency)
        committer = asyncio.create_task(self.committer.run(), name="committer")
        scaler = asyncio.create_task(Autoscaler(self, auto, stop=self.stopping).run(),
                                     name="autoscale") if auto else None
        heartbeat = asyncio.create_task(self.heartbeat.run(), name="heartbeat")
        readers = [asyncio.create_task(ClaimLoop(self).run(), name=f"claim-{i}")
                   for i in range(self.config.pipelines)]
        readers.append(asyncio.create_task(self.limited.run(), name="claim-limited"))
        stopped = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({*readers, stopped, committer},
                               return_when=asyncio.FIRST_COMPLETED)
            for task in (*readers, committer):  # a loop that died takes the worker down
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            self.capacity.set()
            await asyncio.gather(*readers)
            await self._drain()
        finally:
            stopped.cancel()
            for task in (*readers, *([scaler] if scaler else [])):
                task.cancel()
            # A claim cut short hands the outcomes riding it back to the committer first.
            await asyncio.wait(readers, timeout=1.0)
            self.committer.stop()
            try:
                await asyncio.wait_for(committer, timeout=max(self.config.grace_s, 5.0))
            except TimeoutError:
                log.error("could not commit %d outcome(s) before exit; their leases will "
                          "expire and the slots will be reclaimed", len(self.committer))
            await self._hand_back_limited()  # permits of the runs that ended meanwhile
            self.heartbeat.stop()
            await heartbeat
            await self._leave()
            self.execution.close()
            await transport.close(self.redis)
            log.info("worker %s stopped", self.worker_id)

    async def _hand_back_limited(self) -> None:
        try:
            await self.limited.hand_back()
        except Exception as exc:
            log.warning("could not hand back what the limited queues hold (%s): entries are "
                        "reclaimed and permits expire after the lease", exc)

    async def _drain(self) -> None:
        await self._hand_back_limited()
        await self.reader.settle()
        if self.reader.in_hand():
            try:
                await self.reader.requeue_backlog(self.clock.now_ms())
            except Exception as exc:
                log.warning("could not hand back %d unclaimed entries (%s); the reclaimer "
                            "will dispatch them after the lease", self.reader.in_hand(), exc)
        runs = [r.handler for r in self.running.values() if r.handler is not None]
        if runs:
            log.info("waiting up to %.1fs for %d run(s) in flight", self.config.grace_s,
                     len(runs))
            await asyncio.wait(runs, timeout=self.config.grace_s)
        leftover = list(self.running.values())
        for run in leftover:
            run.stop("release")
        if leftover:
            log.warning("released %d run(s) still going after the grace period",
                        len(leftover))
            await asyncio.wait([r.handler for r in leftover if r.handler is not None])

    def stop(self) -> None:
        """Idempotent; safe to call from a signal handler."""
        self.stopping.set()


class ClaimLoop(Service):
    """One claim pipeline of a worker (there are `pipelines` of them, sharing its reader,
    its stop event and its error log): claims what the free run slots can take, and waits
    for capacity while every slot is busy."""

    what = "reading from Redis"
    log = log

    def __init__(self, worker: Worker) -> None:
        super().__init__(stop=worker.stopping, errors=worker.errors)
        self.worker = worker

    async def ready(self) -> None:
        await self.worker.wait_for_capacity(self.finished)

    async def run_once(self) -> int:
        return await self.worker.run_once(block_ms=self.worker.block_ms)

    def delay(self, result: Any) -> float:
        return 0
