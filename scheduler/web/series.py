"""The overview's charts: the console samples the namespace's status every `every_s` and keeps
the last `keep` samples in memory (an hour at 5 s): throughput and error rate (the workers'
own rates), start lag (how long the oldest ready job has waited) and backlog (ready entries
not yet read, plus due slots not yet promoted). A restarted console starts a new series;
Prometheus (`sched exporter`) keeps the long one. The samples feed the charts alone: a page
reads Redis when it is viewed, never an older sample."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import msgspec

from scheduler.observe.status import Status
from scheduler.redis.service import Service

log = logging.getLogger("scheduler.web")


class Sample(msgspec.Struct, frozen=True, array_like=True):
    t: float  # seconds since the epoch (Redis time)
    succeeded_per_s: float
    failed_per_s: float
    start_lag_s: float
    backlog: int


def sample_of(s: Status) -> Sample:
    return Sample(t=s.now_ms / 1000,
                  succeeded_per_s=round(sum(q.succeeded_per_s for q in s.queues), 2),
                  failed_per_s=round(sum(q.failed_per_s for q in s.queues), 2),
                  start_lag_s=round(max([q.oldest_ready_age_s for q in s.queues],
                                        default=0.0), 3),
                  backlog=sum(q.depth for q in s.queues) + s.due_backlog)


class Sampler(Service):
    what = "console sampling"
    log = log

    def __init__(self, client: Any, every_s: float = 5.0, keep: int = 720) -> None:
        super().__init__()
        self.client = client
        self.every_s = every_s
        self.samples: deque[Sample] = deque(maxlen=keep)

    async def run_once(self) -> None:
        self.samples.append(sample_of(await self.client.status()))

    def delay(self, result: Any) -> float:
        return self.every_s

    def series(self) -> dict[str, list[float]]:
        """Columns for uPlot: x (seconds) then one list per series."""
        cols = list(zip(*(msgspec.structs.astuple(s) for s in self.samples), strict=True)) \
            or [(), (), (), (), ()]
        names = ("t", "succeeded_per_s", "failed_per_s", "start_lag_s", "backlog")
        return {name: list(col) for name, col in zip(names, cols, strict=True)}
