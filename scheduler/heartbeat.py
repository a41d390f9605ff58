"""Keeps a worker's leases alive and its presence visible.

Every ~lease/3: one `heartbeat` call per shard extends the lease of every in-flight slot
(and resets its stream entry's idle time); slots whose lease was lost are reported so the
worker stops them; the worker's entry in `<ns>:workers` is refreshed in the same round trip.
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
                 on_lost: Callable[[int, str, int], None],
                 on_cancel: Callable[[int, str, int], None]) -> None:
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.interval_s = lease_ms / 3000
        self.inflight = inflight
        self.on_lost = on_lost
        self.on_cancel = on_cancel
        self.info: dict[Any, Any] = {"host": socket.gethostname(), "pid": os.getpid(),
                     "concurrency": concurrency, "queues": ",".join(queues)}
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
        for (shard, items), reply in zip(by_shard.items(), replies, strict=True):
            for (slot, token), code in zip(items, scripts.codes(reply, scripts.Beat), strict=True):
                if code is scripts.Beat.LOST:
                    self.on_lost(shard, slot, token)
                elif code is scripts.Beat.CANCEL:
                    self.on_cancel(shard, slot, token)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.workers, {self.worker_id: now})
        pipe.hset(self.keys.worker(self.worker_id),
                  mapping={**self.info, "inflight": len(running), "seen_ms": now})
        pipe.pexpire(self.keys.worker(self.worker_id), self.lease_ms * 2)
        await pipe.execute()

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
                    for shard, slot, token in self.inflight():
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
