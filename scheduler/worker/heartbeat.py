"""Keeps a worker's leases alive and its presence visible, and stops runs whose lease it
could not keep.

Every ~lease/3: one `heartbeat` call per shard extends the lease of every in-flight slot
(and resets its stream entry's idle time), writes the latest `ctx.progress` of the runs that
reported one since the last beat (nothing more when none did), and moves each renewed run's
`deadline`
(scheduler/worker/inflight.py); slots whose lease was lost are stopped; the worker's entry in
`<ns>:workers` is refreshed in the same round trip, with its in-flight count, its
per-queue and per-task rates over the last interval, and the tasks it serves (the task
catalog's `workers`: `info["tasks"]`, set by the worker) (for `sched status`: rates cost no command beyond
this one and nothing per job). After a failed heartbeat it tries again within a second.

The watchdog needs no Redis: every lease/10 it stops the runs whose deadline is less than
`margin` away (a quarter of the lease), so a worker that cannot reach Redis, however the
connection fails (refused, reset, or stalled without closing), has stopped its handlers
before Redis can consider their leases expired and hand the slots to another worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.keys import Keys
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.redis.clock import Clock
from scheduler.redis.service import Backoff, ErrorLog, Service
from scheduler.scripts.replies import Code, codes
from scheduler.worker.inflight import Inflight, Run

log = logging.getLogger("scheduler.worker.worker")


class Heartbeat(Service):
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, clock: Clock, worker_id: str,
                 lease_ms: int, concurrency: int, queues: Iterable[str], running: Inflight,
                 tallies: Callable[[], dict[str, tuple[int, int, int, int]]] | None = None,
                 max_concurrency: int | None = None, events_maxlen: int = EVENTS_MAXLEN,
                 task_tallies: Callable[[], dict[str, tuple[int, int]]] | None = None
                 ) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.interval_s = lease_ms / 3000
        self.margin_s = lease_ms / 4000
        self.running = running
        self.events_maxlen = events_maxlen
        self.tallies = tallies or dict
        self.task_tallies = task_tallies or dict  # per task: (succeeded, failed)
        self._last_tasks: dict[str, tuple[int, int]] = {}
        self.info: dict[Any, Any] = {"host": socket.gethostname(), "pid": os.getpid(),
                     "concurrency": concurrency, "queues": ",".join(queues),
                     "lease_ms": lease_ms, "max_concurrency": max_concurrency or concurrency,
                     "state": "running"}
        self._last: tuple[int, dict[str, tuple[int, int, int, int]]] | None = None
        # The namespace's workers seen within a lease, this one included (as of the last
        # beat): the keyed claims share a key's limit among them (keyed.py).
        self.live = 1
        self._reported = (0, 0)  # (succeeded, failed) at the last progress line
        # Without heartbeats every lease expires: after a failure, try again soon.
        self.backoff = Backoff(cap_s=min(1.0, self.interval_s))
        self.errors = ErrorLog(log, f"heartbeat (leases last {lease_ms / 1000:g}s)")

    def progress(self) -> str | None:
        ok = sum(t[0] for t in self.tallies().values())
        failed = sum(t[1] for t in self.tallies().values())
        (ok0, failed0), self._reported = self._reported, (ok, failed)
        return (f"worker {self.worker_id}: {ok - ok0:,} run(s) succeeded, {failed - failed0:,} "
                f"failed in the last {self.progress_every_s:.0f}s; {len(self.running)} in flight")

    async def run_once(self) -> None:
        sent = self.clock.monotonic()
        now = self.clock.now_ms()
        for slot, run in list(self.running.items()):
            if run.handler is not None and run.handler.done():  # a bug: never keep such a lease alive
                log.error("run of %s ended without its outcome; its lease is left to expire",
                          slot)
                del self.running[slot]
        runs = list(self.running.values())
        by_shard, reports = _items(runs)
        calls = [scripts.heartbeat(self.keys.prefix(s), now, self.lease_ms, self.worker_id, items,
                                   self.events_maxlen,
                                   [(i, *report) for i, report, _ in reports.get(s, ())])
                 for s, items in by_shard.items()]
        replies = await scripts.run_async(self.redis, calls)
        for shard_reports in reports.values():  # sent (or dropped by the fence): not again
            for _, report, ctx in shard_reports:
                ctx.sent(report)
        lost = 0
        deadline = sent + self.lease_ms / 1000
        for items, reply in zip(by_shard.values(), replies, strict=True):
            for (slot, token, _), code in zip(items, codes(reply, "heartbeat"), strict=True):
                held = self.running.get(slot)
                if held is None or held.token != token:
                    continue  # finished (and maybe committed) since the list was taken
                if code is Code.STALE:
                    if held.stop("lost"):
                        metrics.LEASES_LOST.inc()
                        lost += 1
                    continue
                held.deadline = max(held.deadline, deadline)
                held.announced = True
                if code is Code.CANCEL_REQUESTED:
                    held.stop("cancel")
        if lost:  # one line per heartbeat, not per slot: after a pause they come in hundreds
            log.warning("%d lease(s) lost (the slots were reclaimed or finished elsewhere); "
                        "stopping those runs", lost)
        pipe = transport.pipeline(self.redis)
        pipe.zadd(self.keys.workers, {self.worker_id: now})
        pipe.hset(self.keys.worker(self.worker_id),
                  mapping={**self.info, "inflight": len(runs), "seen_ms": now,
                           "queue_inflight": _by_queue(runs), **self._counts(now)})
        pipe.pexpire(self.keys.worker(self.worker_id), self.lease_ms * 2)
        pipe.zcount(self.keys.workers, now - self.lease_ms, "+inf")
        self.live = max(1, int((await transport.send(pipe))[-1]))

    def _counts(self, now: int) -> dict[Any, Any]:
        """Totals since start, and per queue since the last beat: succeeded/s, failed/s and
        the mean run time of the runs that ended (0 when none did)."""
        tallies = self.tallies()
        rates: dict[str, tuple[float, float, float]] = {}
        if self._last is not None and now > self._last[0]:
            seconds = (now - self._last[0]) / 1000
            before = self._last[1]
            for queue, (ok, failed, ended, run_ms) in tallies.items():
                ok0, failed0, ended0, run_ms0 = before.get(queue, (0, 0, 0, 0))
                rates[queue] = (round((ok - ok0) / seconds, 3),
                                round((failed - failed0) / seconds, 3),
                                round((run_ms - run_ms0) / (ended - ended0) / 1000, 4)
                                if ended > ended0 else 0.0)
        # Per task, from the same counters: the task catalog's rates (sdk/catalog.py).
        by_task = self.task_tallies()
        task_rates: dict[str, tuple[float, float]] = {}
        if self._last is not None and now > self._last[0]:
            seconds = (now - self._last[0]) / 1000
            for task, (ok, failed) in by_task.items():
                ok0, failed0 = self._last_tasks.get(task, (0, 0))
                if ok > ok0 or failed > failed0:
                    task_rates[task] = (round((ok - ok0) / seconds, 3),
                                        round((failed - failed0) / seconds, 3))
        self._last, self._last_tasks = (now, tallies), by_task
        return {"succeeded": sum(t[0] for t in tallies.values()),
                "failed": sum(t[1] for t in tallies.values()),
                "rates": msgspec.json.encode(rates), "task_rates": msgspec.json.encode(task_rates)}

    def watch(self) -> int:
        """Stop every run whose lease may run out within the margin; returns how many."""
        limit = self.clock.monotonic() + self.margin_s
        stopped = [run for run in list(self.running.values())
                   if run.deadline < limit and run.stop("lost")]
        if stopped:
            metrics.LEASES_LOST.inc(len(stopped))
            log.warning("no heartbeat reached Redis in time: stopping %d run(s) before their "
                        "leases can expire and the slots go to another worker", len(stopped))
        return len(stopped)

    def delay(self, result: object) -> float:
        return self.interval_s

    async def run(self) -> None:
        watchdog = asyncio.create_task(self._watchdog(), name="watchdog")
        try:
            await super().run()
        finally:
            watchdog.cancel()

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 10_000)
            self.watch()

    async def waiting(self) -> None:
        """Register while the namespace does not exist yet, with the entry a heartbeat writes
        marked `state: waiting`, so `sched status` and `sched workers` show the worker before
        it can start (its first heartbeat marks it running)."""
        now = self.clock.now_ms()
        pipe = transport.pipeline(self.redis)
        pipe.zadd(self.keys.workers, {self.worker_id: now})
        pipe.hset(self.keys.worker(self.worker_id),
                  mapping={**self.info, "state": "waiting", "inflight": 0, "seen_ms": now})
        pipe.pexpire(self.keys.worker(self.worker_id), self.lease_ms * 2)
        await transport.send(pipe)

    async def leave(self) -> None:
        """Remove this worker from the registry (clean shutdown)."""
        pipe = transport.pipeline(self.redis)
        pipe.zrem(self.keys.workers, self.worker_id)
        pipe.delete(self.keys.worker(self.worker_id))
        await transport.send(pipe)


Report = tuple[int, tuple[float, str | None, int], Any]  # (place in items, report, its ctx)


def _items(runs: list[Run]) -> tuple[dict[int, list[tuple[str, int, bool]]],
                                     dict[int, list[Report]]]:
    """Each shard's heartbeat items, a run's first one announcing it (heartbeat.lua's
    "claimed"), and the runs that reported progress since the last beat, written in the same
    call under the same token fence."""
    by_shard: defaultdict[int, list[tuple[str, int, bool]]] = defaultdict(list)
    reports: defaultdict[int, list[Report]] = defaultdict(list)
    for run in runs:
        items = by_shard[run.shard]
        ctx = run.ctx
        if ctx is not None and (report := ctx.reported()) is not None:
            reports[run.shard].append((len(items), report, ctx))
        items.append((run.slot_id, run.token, not run.announced))
    return by_shard, reports


def _by_queue(runs: list[Run]) -> bytes:
    """Runs in flight per queue (for the workers-wanted rule, scheduler/observe/capacity.py)."""
    counts: Counter[str] = Counter()
    for run in runs:
        m = getattr(run, "metrics", None)  # set by the worker's claim; a test's bare Run: none
        if m is not None:
            counts[m.queue] += 1
    return msgspec.json.encode(counts)
