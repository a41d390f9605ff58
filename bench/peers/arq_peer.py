"""arq: `Worker` with max_jobs 1000, poll_delay 10 ms, results not kept, uvloop.

Run in the peers' venv: `python arq_peer.py enqueue N [DUE]` / `python arq_peer.py worker`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from arq import create_pool, run_worker
from arq.connections import RedisSettings
from probe import PROBE, main, redis_url


async def noop(ctx: dict[str, Any], due: float | None = None) -> None:
    PROBE.hit(due)


class WorkerSettings:
    functions = [noop]
    redis_settings = RedisSettings.from_dsn(redis_url())
    max_jobs = 1000
    poll_delay = 0.01
    keep_result = 0
    log_results = False


async def _enqueue(n: int, due: float | None) -> None:
    pool = await create_pool(WorkerSettings.redis_settings)
    at = datetime.fromtimestamp(due, UTC) if due else None
    for i in range(0, n, 500):
        await asyncio.gather(*(pool.enqueue_job("noop", due, _defer_until=at)
                               for _ in range(min(500, n - i))))
    await pool.aclose()


def enqueue(n: int, due: float | None) -> None:
    asyncio.run(_enqueue(n, due))


def worker() -> None:
    import uvloop

    logging.basicConfig(level=logging.WARNING)
    uvloop.install()
    run_worker(WorkerSettings)  # type: ignore[arg-type]


if __name__ == "__main__":
    main(enqueue, worker)
