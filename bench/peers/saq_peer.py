"""saq: one `Worker` with concurrency 100 on the redis queue, uvloop, INFO logs off.

Run in the peers' venv: `python saq_peer.py enqueue N [DUE]` / `python saq_peer.py worker`.
saq's `scheduled` is whole epoch seconds, so the bench puts delayed jobs on a whole second.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio
from probe import PROBE, main, redis_url
from saq import Queue, Worker
from saq.queue.redis import RedisQueue

CONCURRENCY = 100


async def noop(ctx: dict[str, Any], *, due: float | None = None) -> None:
    PROBE.hit(due)


async def _enqueue(n: int, due: float | None) -> None:
    queue = Queue.from_url(redis_url())
    await queue.connect()
    extra = {"scheduled": int(due)} if due else {}
    for i in range(0, n, 500):
        await asyncio.gather(*(queue.enqueue("noop", due=due, **extra)
                               for _ in range(min(500, n - i))))
    await queue.disconnect()


def enqueue(n: int, due: float | None) -> None:
    asyncio.run(_enqueue(n, due))


async def _work() -> None:
    # each of the `concurrency` dequeue loops holds a connection while it blocks: leave room
    queue = RedisQueue(redis.asyncio.from_url(redis_url(), max_connections=CONCURRENCY * 2 + 50))
    worker = Worker(queue, functions=[noop], concurrency=CONCURRENCY)
    await queue.connect()
    try:
        await worker.start()
    finally:
        await queue.disconnect()


def worker() -> None:
    import uvloop

    logging.basicConfig(level=logging.WARNING)
    uvloop.run(_work())


if __name__ == "__main__":
    main(enqueue, worker)
