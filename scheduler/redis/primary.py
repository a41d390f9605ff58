"""Behind Sentinel, a long-running process follows a failover even while the old primary
lives on.

The sentinels name a new primary when the old one has not answered them for their
down-after time; one that was only slow (a fork, a loaded host) goes on as a primary, taking
writes, until the sentinels turn it into a replica, which can take their failover-timeout.
redis-py asks the sentinels only when a connection connects, so the connections already open
stay with the old primary meanwhile: a worker renews its leases there while the nodes,
reconnected to the new one, see them run out, and those writes are lost when the old primary
becomes a replica. `PrimaryWatch` asks the sentinels every interval and, once they name
another primary, closes the connections to the old one: idle ones now, busy ones when their
round trip ends (the pool's, and transport.py's own, which compare their address with the
pool's `master_address` before each use).
"""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio.sentinel

from scheduler.redis.service import Service

log = logging.getLogger("scheduler.redis")


def sentinel_pool(client: Any) -> Any:
    """The client's Sentinel-managed connection pool; None for any other client."""
    pool = getattr(client, "connection_pool", None)
    return pool if isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool) else None


class PrimaryWatch(Service):
    """Asks the sentinels for the primary every `interval_s`; a no-op for a client without
    Sentinel (run() returns at once)."""

    what = "asking the sentinels for the primary"
    log = log

    def __init__(self, client: Any, interval_s: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.pool = sentinel_pool(client)
        self.interval_s = interval_s

    def finished(self) -> bool:
        return self.pool is None or super().finished()

    async def run_once(self) -> bool:
        """True when the sentinels named another primary than the connections use."""
        pool = self.pool
        before = pool.master_address
        # Drops the idle connections when the address changed.
        address = await pool.get_master_address()
        if before is None or tuple(address) == tuple(before):
            return False
        await pool.update_active_connections_for_reconnect()
        log.warning("the sentinels name %s:%s the primary, not %s:%s: connections to the old "
                    "one are closed", *address, *before)
        return True

    def delay(self, result: Any) -> float:
        return self.interval_s
