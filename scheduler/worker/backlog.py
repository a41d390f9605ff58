"""A worker's backlog: dispatch entries it read but has not claimed yet, taken by priority.

Each priority of a queue has its own dispatch stream (a lane, keys.lane), so a read brings
entries of every priority that has any; the backlog keeps them apart and `take` hands out
the best first. The rule, and why nothing starves:

  * Entries are taken from the best priority waiting (1 before 2 ... before 5), oldest read
    first within a priority.
  * While entries of more than one priority wait, every STARVE_EVERY-th entry taken (the
    10th) comes from a worse one than the best, in turn (2, 3, 4, 5, 2, ...: the next worse
    priority with entries after the one served last). So while better work keeps arriving,
    worse priorities still get a tenth of this worker's starts, shared among them, and an
    entry's wait is bounded by the entries ahead of it in its own lane.

The rule is per worker: entries another worker read are in its backlog, under its rule.
With one priority waiting (every job at the default, the common case) `take` is one pass
over one deque.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from scheduler.core.keys import PRIORITIES

Entry = tuple[int, str, bytes, str]  # shard, lane (keys.lane), stream entry id, slot id

STARVE_EVERY = 10


class Backlog:
    __slots__ = ("_lanes", "_priority_of", "_taken", "_turn")

    def __init__(self) -> None:
        self._lanes: list[deque[Entry]] = [deque() for _ in PRIORITIES]
        self._priority_of: dict[str, int] = {}  # lane -> index in _lanes
        self._taken = 0  # entries taken while several priorities waited
        self._turn = 0  # the worse priority served last (index in _lanes)

    def know(self, lane: str, priority: int) -> None:
        self._priority_of[lane] = PRIORITIES.index(priority)

    def lane(self, lane: str) -> deque[Entry]:
        """The deque a lane's entries go to (the reader appends to it directly)."""
        return self._lanes[self._priority_of[lane]]

    def give_back(self, entries: list[Entry]) -> None:
        """Entries whose claim may or may not have run: first in line again, each in its
        own priority."""
        for entry in reversed(entries):
            self._lanes[self._priority_of[entry[1]]].appendleft(entry)

    def take(self, n: int) -> list[Entry]:
        lanes = self._lanes
        busy = [lane for lane in lanes if lane]
        if len(busy) == 1:
            only = busy[0]
            return [only.popleft() for _ in range(min(n, len(only)))]
        out: list[Entry] = []
        while len(out) < n:
            waiting = [i for i, lane in enumerate(lanes) if lane]
            if not waiting:
                break
            self._taken += 1
            if len(waiting) > 1 and self._taken % STARVE_EVERY == 0:
                worse = waiting[1:]
                pick = next((i for i in worse if i > self._turn), worse[0])
                self._turn = pick
            else:
                pick = waiting[0]
            out.append(lanes[pick].popleft())
        return out

    def mixed(self) -> bool:
        """Whether entries of more than one priority are in hand."""
        return sum(map(bool, self._lanes)) > 1

    def drain(self) -> list[Entry]:
        """Everything, emptying the backlog (a stopping worker hands it back)."""
        out = [entry for lane in self._lanes for entry in lane]
        for lane in self._lanes:
            lane.clear()
        return out

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes)

    def __bool__(self) -> bool:
        return any(self._lanes)

    def __iter__(self) -> Iterator[Entry]:
        for lane in self._lanes:
            yield from lane
