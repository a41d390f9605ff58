"""A worker's run slots: how many it has now, the runs that hold them, and the claims under
way that will.

Every claim loop (the worker's pipelines and its limited queues' loop) asks `free()` before a
claim and counts the entries it claims in `claiming` until the claim returns, so two loops
never claim the same slot twice over. A run that ends sets `capacity`, waking a loop that
waits in `wait()`. Only `resize()` changes the count (the autoscaler does): fewer take effect
as runs end, none is stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from scheduler.worker.inflight import Inflight


class Slots:
    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
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
