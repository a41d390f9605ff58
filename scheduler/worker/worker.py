"""The worker: its parts, wired together, and the order they start and stop in.

A `Worker` is its run slots (slots.py), its reader (reader.py), its claims (claims.py: the
claim pipelines read, claim in batches and start runs), its execution of handlers
(execution.py), its committer (committer.py: the outcomes it holds), its exchange
(exchange.py: the round trips that carry its claims, takes, commits and read-ahead, and
the commit loop that sends what no claim took), its heartbeat
(heartbeat.py: leases and presence), the claims of its limited queues (limiter.py), the
claims of keyed slots (keyed.py: jobs with a concurrency key, in their keys' turns), when
asked, its autoscaler (autoscale.py), and, when the registry has a `pool="process"` task,
its process pool (pool.py), started before anything else and stopped last. Each part holds its own state; the worker builds
them, hands each the parts it talks to, and runs their loops.

Shutdown order (`stop()`, e.g. on SIGTERM):
  1. the reader stops reading (it finishes the XREADGROUP in flight and claims what it got);
  2. in-flight runs get `grace_s` to finish;
  3. runs still going are cancelled and released for redelivery (a new stream entry; the
     attempt is recorded `released` and does not count as a failure); a process-pool run's
     child is killed;
  4. the commit loop flushes every outcome, then the heartbeat stops and the worker leaves the
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

import redis.asyncio

import scheduler.core.namespace as namespace
import scheduler.observe.metrics as metrics
import scheduler.redis.transport as transport
import scheduler.worker.catalog as catalog
from scheduler.core import canary
from scheduler.core.errors import NamespaceMissing
from scheduler.core.keys import Keys
from scheduler.redis.clients import socket_timeout
from scheduler.redis.clock import Clock, RedisClock, resync
from scheduler.redis.primary import PrimaryWatch
from scheduler.redis.service import Backoff, ErrorLog, pause
from scheduler.worker.autoscale import Autoscaler
from scheduler.worker.canary import Canary
from scheduler.worker.claims import ClaimLoop, Claims
from scheduler.worker.committer import Committer
from scheduler.worker.config import SupervisorRef, WorkerConfig
from scheduler.worker.exchange import CommitLoop, Exchange
from scheduler.worker.execution import Execution
from scheduler.worker.heartbeat import Heartbeat
from scheduler.worker.inflight import Inflight
from scheduler.worker.keyed import HeldKeys, KeyedClaims
from scheduler.worker.limiter import LimitedClaims
from scheduler.worker.pool import ProcessPool, cores
from scheduler.worker.reader import Reader
from scheduler.worker.registry import Registry
from scheduler.worker.slots import Slots

log = logging.getLogger("scheduler.worker.worker")

__all__ = ["ClaimLoop", "SupervisorRef", "Worker", "WorkerConfig"]

# Entries dispatched early a worker holds for their time, per run slot: enough to read a whole
# minute-boundary burst before its instant (its XREADGROUP work then happens before the
# burst, which starts sooner: bench burndown), at the cost that a worker dying with them
# delays them by a lease, and of their memory.
HOLD_RUNS = 50


class Worker:
    def __init__(self, client: redis.asyncio.Redis, registry: Registry, *,
                 namespace: str = "sched", config: WorkerConfig | None = None,
                 clock: Clock | None = None, worker_id: str | None = None,
                 supervisor: SupervisorRef | None = None) -> None:
        self.redis = client
        self.registry = registry
        self.config = config = config or WorkerConfig()
        self.keys = keys = Keys(namespace)
        self.clock = clock = clock or RedisClock()
        self.worker_id = worker_id = (
            worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        self.shards = 0
        auto = config.autoscale
        most = auto.max_concurrency if auto else config.concurrency
        self.slots = slots = Slots(auto.min_concurrency if auto else config.concurrency)
        self.running: Inflight = slots.running
        self.stopping = asyncio.Event()
        # Set once its tasks are in the catalog: a submit made after sees them (sched dev
        # says it is ready only then).
        self.published = asyncio.Event()
        self.lease_ms = int(config.lease_s * 1000)
        # A blocking read must return before the socket timeout calls it a hang.
        timeout = socket_timeout(client)
        self.block_ms = (config.block_ms if not timeout
                         else max(10, min(config.block_ms, int(timeout * 500))))
        self.errors = ErrorLog(log, "reading from Redis")
        self.reader = Reader(client, keys, worker_id, config.batch, config.events_maxlen,
                             clock, HOLD_RUNS * most)
        self.committer = Committer(keys, clock, worker_id, config.events_maxlen)
        self.exchange = Exchange(client, self.committer, config, self.reader)
        self.commits = CommitLoop(self.exchange)
        self.execution = Execution(client, keys, clock, registry, self.committer,
                                   slots.running, slots.capacity, lease_s=config.lease_s,
                                   threads=min(most, 64), tracing=config.tracing,
                                   eager=config.eager_start, pace=slots.pace)
        if registry.canary:  # not in the registry's tasks: the catalog lists the app's alone
            self.execution.reserved[canary.TASK] = Canary(client, keys, worker_id).task()
        self.claims = Claims(client, keys, clock, config, registry, worker_id, slots,
                             self.reader, self.exchange, self.execution, self.stopping,
                             self.block_ms)
        self.heartbeat = Heartbeat(client, keys, clock, worker_id, self.lease_ms,
                                   slots.concurrency, config.queues, slots.running,
                                   self.claims.tallies, most, config.events_maxlen,
                                   self.claims.task_tallies)
        # The tasks it serves, with a digest of each one's defaults: `Client.tasks()`
        # lists the live workers serving a task from these, not from a registry of its own.
        self.heartbeat.info["tasks"] = catalog.served(registry)
        self.supervisor = supervisor
        if supervisor is not None:  # `sched workers` groups the children under it
            self.heartbeat.info.update(supervisor.registry_fields())
        self.limited = LimitedClaims(self.claims, self.errors)
        # Its keyed take loops (`pipelines` of them, the first starting the others: keyed.py).
        self.keyed = KeyedClaims(self.claims, self.limited, self.errors,
                                 live=lambda: self.heartbeat.live, held=HeldKeys())
        self.pool: ProcessPool | None = None  # start_pool()

    @property
    def concurrency(self) -> int:
        """The run slots now (the autoscaler moves them: set_concurrency)."""
        return self.slots.concurrency

    @property
    def claiming(self) -> int:
        """Entries whose claim has not returned yet."""
        return self.slots.claiming

    @property
    def run_metrics(self) -> dict[tuple[str, str], metrics.RunMetrics]:
        """This worker's run metrics, by (queue, task)."""
        return self.claims.run_metrics

    # --- setup ---------------------------------------------------------------------------

    async def setup(self) -> None:
        """Learn the shard count (NamespaceMissing until the namespace's first submit creates
        it: scheduler/core/namespace.py) and make sure every stream this worker reads has the
        group."""
        meta = namespace.parse(self.keys.ns,
                               await transport.call(self.redis, "hmget", self.keys.meta,
                                                    *namespace.META_FIELDS))
        self.shards = meta.shards
        if meta.max_payload_bytes:  # results are held to the payload limit
            self.execution.result_limit = meta.max_payload_bytes
            if self.pool is not None:
                self.pool.result_limit = meta.max_payload_bytes
        await self.reader.open(self.shards, self.config.queues)
        await resync(self.clock, self.redis)
        await self._publish()
        await self.limited.open(self.shards)  # limited queues move from self.reader to its own
        await self.keyed.open(self.shards)

    async def run_once(self, block_ms: int | None = None) -> int:
        """One claim pass (Claims.run_once): claim what the free run slots can take (reading
        one batch when the local backlog is empty) and start their handlers, then one pass of
        the keyed claims (keyed.py) for what is still free; returns how many started."""
        started = await self.claims.run_once(block_ms)
        return started + await self.keyed.run_once()

    def set_concurrency(self, concurrency: int) -> None:
        """Change the run slots while running (the autoscaler does). Fewer take effect as
        runs end, none is stopped; more wake a claim loop waiting for a free slot."""
        self.heartbeat.info["concurrency"] = concurrency
        self.slots.resize(concurrency)

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
            # The namespace's first submit, which this worker waits for, finds its tasks.
            await self._publish()
            return True
        except Exception as exc:
            log.debug("could not register as waiting (%s: %s)", type(exc).__name__, exc)
            return False

    async def _publish(self) -> None:
        await catalog.publish(self.redis, self.keys, self.registry, self.worker_id,
                              self.clock.now_ms())
        self.published.set()

    async def _leave(self) -> None:
        try:
            await self.heartbeat.leave()
        except Exception as exc:  # the registry entry expires by itself
            log.debug("could not leave the worker registry (%s: %s)", type(exc).__name__, exc)

    async def start_pool(self) -> None:
        """The process pool, when the registry has a `pool="process"` task (none otherwise):
        its children start, and import the handlers, before the first claim."""
        if self.pool is not None or not self.registry.has_process_tasks():
            return
        pool = ProcessPool(self.registry, self.config.process_pool or cores(),
                           self.config.max_tasks_per_child, self.execution._once)
        if await pool.start(self.stopping):
            self.pool = self.execution.pool = self.claims.pool = pool
            self.claims.pool_only = all(t.process for t in self.registry.tasks.values())

    async def run(self) -> None:
        """Run until stop(); then shut down in the order the module docstring gives."""
        await self.start_pool()
        ready = False
        try:
            ready = await self._setup()
        finally:
            if not ready:
                self.execution.close()  # the pool's children
        if not ready:
            return
        transport.enable(self.redis)  # claims and commits on connections of their own
        auto = self.config.autoscale
        log.info("worker %s reading %s across %d shards (concurrency %s)", self.worker_id,
                 ",".join(self.config.queues), self.shards,
                 f"{auto.min_concurrency}..{auto.max_concurrency}, autoscaled" if auto
                 else self.slots.concurrency)
        committer = asyncio.create_task(self.commits.run(), name="committer")
        scaler = asyncio.create_task(Autoscaler(self, auto, stop=self.stopping).run(),
                                     name="autoscale") if auto else None
        heartbeat = asyncio.create_task(self.heartbeat.run(), name="heartbeat")
        # Behind Sentinel: off an old primary the sentinels replaced before its leases run out.
        primary = PrimaryWatch(self.redis, self.heartbeat.interval_s)
        watch = asyncio.create_task(primary.run(), name="primary")
        readers = [asyncio.create_task(ClaimLoop(self.claims, self.errors).run(),
                                       name=f"claim-{i}")
                   for i in range(self.config.pipelines)]
        readers.append(asyncio.create_task(self.limited.run(), name="claim-limited"))
        readers.append(asyncio.create_task(self.keyed.run(), name="claim-keyed"))
        stopped = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({*readers, stopped, committer},
                               return_when=asyncio.FIRST_COMPLETED)
            for task in (*readers, committer):  # a loop that died takes the worker down
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            self.slots.capacity.set()
            await asyncio.gather(*readers)
            await self._drain()
        finally:
            stopped.cancel()
            for task in (*readers, *([scaler] if scaler else [])):
                task.cancel()
            # A claim cut short hands the outcomes riding it back to the committer first.
            await asyncio.wait(readers, timeout=1.0)
            self.commits.stop()
            try:
                await asyncio.wait_for(committer, timeout=max(self.config.grace_s, 5.0))
            except TimeoutError:
                log.error("could not commit %d outcome(s) before exit; their leases will "
                          "expire and the slots will be reclaimed", len(self.committer))
            await self._hand_back_limited()  # permits of the runs that ended meanwhile
            self.heartbeat.stop()
            await heartbeat
            primary.stop()
            await watch
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
