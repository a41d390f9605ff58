"""The worker: reads dispatch streams, claims in batches, runs handlers, commits in batches.

Shutdown order (`stop()`, e.g. on SIGTERM):
  1. the reader stops reading (it finishes the XREADGROUP in flight and claims what it got);
  2. in-flight runs get `grace_s` to finish;
  3. runs still going are cancelled and released for redelivery (a new stream entry; the
     attempt is recorded `released` and does not count as a failure);
  4. the committer flushes every outcome, then the heartbeat stops and the worker leaves the
     registry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import traceback
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import redis.asyncio

from . import metrics, scripts
from .clock import Clock, RedisClock
from .committer import Committer
from .errors import Cancel, ConfigError, LeaseLost, Retry
from .heartbeat import Heartbeat
from .keys import DEFAULT_SHARDS, DISPATCH_GROUP, Keys, check_name
from .models import decode_payload
from .registry import Context, Registry
from .states import Outcome

log = logging.getLogger("scheduler.worker")

_CLAIMED = int(scripts.Claimed.OK)  # a plain int: comparing with the IntEnum costs ~5% here


class WorkerConfig(msgspec.Struct, kw_only=True, frozen=True):
    concurrency: int = 100
    queues: tuple[str, ...] = ("default",)
    batch: int = 500  # most entries claimed per read
    pipelines: int = 2
    """Claim round trips in flight at once: while Redis runs one batch's claim, the worker
    starts the runs of another (one pipeline leaves each side idle half the time)."""
    block_ms: int = 1000  # XREADGROUP BLOCK; also bounds how long stop() waits for the reader
    lease_s: float = 30.0
    grace_s: float = 10.0
    events_maxlen: int = 1_000_000

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, not {self.concurrency}")
        if not self.queues:
            raise ConfigError("a worker needs at least one queue")
        for q in self.queues:
            check_name("queue", q)
        if self.batch < 1 or self.block_ms < 1 or self.pipelines < 1:
            raise ConfigError("batch, block_ms and pipelines must be >= 1")
        if self.lease_s < 1:
            raise ConfigError(f"lease must be >= 1 s, not {self.lease_s}")
        if self.grace_s < 0:
            raise ConfigError(f"grace period must be >= 0 s, not {self.grace_s}")


class Run:
    """One claimed slot while this worker holds its lease."""

    __slots__ = ("shard", "slot_id", "token", "attempt", "task", "payload", "timeout_ms",
                 "delivery", "fire_ms", "started_ms", "job", "stop_reason", "timer", "metrics")

    def __init__(self, shard: int, slot_id: str, reply: list[Any]) -> None:
        self.shard = shard
        self.slot_id = slot_id
        self.attempt = self.token = int(reply[1])  # the attempt number is the fencing token
        self.task = reply[2].decode() if reply[2] else ""
        self.payload = reply[3]
        self.timeout_ms = int(reply[4] or 0)
        self.delivery = reply[5].decode() if reply[5] else "at_least_once"
        self.fire_ms = int(reply[6])
        self.started_ms = 0
        self.job: asyncio.Task[None] | None = None
        self.stop_reason: str | None = None  # why we cancelled it: timeout, lost, cancel, release
        self.timer: asyncio.TimerHandle | None = None
        self.metrics: metrics.RunMetrics


class Worker:
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
        self.streams: list[tuple[bytes, int, str]] = []  # (stream key, shard, queue)
        self._read_tail: tuple[Any, ...] = ()  # XREADGROUP's STREAMS key... id...
        self._stream_of: dict[bytes, tuple[int, str]] = {}
        self.backlog: deque[tuple[int, str, bytes, str]] = deque()
        self.running: dict[str, Run] = {}
        self.claiming = 0  # entries taken from the backlog whose claim has not returned yet
        self.stopping = asyncio.Event()
        self.capacity = asyncio.Event()
        self.executor = ThreadPoolExecutor(max_workers=min(self.config.concurrency, 64),
                                           thread_name_prefix="sched-handler")
        lease_ms = int(self.config.lease_s * 1000)
        self.lease_ms = lease_ms
        self.committer = Committer(client, self.keys, self.clock, self.worker_id,
                                   self.config.events_maxlen)
        self.heartbeat = Heartbeat(client, self.keys, self.clock, self.worker_id, lease_ms,
                                   self.config.concurrency, self.config.queues, self._inflight,
                                   self._lost, self._cancel_requested, self._tallies)
        self._run_metrics: dict[tuple[str, str], metrics.RunMetrics] = {}

    # --- setup ---------------------------------------------------------------------------

    async def setup(self) -> None:
        """Learn the shard count and make sure every stream this worker reads has the group."""
        await self.redis.hsetnx(self.keys.meta, "shards", DEFAULT_SHARDS)
        self.shards = int(await self.redis.hget(self.keys.meta, "shards") or DEFAULT_SHARDS)
        self.streams = [(self.keys.queue(s, q).encode(), s, q)
                        for q in self.config.queues for s in range(self.shards)]
        self._read_tail = ("STREAMS", *(key for key, _, _ in self.streams),
                           *(">" for _ in self.streams))
        self._stream_of = {key: (shard, queue) for key, shard, queue in self.streams}
        await self._create_groups()
        await self._sync_clock()

    async def _create_groups(self) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for key, _, _ in self.streams:
            pipe.xgroup_create(key, DISPATCH_GROUP, id="0", mkstream=True)
        for result in await pipe.execute(raise_on_error=False):
            if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
                raise result

    async def _sync_clock(self) -> None:
        if self.clock.stale():
            self.clock.anchor(await self.redis.time())

    # --- reading and claiming ------------------------------------------------------------

    async def run_once(self, block_ms: int | None = None) -> int:
        """Claim what the free run slots can take (reading one batch when the local backlog
        is empty) and start their handlers; returns how many started."""
        free = self._free()
        if free <= 0:
            return 0
        await self._sync_clock()
        if not self.backlog:
            await self._read(free, block_ms)
        # Another pipeline may have claimed while this one read: take only what still fits.
        take = [self.backlog.popleft()
                for _ in range(min(self._free(), self.config.batch, len(self.backlog)))]
        if not take:
            return 0
        entries: dict[int, list[tuple[str, bytes, str]]] = {}
        for shard, queue, msg_id, slot_id in take:
            entries.setdefault(shard, []).append((queue, msg_id, slot_id))
        # While busy, the next batch is read (without blocking) in the claim's round trip,
        # so a busy worker pays one round trip per batch instead of two.
        prefetch = len(self.backlog) < self.config.batch and not self.stopping.is_set()
        self.claiming += len(take)
        try:
            return await self._claim(entries, prefetch)
        finally:
            self.claiming -= len(take)

    def _free(self) -> int:
        return self.config.concurrency - len(self.running) - self.claiming

    async def _read(self, free: int, block_ms: int | None) -> None:
        """One XREADGROUP over every stream. COUNT applies per stream, so a read may bring
        more entries than there are free run slots: the rest wait in `backlog`, unclaimed
        (no lease runs down), and are claimed as runs finish."""
        count = -(-min(self.config.batch, free) // len(self.streams))
        try:
            reply: Any = await self.redis.execute_command(  # type: ignore[no-untyped-call]
                *self._xreadgroup(count, block_ms))
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self._create_groups()
            return
        self._backlog_add(reply)

    async def _requeue_backlog(self) -> None:
        """Hand back entries read but never claimed, so another worker runs them now rather
        than after the reclaimer's idle timeout."""
        entries: dict[int, list[tuple[str, bytes, str]]] = {}
        while self.backlog:
            shard, queue, msg_id, slot_id = self.backlog.popleft()
            entries.setdefault(shard, []).append((queue, msg_id, slot_id))
        now = self.clock.now_ms()
        await scripts.run_async(self.redis, [
            scripts.requeue(self.keys.prefix(s), now, self.config.events_maxlen, items)
            for s, items in entries.items()])

    def _prefetch(self, pipe: Any) -> int:
        pipe.execute_command(*self._xreadgroup(-(-self.config.batch // len(self.streams)), None))
        return 1

    def _xreadgroup(self, count: int, block_ms: int | None) -> tuple[Any, ...]:
        # "XREADGROUP GROUP" as the command name: redis-py splits it into two arguments but
        # finds no reply callback under it, so the reply stays raw lists. Its XREADGROUP
        # callback builds a dict per entry: ~9% of a busy worker's CPU.
        block = ("BLOCK", block_ms) if block_ms is not None else ()
        return ("XREADGROUP GROUP", DISPATCH_GROUP, self.worker_id, "COUNT", count, *block,
                *self._read_tail)

    def _backlog_add(self, reply: Any) -> None:
        """A raw XREADGROUP reply: {stream key: [[entry id, [b"s", slot id]], ...]} (RESP3),
        or the same pairs as a list (RESP2)."""
        for key, messages in (reply.items() if isinstance(reply, dict) else reply or ()):
            shard, queue = self._stream_of[key]
            self.backlog.extend((shard, queue, msg_id, fields[1].decode())
                                for msg_id, fields in messages)

    def _claim_time(self, entries: dict[int, list[tuple[str, bytes, str]]]) -> int:
        """Redis time as this worker estimates it, but never before the newest dispatch in the
        batch (entry ids carry Redis's own time): the claim surely came after it. Only a lag
        under a second is corrected; a clock further off is a test's injected clock."""
        now = self.clock.now_ms()
        newest = max(int(msg.partition(b"-")[0]) for items in entries.values()
                     for _, msg, _ in items)
        return newest if 0 < newest - now < 1000 else now

    async def _claim(self, entries: dict[int, list[tuple[str, bytes, str]]],
                     prefetch: bool = False) -> int:
        now = self._claim_time(entries)
        shards = list(entries)
        calls = [scripts.claim(self.keys.prefix(s), now, self.config.events_maxlen,
                               self.worker_id, self.lease_ms, entries[s]) for s in shards]
        if prefetch:
            replies, (read,) = await scripts.run_async_then(self.redis, calls, self._prefetch)
            if not isinstance(read, Exception):  # NOGROUP etc.: the next blocking read says
                self._backlog_add(read)
        else:
            replies = await scripts.run_async(self.redis, calls)
        started = 0
        loop = asyncio.get_running_loop()
        # Locals: this loop runs once per claimed slot.
        create_task, execute, running, cache = (loop.create_task, self._execute, self.running,
                                                self._run_metrics)
        for shard, reply in zip(shards, replies, strict=True):
            for (queue, _, slot_id), item in zip(entries[shard], reply, strict=True):
                if item[0] != _CLAIMED:
                    continue
                run = Run(shard, slot_id, item)
                run.started_ms = now
                m = cache.get((queue, run.task)) or self._metrics_for(queue, run.task)
                run.metrics = m
                m.start_lag.observe_ms(now - run.fire_ms)
                running[slot_id] = run
                run.job = create_task(execute(run))
                if run.timeout_ms:
                    run.timer = loop.call_later(run.timeout_ms / 1000, self._stop_run, run,
                                                "timeout")
                started += 1
        return started

    def _metrics_for(self, queue: str, task: str) -> metrics.RunMetrics:
        # Task names come from Redis: label only the ones this worker knows, so a flood of
        # unknown names cannot grow the metrics without bound.
        label = task if self.registry.get(task) is not None else "(unknown)"
        m = self._run_metrics[(queue, task)] = metrics.RunMetrics(queue, label)
        return m

    def _tallies(self) -> dict[str, tuple[int, int]]:
        """(succeeded, failed) per queue since this worker started, for its heartbeat."""
        out: dict[str, tuple[int, int]] = {}
        for (queue, _), m in self._run_metrics.items():
            ok, failed = out.get(queue, (0, 0))
            out[queue] = (ok + m.ok, failed + m.failed)
        return out

    # --- running -------------------------------------------------------------------------

    async def _execute(self, run: Run) -> None:
        outcome: tuple[str, str, int] | None = None  # (outcome, error, retry_ms)
        try:
            task = self.registry.get(run.task)
            if task is None:
                raise LookupError(
                    f"unknown task {run.task!r}: no handler is registered for it in this "
                    f"worker's registry (it has {', '.join(self.registry.names()) or 'none'})")
            job_id = run.slot_id.rpartition(":")[0]
            ctx = Context(run.slot_id, job_id, run.attempt, run.fire_ms, run.task, run.delivery,
                          lambda name: self._once(run, name))
            payload = decode_payload(run.payload)
            if task.is_async:
                await task.fn(ctx, payload)
            else:
                await asyncio.get_running_loop().run_in_executor(self.executor, task.fn, ctx,
                                                                 payload)
        except asyncio.CancelledError:
            reason = run.stop_reason
            if reason is None:
                raise  # not ours: never swallow a cancellation we did not start
            if reason == "timeout":
                outcome = (Outcome.TIMED_OUT, f"timed out after {run.timeout_ms / 1000:g}s", -1)
            elif reason == "cancel":
                outcome = (Outcome.CANCELLED, "cancelled on request", -1)
            elif reason == "release":
                self.committer.add_released(run.shard, (run.slot_id, run.token, run.started_ms))
                run.metrics.ended("released", self.clock.now_ms() - run.started_ms)
            else:  # "lost": the lease is gone; a commit would be refused, so send none.
                run.metrics.ended("lost", self.clock.now_ms() - run.started_ms)
        except LeaseLost:
            # The slot was reclaimed (ctx.once found out); its new owner commits.
            run.metrics.ended("lost", self.clock.now_ms() - run.started_ms)
        except Retry as exc:
            outcome = (Outcome.FAILED, exc.reason,
                       -1 if exc.after is None else int(exc.after * 1000))
        except Cancel as exc:
            outcome = (Outcome.CANCELLED, exc.reason, -1)
        except Exception as exc:
            outcome = (Outcome.FAILED, _one_line(exc), -1)
        else:
            finished = self.clock.now_ms()
            self.committer.add_done(run.shard, (run.slot_id, run.token, run.started_ms,
                                                finished))
            run.metrics.succeeded(finished - run.started_ms)
        finally:
            if run.timer is not None:
                run.timer.cancel()
            del self.running[run.slot_id]
            self.capacity.set()
        if outcome is not None:
            kind, error, retry_ms = outcome
            finished = self.clock.now_ms()
            self.committer.add_failed(run.shard, (run.slot_id, run.token, kind, error, retry_ms,
                                                  random.random(), run.started_ms, finished))
            run.metrics.ended(kind, finished - run.started_ms)

    async def _once(self, run: Run, name: str) -> bool:
        call = scripts.once(self.keys.prefix(run.shard), run.slot_id, run.token, name)
        code = scripts.Once(int((await scripts.run_async(self.redis, [call]))[0]))
        if code is scripts.Once.LEASE_LOST:
            raise LeaseLost(f"slot {run.slot_id} attempt {run.attempt} lost its lease")
        return code is scripts.Once.FIRST

    def _stop_run(self, run: Run, reason: str) -> None:
        if run.stop_reason is None and run.job is not None and not run.job.done():
            run.stop_reason = reason
            run.job.cancel()

    def _inflight(self) -> list[tuple[int, str, int]]:
        return [(r.shard, r.slot_id, r.token) for r in self.running.values()]

    def _lost(self, shard: int, slot_id: str, token: int) -> bool:
        """Stop the run if it is still going; False when it already ended."""
        run = self.running.get(slot_id)
        if run is None or run.token != token:
            return False
        log.debug("lease lost on %s (attempt %d); stopping it", slot_id, run.attempt)
        metrics.LEASES_LOST.inc()
        self._stop_run(run, "lost")
        return True

    def _cancel_requested(self, shard: int, slot_id: str, token: int) -> None:
        run = self.running.get(slot_id)
        if run is not None and run.token == token:
            self._stop_run(run, "cancel")

    # --- the loops -----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        backoff = 0.05
        while not self.stopping.is_set():
            if self._free() <= 0:
                self.capacity.clear()
                await self.capacity.wait()
                continue
            try:
                await self.run_once(block_ms=self.config.block_ms)
                backoff = 0.05
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                log.warning("reading from Redis failed (%s); retrying in %.2fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def run(self) -> None:
        """Run until stop(); then shut down in the order the module docstring gives."""
        await self.setup()
        log.info("worker %s reading %s across %d shards (concurrency %d)", self.worker_id,
                 ",".join(self.config.queues), self.shards, self.config.concurrency)
        committer = asyncio.create_task(self.committer.run(), name="committer")
        heartbeat = asyncio.create_task(self.heartbeat.run(), name="heartbeat")
        readers = [asyncio.create_task(self._read_loop(), name=f"reader-{i}")
                   for i in range(self.config.pipelines)]
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
            for task in readers:
                task.cancel()
            self.committer.stop()
            try:
                await asyncio.wait_for(committer, timeout=max(self.config.grace_s, 5.0))
            except TimeoutError:
                log.error("could not commit %d outcome(s) before exit; their leases will "
                          "expire and the slots will be reclaimed", len(self.committer.pending))
            self.heartbeat.stop()
            await heartbeat
            try:
                await self.heartbeat.leave()
            except redis.exceptions.RedisError:
                pass
            self.executor.shutdown(wait=False, cancel_futures=True)
            log.info("worker %s stopped", self.worker_id)

    async def _drain(self) -> None:
        if self.backlog:
            try:
                await self._requeue_backlog()
            except redis.exceptions.RedisError as exc:
                log.warning("could not hand back %d unclaimed entries (%s); the reclaimer "
                            "will dispatch them after the lease", len(self.backlog), exc)
        runs = [r.job for r in self.running.values() if r.job is not None]
        if runs:
            log.info("waiting up to %.1fs for %d run(s) in flight", self.config.grace_s,
                     len(runs))
            await asyncio.wait(runs, timeout=self.config.grace_s)
        leftover = list(self.running.values())
        for run in leftover:
            self._stop_run(run, "release")
        if leftover:
            log.warning("released %d run(s) still going after the grace period",
                        len(leftover))
            await asyncio.wait([r.job for r in leftover if r.job is not None])

    def stop(self) -> None:
        """Idempotent; safe to call from a signal handler."""
        self.stopping.set()


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {os.path.basename(last.filename)}:{last.lineno})"
    return text[:1000]
