"""A Sentinel URL's clients wait for a free connection as a plain URL's do: more calls at
once than a pool holds (a worker's handlers during a failover, when every call stalls) queue
for one, where redis-py's sentinel pool failed each past the 100th with "Too many
connections"."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from faults.sentinel import sentinel_set

from scheduler.redis.clients import MAX_CONNECTIONS, async_redis, sync_redis

pytestmark = pytest.mark.slow  # a primary, a replica and three sentinels

CALLS = MAX_CONNECTIONS + 50
HOLD_S = 0.3  # each call holds its connection this long (a BLPOP that finds nothing)


def test_more_calls_than_connections_wait_on_a_sentinel_url() -> None:
    with sentinel_set(replicas=1) as hs:
        async def at_once() -> list[object]:
            r = async_redis(hs.url, timeout_s=5, retries=0)
            try:
                return await asyncio.gather(*(r.blpop([f"none:{i}"], HOLD_S)
                                              for i in range(CALLS)), return_exceptions=True)
            finally:
                await r.aclose()

        failed = [repr(x) for x in asyncio.run(at_once()) if isinstance(x, BaseException)]
        assert failed == [], failed[:3]

        r = sync_redis(hs.url, timeout_s=5, retries=0)
        with ThreadPoolExecutor(CALLS) as pool:
            futures = [pool.submit(r.blpop, [f"none:{i}"], HOLD_S) for i in range(CALLS)]
            errors = [repr(e) for f in futures if (e := f.exception()) is not None]
        r.close()
        assert errors == [], errors[:3]
