"""A worker's run slots: how many it has now, the runs that hold them, and the claims under
way that will.

Every claim loop (the worker's pipelines and its limited queues' loop) asks `free()` before a
claim and counts the entries it claims in `claiming` until the claim returns, so two loops
never claim the same slot twice over. A run that ends sets `capacity`, waking a loop that
waits in `wait()`. Only `resize()` changes the count (the autoscaler does): fewer take effect
as runs end, none is stopped.

`pace` (a `Pace`) counts the runs that end, so a claim can read ahead no more than the worker
will start soon (Claims.read_ahead).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from scheduler.worker.inflight import Inflight

HORIZON_S = 0.2  # a worker reads ahead what it ends in this long at its recent pace
SMOOTH_S = 0.25  # the pace forgets what was ended longer ago than about this
TICK_S = 0.02  # the pace is measured over at least this long (fewer ends are too noisy)


class Pace:
    """How fast a worker's runs end: runs per second, smoothed over about SMOOTH_S (an
    exponential average weighted by time, so a pause of a second forgets a busy stretch),
    and how many it ends within a horizon at that pace.

    `ended` is counted as each run ends (one addition on the hot path); the rate is worked out
    at most once per TICK_S, when a claim asks `ahead()`. A worker of no-op jobs ends tens of
    thousands a second and so reads whole batches; a worker of 100 ms jobs ends its slots'
    worth ten times a second and reads little more than its free slots."""

    __slots__ = ("_at", "_counted", "ended", "rate")

    def __init__(self) -> None:
        self.ended = 0  # runs ended since the worker started (Execution.end counts them)
        self.rate = 0.0  # runs ended per second, smoothed
        self._at: float | None = None  # when the rate was last worked out (monotonic s)
        self._counted = 0  # `ended` then

    def ahead(self, now: float, horizon_s: float = HORIZON_S) -> int:
        """Runs this worker ends within `horizon_s` at its recent pace; `now` is monotonic
        seconds."""
        at = self._at
        if at is None:
            self._at, self._counted = now, self.ended
            return 0
        elapsed = now - at
        if elapsed >= TICK_S:
            weight = 1.0 - math.exp(-elapsed / SMOOTH_S)
            self.rate += weight * ((self.ended - self._counted) / elapsed - self.rate)
            self._at, self._counted = now, self.ended
        return int(self.rate * horizon_s)


class Slots:
    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.pace = Pace()
        self.running: Inflight = {}
        self.claiming = 0  # entries taken from a backlog whose claim has not returned yet
        self.capacity = asyncio.Event()  # set whenever a run ends, or the count grows

    def free(self) -> int:
        return self.concurrency - len(self.running) - self.claiming

    def busy(self) -> int:
        """Slots taken: runs in flight and claims under way."""
        return len(self.running) + self.claiming

    def share(self, batch: int, pipelines: int) -> int:
        """Most entries one claim takes: a batch, or a pipeline's share of the run slots."""
        return max(1, min(batch, -(-self.concurrency // pipelines)))

    async def wait(self, finished: Callable[[], bool]) -> None:
        """Until a slot is free (or `finished()`): every claim loop waits here."""
        while self.free() <= 0 and not finished():
            self.capacity.clear()
            await self.capacity.wait()

    def resize(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.capacity.set()
