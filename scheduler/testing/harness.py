"""The testing mode: a namespace in an in-memory Redis (fakeredis, fakeserver.py) that the
project's own Lua scripts and services run on, on a fake clock, in the test's process.

What runs is what a deployment runs, in the order one node and one worker would run it: the
scheduler node's shard leases, materializer and promoter, then the worker's claims (those of
its limited queues with their permits, a rate counted on the fake clock), its handlers (the
registry's own, on asyncio tasks or the thread pool) and its commits, each through its
`run_once()` (the commits: `Exchange.commit`). Nothing of a transition is written again here: this module only
decides when each pass runs and what time it is. The heartbeat, reclaimer and sweeper do not
run: every run ends within the pass that started it, so no lease can run out.

The services run on an event loop of their own, in a thread, so `drain()` and `advance()` are
plain calls from a sync test and from an async one alike.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec

import scheduler.redis.transport as transport
import scheduler.testing.fakeserver as fakeserver
from scheduler.core.errors import HandlerFailed, SchedulerError, ValidationError
from scheduler.core.keys import queue_of, split_slot_id
from scheduler.core.states import Outcome
from scheduler.node.node import NodeConfig, SchedulerNode
from scheduler.redis.clock import ManualClock
from scheduler.sdk.client import Client
from scheduler.worker.execution import HandlerErrors
from scheduler.worker.inflight import Run
from scheduler.worker.registry import Registry
from scheduler.worker.worker import Worker, WorkerConfig

T = TypeVar("T")
MAX_ROUNDS = 1000  # promote-claim-run-commit rounds of one drain before it gives up
LEASE_TTL_S = 3600.0
START = datetime(2030, 1, 1, tzinfo=UTC)  # the fake clock's default start: reproducible
FAILURES = frozenset({Outcome.FAILED, Outcome.TIMED_OUT})


class Ran(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt that ran in a drain, as it was committed. `exception` is what the handler
    raised (None for a success, and for `Retry` and `Cancel`, which steer the slot)."""

    slot_id: str
    job_id: str
    task: str
    attempt: int
    fire_ms: int
    outcome: Outcome | None  # None: its commit was refused (it lost its lease)
    error: str | None = None
    result: Any = None
    exception: Any = None

    @property
    def fire_time(self) -> datetime:
        return datetime.fromtimestamp(self.fire_ms / 1000, UTC)


class _Raised(HandlerErrors):
    """The worker's handler-error log, which also keeps each exception for the test."""

    def __init__(self) -> None:
        super().__init__()
        self.raised: dict[tuple[str, int], BaseException] = {}

    def report(self, run: Run, exc: BaseException, now: float) -> None:
        self.raised[(run.slot_id, run.attempt)] = exc
        super().report(run, exc, now)


DECLARING_APP = "testing"  # the app name TestScheduler declares its registry's schedules as


class TestClient(Client):
    """A `scheduler.Client` of the testing mode's namespace: the same methods, on the fake
    Redis and the fake clock. `result()` first drains (runs what is due) and then looks once:
    a slot that has not ended raises ResultTimeout at once (advance the clock first)."""

    __test__ = False  # not a pytest test class

    def __init__(self, tester: TestScheduler, namespace: str, shards: int) -> None:
        self._tester = tester
        super().__init__("redis://testing-mode/0", namespace, shards=shards, clock=tester.clock,
                         history=str(Path(tester.dir.name) / "history.sqlite3"))

    def _connect(self, redis_url: str, timeout_s: float) -> Any:
        return fakeserver.sync_client(self._tester.server)

    def result(self, job_or_slot_id: str, timeout: float | None = None) -> Any:
        """As `Client.result`, after running what is due (`drain`), and without waiting:
        a slot that has not ended raises ResultTimeout at once, whatever `timeout` says."""
        self._tester.drain()
        return super().result(job_or_slot_id, timeout=0)


class TestScheduler:
    """`TestScheduler(registry)`: submit through `.client` (a `scheduler.Client`), then
    `drain()` runs every job due now and `advance(seconds)` moves the clock, firing what
    falls due on the way (cron occurrences, delayed jobs, retries) at its own time.

    Both return what ran (`Ran`, also kept in `.ran`) and, unless `raise_errors=False`, raise
    HandlerFailed after the pass when a handler raised (not `Retry`/`Cancel`) or timed out.
    The clock starts at `start` (default 2030-01-01T00:00Z, so runs are reproducible) and
    moves only when `advance` moves it; Redis's own time (TIME, stream ids) follows it.
    Handler timeouts, and sleeps inside handlers, still take real time. One shard by
    default: what a handler sees does not depend on the count, and each pass costs a script
    per shard (pass `shards=` to test with more)."""

    __test__ = False  # not a pytest test class

    def __init__(self, registry: Registry, *, namespace: str = "test",
                 shards: int = 1, start: datetime | None = None,
                 raise_errors: bool = True, concurrency: int = 100,
                 lookahead_s: float = 3.0, misfire_grace_s: float = 5.0) -> None:
        self.registry = registry
        self.raise_errors = raise_errors
        start = start or START
        if start.tzinfo is None:
            raise ValidationError("start", f"{start!r} has no time zone (give tzinfo=UTC)")
        self.clock = ManualClock(int(start.timestamp() * 1000))
        self.server = fakeserver.server()
        self.dir = tempfile.TemporaryDirectory(prefix="sched-testing-")
        self.ran: list[Ran] = []
        self._raised = _Raised()
        # The only node: its shard leases need renewing seldom (every ttl/3 of fake time).
        # Slots are promoted at their time, not ahead of it: on a fake clock nothing is gained,
        # and `due` stays the one place that says what falls due next.
        self._node_config = NodeConfig(lookahead_s=lookahead_s, misfire_grace_s=misfire_grace_s,
                                       shard_lease_s=LEASE_TTL_S, promote_ahead_s=0)
        self._renew_at = 0
        self._concurrency = concurrency
        fakeserver.SERVER_TIME.push(self.clock)
        self.client = TestClient(self, namespace, shards)
        self.client.create_namespace()
        # The app's declared schedules, as each start of its scheduler node applies them.
        self.client.declare(DECLARING_APP, registry.schedules.values())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="sched-testing")
        self._thread.start()
        self._queues: set[str] = set()
        self._started: list[Run] = []  # by the worker, since the last look (_work)
        self._call(self._open())
        # The worker published its tasks' defaults (worker/catalog.py) after the client's
        # first read of the catalog, and on a fake clock the client never reads it again by
        # itself: it reads it now, so a submit by name takes them as in production.
        core = self.client._core
        core.take_catalog(transport.call_sync(self.client.redis, "hgetall", core.keys.tasks))

    # --- what a test calls -----------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The fake clock's time (timezone-aware, UTC): `start`, plus what `advance` added."""
        return datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC)

    def drain(self, raise_errors: bool | None = None) -> list[Ran]:
        """Run every job due now, and what becomes due meanwhile without the clock moving
        (a retry after 0 s), until nothing is left to run."""
        return self._report(self._call(self._drain()), raise_errors)

    def advance(self, seconds: float, raise_errors: bool | None = None) -> list[Ran]:
        """Move the clock `seconds` ahead, stopping at every moment something falls due on
        the way and draining there, as a node and a worker running all along would."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValidationError("seconds", f"{seconds!r} is not a number of seconds >= 0")
        target = self.clock.now_ms() + round(seconds * 1000)
        return self._report(self._call(self._advance(target)), raise_errors)

    def close(self) -> None:
        """Idempotent: stops the services' loop and forgets the fake Redis."""
        if not self._thread.is_alive():
            return
        try:
            self._call(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
            self.client.close()
            fakeserver.SERVER_TIME.pop(self.clock)
            self.dir.cleanup()

    def __enter__(self) -> TestScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the passes, on the services' loop -------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _open(self) -> None:
        self.redis = fakeserver.async_client(self.server)
        ns = self.client.namespace
        self.node = SchedulerNode(self.redis, namespace=ns, clock=self.clock,
                                  config=self._node_config, node_id="testing-node")
        await self.node.setup()
        self.worker = Worker(self.redis, self.registry, namespace=ns, clock=self.clock,
                             config=WorkerConfig(concurrency=self._concurrency),
                             worker_id="testing-worker")
        self.worker.execution.handler_errors = self._raised
        # What ran is what the worker started: a run that ended within start() (an eager
        # start, Python 3.12+: execution.py) has left worker.running when run_once returns.
        start = self.worker.execution.start

        def started(run: Run, loop: asyncio.AbstractEventLoop) -> None:
            self._started.append(run)
            start(run, loop)
        self.worker.execution.start = started  # type: ignore[method-assign]
        await self.worker.setup()
        self._queues = set(self.worker.config.queues)

    async def _close(self) -> None:
        self.worker.execution.close()
        await self.redis.aclose()

    async def _read_every_queue(self) -> None:
        """The worker reads every queue the namespace has (a queue is known from the first
        entry in one of its lanes on: the shards' lane indexes): a test submits to any queue
        and its jobs run."""
        keys = self.worker.keys
        pipe = transport.pipeline(self.redis)
        for shard in range(self.worker.shards):
            pipe.zrange(keys.lane_index(shard), 0, -1)
            pipe.zrange(keys.keyed_queues(shard), 0, -1)  # queues of jobs with a concurrency key
        queues = {queue_of(lane.decode()) for found in await transport.send(pipe) for lane in found}
        if not queues <= self._queues:
            self._queues |= queues
            # The keyed claims walk the worker's configured queues, the reader its streams.
            config = msgspec.structs.replace(self.worker.config, queues=tuple(sorted(self._queues)))
            self.worker.config = self.worker.claims.config = config
            limited = self.worker.limited
            # The limited queues are read by the worker's limiter, the rest by its reader.
            if not await limited.refresh():
                await self.worker.reader.open(
                    self.worker.shards, sorted(q for q in self._queues if q not in limited.limits))

    async def _drain(self) -> list[Run]:
        assert self.node.leases is not None
        if self.clock.now_ms() >= self._renew_at:  # as the node's lease loop: Redis expires them
            await self.node.leases.run_once()
            self._renew_at = self.clock.now_ms() + int(LEASE_TTL_S * 1000 / 3)
        runs: list[Run] = []
        await self.worker.limited.refresh()  # limits set since the last drain, as a worker
        for _ in range(MAX_ROUNDS):
            await self.node.materializer.run_once()
            await self.node.promoter.run_once()
            await self._read_every_queue()  # a promoted slot's queue may be new
            runs += await self._work()
            # The streams are empty now; only due slots (a retry after 0 s) or a cron job
            # within the lookahead make more work without the clock moving.
            if not await self._due_now():
                return runs
        raise SchedulerError(f"drain: work was still due after {MAX_ROUNDS} rounds (a handler "
                             f"that retries at once, forever?)")

    async def _work(self) -> list[Run]:
        """Claim what is queued, run it to its end, commit: one worker's claim loop and
        committer, until the streams are empty."""
        worker, runs = self.worker, []
        while True:
            started = await worker.run_once(block_ms=None)
            # The queue-wide limits' own claims: permits in fake time, as a worker takes them.
            started += await worker.limited.run_once(block=False)
            batch, self._started = self._started, []
            runs += batch
            await asyncio.gather(*(r.handler for r in batch if r.handler is not None))
            if not started and not worker.reader.backlog:
                break
        if len(worker.committer):
            await worker.exchange.commit()
        return runs

    async def _advance(self, target_ms: int) -> list[Run]:
        runs = await self._drain()  # what is due before the clock moves
        while (next_ms := await self._next_event_ms()) is not None and next_ms <= target_ms:
            self.clock.ms = next_ms
            runs += await self._drain()
        self.clock.ms = target_ms
        return runs + await self._drain()

    async def _due_now(self) -> bool:
        now, ahead = self.clock.now_ms(), self.node.materializer.lookahead_ms
        keys, pipe = self.worker.keys, transport.pipeline(self.redis)
        for shard in range(self.worker.shards):
            pipe.zrange(keys.due(shard), "-inf", now, byscore=True, offset=0, num=1)
            pipe.zrange(keys.cron(shard), "-inf", now + ahead, byscore=True, offset=0, num=1)
        return any(await transport.send(pipe))

    async def _next_event_ms(self) -> int | None:
        """The next moment after now that a pass has work: a slot falls due, or a cron job's
        next occurrence comes within the materializer's lookahead."""
        now, ahead = self.clock.now_ms(), self.node.materializer.lookahead_ms
        keys, pipe = self.worker.keys, transport.pipeline(self.redis)
        for shard in range(self.worker.shards):
            pipe.zrange(keys.due(shard), f"({now}", "+inf", byscore=True, offset=0, num=1,
                        withscores=True)
            pipe.zrange(keys.cron(shard), f"({now + ahead}", "+inf", byscore=True, offset=0,
                        num=1, withscores=True)
        heads = await transport.send(pipe)
        times = [int(score) - (ahead if i % 2 else 0)
                 for i, head in enumerate(heads) for _, score in head]
        held = self.worker.limited.next_try_ms(now)  # entries a limit's rate holds back
        times += [] if held is None else [held]
        return min(times) if times else None

    # --- what ran ----------------------------------------------------------------------------

    def _report(self, runs: list[Run], raise_errors: bool | None) -> list[Ran]:
        ran = [self._ran(run) for run in runs]
        self.ran += ran
        failed = [r for r in ran if r.outcome in FAILURES and (
            r.exception is not None or r.outcome is Outcome.TIMED_OUT)]
        if failed and (self.raise_errors if raise_errors is None else raise_errors):
            raise HandlerFailed(failed) from next(
                (r.exception for r in failed if r.exception is not None), None)
        return ran

    def _ran(self, run: Run) -> Ran:
        slot = self.client.get_slot(run.slot_id)
        attempt = next((a for a in slot.attempts if a.number == run.attempt), None)
        outcome = attempt.outcome if attempt is not None else None
        return Ran(slot_id=run.slot_id, job_id=split_slot_id(run.slot_id)[0], task=run.task,
                   attempt=run.attempt, fire_ms=run.fire_ms, outcome=outcome,
                   error=attempt.error if attempt is not None else None,
                   result=slot.result if outcome is Outcome.SUCCEEDED else None,
                   exception=self._raised.raised.pop((run.slot_id, run.attempt), None))
