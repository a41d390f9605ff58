"""Keeps a worker's leases alive and its presence visible.

Every ~lease/3: one `heartbeat` call per shard extends the lease of every in-flight slot
(and resets its stream entry's idle time); slots whose lease was lost are reported so the
worker stops them; the worker's entry in `<ns>:workers` is refreshed in the same round trip,
with its in-flight count and its per-queue rates over the last interval (for `sched status`:
rates cost no command beyond this one and nothing per job).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import redis.asyncio

from . import scripts
from .clock import Clock
from .keys import Keys
from .loops import pause

log = logging.getLogger("scheduler.worker")


class Heartbeat:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys, clock: Clock, worker_id: str,
                 lease_ms: int, concurrency: int, queues: Iterable[str],
                 inflight: Callable[[], list[tuple[int, str, int]]],
                 on_lost: Callable[[int, str, int], bool],
                 on_cancel: Callable[[int, str, int], None],
                 tallies: Callable[[], dict[str, tuple[int, int]]] | None = None) -> None:
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.interval_s = lease_ms / 3000
        self.inflight = inflight
        self.on_lost = on_lost
        self.on_cancel = on_cancel
        self.tallies = tallies or dict
        self.info: dict[Any, Any] = {"host": socket.gethostname(), "pid": os.getpid(),
                     "concurrency": concurrency, "queues": ",".join(queues),
                     "lease_ms": lease_ms}
        self._last: tuple[int, dict[str, tuple[int, int]]] | None = None
        self._stop = asyncio.Event()

    async def run_once(self) -> None:
        now = self.clock.now_ms()
        by_shard: defaultdict[int, list[tuple[str, int]]] = defaultdict(list)
        running = self.inflight()
        for shard, slot, token in running:
            by_shard[shard].append((slot, token))
        calls = [scripts.heartbeat(self.keys.prefix(s), now, self.lease_ms, self.worker_id, items)
                 for s, items in by_shard.items()]
        replies = await scripts.run_async(self.redis, calls)
        lost = 0
        for (shard, items), reply in zip(by_shard.items(), replies, strict=True):
            for (slot, token), code in zip(items, scripts.codes(reply, scripts.Beat), strict=True):
                # A run that finished after `inflight()` was taken may be committed before
                # this heartbeat ran: its slot is no longer running, yet nothing was lost.
                # on_lost says whether it stopped a run still going.
                if code is scripts.Beat.LOST and self.on_lost(shard, slot, token):
                    lost += 1
                elif code is scripts.Beat.CANCEL:
                    self.on_cancel(shard, slot, token)
        if lost:  # one line per heartbeat, not per slot: after a pause they come in hundreds
            log.warning("%d lease(s) lost (the slots were reclaimed or finished elsewhere); "
                        "stopping those runs", lost)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.workers, {self.worker_id: now})
        pipe.hset(self.keys.worker(self.worker_id),
                  mapping={**self.info, "inflight": len(running), "seen_ms": now,
                           **self._counts(now)})
        pipe.pexpire(self.keys.worker(self.worker_id), self.lease_ms * 2)
        await pipe.execute()

    def _counts(self, now: int) -> dict[Any, Any]:
        """Totals since start and per-queue rates (succeeded/s, failed/s) since the last beat."""
        tallies = self.tallies()
        rates: dict[str, tuple[float, float]] = {}
        if self._last is not None and now > self._last[0]:
            seconds = (now - self._last[0]) / 1000
            before = self._last[1]
            for queue, (ok, failed) in tallies.items():
                ok0, failed0 = before.get(queue, (0, 0))
                rates[queue] = (round((ok - ok0) / seconds, 3),
                                round((failed - failed0) / seconds, 3))
        self._last = (now, tallies)
        return {"succeeded": sum(t[0] for t in tallies.values()),
                "failed": sum(t[1] for t in tallies.values()),
                "rates": msgspec.json.encode(rates)}

    async def run(self) -> None:
        last_ok = time.monotonic()
        while not self._stop.is_set():
            try:
                await self.run_once()
                last_ok = time.monotonic()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                silent_s = time.monotonic() - last_ok
                log.warning("heartbeat failed (%s); no heartbeat for %.1fs, leases last %.0fs",
                            exc, silent_s, self.lease_ms / 1000)
                if silent_s * 1000 > self.lease_ms:
                    # Our leases have expired and the reclaimer may have handed the slots to
                    # another worker: stop running them rather than duplicate their effects.
                    running = self.inflight()
                    if running:
                        log.warning("no heartbeat for a whole lease: stopping %d run(s)",
                                    len(running))
                    for shard, slot, token in running:
                        self.on_lost(shard, slot, token)
            except Exception:
                # Without heartbeats every lease expires: never let a surprise end this loop.
                log.exception("heartbeat failed unexpectedly; retrying")
            await pause(self._stop, self.interval_s)

    def stop(self) -> None:
        self._stop.set()

    async def leave(self) -> None:
        """Remove this worker from the registry (clean shutdown)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.workers, self.worker_id)
        pipe.delete(self.keys.worker(self.worker_id))
        await pipe.execute()
