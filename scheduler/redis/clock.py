"""One clock for every process: Redis TIME, never a machine's wall clock (slots, leases and
deadlines compare instants written by many machines, which would otherwise disagree).

A service reads `now_ms()` once per loop and passes it to Lua, and measures its deadlines
on `monotonic()`. `RedisClock` anchors to Redis
TIME and advances with the local monotonic clock between re-syncs, so the hot path pays no
extra round trip; the node's wall clock is never used. Tests use `ManualClock`. On a Redis
Cluster every process reads the same node's TIME (cluster.home): one clock, never mixed.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import scheduler.redis.cluster as cluster
import scheduler.redis.transport as transport


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic(self) -> float:
        """Seconds that never go back: what deadlines are measured on (a run's lease as the
        worker knows it, the watchdog's margin, how long a slot is held back). Tests that
        inject a ManualClock move these with it, so they need no sleeps."""
        ...

    def stale(self) -> bool: ...

    def anchor(self, redis_time: Any) -> None: ...


class RedisClock:
    def __init__(self, resync_s: float = 5.0) -> None:
        self.resync_s = resync_s
        self._base_ms = 0.0
        self._mono = -1e18

    def stale(self) -> bool:
        return time.monotonic() - self._mono > self.resync_s

    def anchor(self, redis_time: Any) -> None:
        """Take a reply of Redis TIME: (seconds, microseconds)."""
        sec, usec = redis_time
        self._base_ms = int(sec) * 1000 + int(usec) / 1000
        self._mono = time.monotonic()

    def now_ms(self) -> int:
        return int(self._base_ms + (time.monotonic() - self._mono) * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock a test sets and advances; never stale."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.ms = now_ms

    def stale(self) -> bool:
        return False

    def anchor(self, redis_time: Any) -> None:
        pass

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


async def resync(clock: Clock, client: Any) -> int:
    """now_ms(), re-anchored first to Redis TIME when the clock is stale (a round trip only
    then): what every asyncio loop calls once per pass. `client` is a redis.asyncio.Redis."""
    if clock.stale():
        if cluster.is_cluster(client):
            await cluster.ensure_async(client)
            client = cluster.home_client(client)
        clock.anchor(await transport.call(client, "time"))
    return clock.now_ms()


def resync_sync(clock: Clock, client: Any) -> int:
    """resync for a synchronous redis.Redis."""
    if clock.stale():
        clock.anchor(transport.call_sync(cluster.home_client(client) if cluster.is_cluster(
            client) else client, "time"))
    return clock.now_ms()
