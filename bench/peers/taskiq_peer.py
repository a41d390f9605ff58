"""taskiq: taskiq-redis's `ListQueueBroker` (LPUSH/BRPOP), `taskiq worker` with one worker
process and up to 1000 tasks at once, WARNING logs.

Run in the peers' venv: `python taskiq_peer.py enqueue N` / `python taskiq_peer.py worker`.
No delayed run: taskiq schedules through a separate `taskiq scheduler` process.
"""

from __future__ import annotations

import asyncio

from probe import PROBE, exec_worker, main, redis_url
from taskiq_redis import ListQueueBroker

broker = ListQueueBroker(url=redis_url())


@broker.task(task_name="noop")
async def noop(due: float | None = None) -> None:
    PROBE.hit(due)


async def _enqueue(n: int) -> None:
    await broker.startup()
    for i in range(0, n, 500):
        await asyncio.gather(*(noop.kiq() for _ in range(min(500, n - i))))
    await broker.shutdown()


def enqueue(n: int, due: float | None) -> None:
    if due:
        raise SystemExit("taskiq: delayed jobs need a `taskiq scheduler` process")
    asyncio.run(_enqueue(n))


worker = exec_worker("taskiq", "worker", "taskiq_peer:broker", "--workers", "1",
                     "--max-async-tasks", "1000", "--log-level", "WARNING")


if __name__ == "__main__":
    main(enqueue, worker)
