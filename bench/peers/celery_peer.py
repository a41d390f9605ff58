"""celery: the redis broker, no result backend, `celery worker` with the threads pool (8),
prefetch multiplier 1000, no gossip/mingle/heartbeat. The solo pool burned down no faster
and ran eta tasks due at once tens of seconds late, so both workloads use threads.

Run in the peers' venv: `python celery_peer.py enqueue N [DUE]` / `... worker`.
Delayed jobs use `eta` (the worker holds them until then).
"""

from __future__ import annotations

from datetime import UTC, datetime

from celery import Celery
from probe import PROBE, exec_worker, main, redis_url

app = Celery("celery_peer", broker=redis_url())
app.conf.update(task_ignore_result=True, worker_prefetch_multiplier=1000,
                broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
                task_acks_late=False)


@app.task(name="noop")
def noop(due: float | None = None) -> None:
    PROBE.hit(due)


def enqueue(n: int, due: float | None) -> None:
    eta = datetime.fromtimestamp(due, UTC) if due else None
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            noop.apply_async((due,), eta=eta, producer=producer)


worker = exec_worker("celery", "-A", "celery_peer", "worker", "--pool", "threads",
                     "--concurrency", "8",
                     "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
                     "--without-heartbeat", "--prefetch-multiplier", "1000")


if __name__ == "__main__":
    main(enqueue, worker)
