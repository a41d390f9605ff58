"""dramatiq: the redis broker, `dramatiq` CLI with one process and 8 threads (its default).

Run in the peers' venv: `python dramatiq_peer.py enqueue N [DUE]` / `... worker`.
Delayed jobs use `send_with_options(delay=ms)` (the broker's delay queue).
"""

from __future__ import annotations

import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from probe import PROBE, exec_worker, main, redis_url

dramatiq.set_broker(RedisBroker(url=redis_url()))


@dramatiq.actor(actor_name="noop", max_retries=0)
def noop(due: float | None = None) -> None:
    PROBE.hit(due)


def enqueue(n: int, due: float | None) -> None:
    for _ in range(n):
        if due:
            noop.send_with_options(args=(due,), delay=max(0, int((due - time.time()) * 1000)))
        else:
            noop.send()


worker = exec_worker("dramatiq", "dramatiq_peer", "--processes", "1", "--threads", "8")


if __name__ == "__main__":
    main(enqueue, worker)
