"""rq: `rq worker` with the SimpleWorker class (no fork per job), results not kept, quiet.

Run in the peers' venv: `python rq_peer.py enqueue N [DUE]` / `python rq_peer.py worker`.
Delayed jobs use `enqueue_at`; the worker runs with its scheduler (`--with-scheduler`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from probe import PROBE, exec_worker, main, redis_url
from redis import Redis
from rq import Queue


def noop(due: float | None = None) -> None:
    PROBE.hit(due)


def enqueue(n: int, due: float | None) -> None:
    queue = Queue(connection=Redis.from_url(redis_url()))
    if due:
        at = datetime.fromtimestamp(due, UTC)
        for _ in range(n):
            queue.enqueue_at(at, "rq_peer.noop", due, result_ttl=0)
        return
    for i in range(0, n, 1000):
        queue.enqueue_many([Queue.prepare_data("rq_peer.noop", (None,), result_ttl=0)
                            for _ in range(min(1000, n - i))])


worker = exec_worker("rq", "worker", "--worker-class", "rq.worker.SimpleWorker", "--url",
                     redis_url(), "--quiet", "--logging_level", "WARNING", "--with-scheduler",
                     "--disable-job-desc-logging")


if __name__ == "__main__":
    main(enqueue, worker)
