"""The turn of a queue's unkeyed jobs among its keys: how a worker shares its run slots
between the plain claims (claims.py) and the keyed takes (keyed.py) of one queue.

The rule (the one place it is written): the unkeyed jobs of a queue count as one more key of
its turns, of weight 1. While a queue has keys in its rings whose jobs can start (a
shard gave the worker's last take of it all it asked for) and unkeyed entries wait in the worker's
backlog, the worker's runs of that queue (those it holds and the free run slots) are shared
out as the turns would: the plain claims hold at most their share,
round(runs / (keys in the rings + 1)), at least 1, and the keyed takes leave that share
free for them. When either side has nothing that can start (no unkeyed entry in hand, or a
take that got less than it asked for), the other takes every free slot: no slot waits
while work could start in it.

Why in the worker and not in take.lua (the unkeyed jobs as a pseudo-key there): the plain
path keeps its price. A claim of unkeyed jobs costs what it did; the rule adds no Redis
command per job, and none at all on a queue without keyed jobs, where `waiting` is empty and
every hook below stays off. Shares are counted in running slots, not starts: with jobs of
like length that is the same thing, and it stays right when slots free one at a time (a
share of the free slots alone would give each freed slot to whichever side asks first).

What is counted, per queue in `waiting` only: the plain runs (hooked as they start, and
those already running when the queue entered `waiting`, found once then) with the entries
being claimed, and the keyed runs with the slots being taken. The number of keys is read
from the rings (an LLEN per shard, at most once per RING_S while both sides wait). The rule
is per worker: every worker applies it to its own slots, so the shares hold across workers
too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable

from scheduler.core.keys import queue_of
from scheduler.worker.backlog import Entry
from scheduler.worker.inflight import Run
from scheduler.worker.reader import Reader
from scheduler.worker.slots import Slots

RING_S = 0.2  # the keys of a queue's rings are read again after this long, while both wait


class Turns:
    """A worker's shares of its run slots between the plain claims and the keyed takes of
    each queue whose keyed jobs wait (the module's header)."""

    def __init__(self, slots: Slots, reader: Reader) -> None:
        self.slots = slots
        self.reader = reader
        self.waiting: dict[str, int] = {}  # queue -> keys in its rings, while they can start
        self.read_at: dict[str, float] = {}  # queue -> when its rings were read (monotonic)
        self.plain: Counter[str] = Counter()  # queue -> plain runs and entries being claimed
        self.keyed: Counter[str] = Counter()  # queue -> keyed runs and slots being taken
        self.yielded = asyncio.Event()  # a free slot is the keyed takes' (the plain held back)

    # --- the keyed side says what waits --------------------------------------------------

    def took(self, asked: Iterable[str], full: set[str], seen: dict[str, set[bytes]]
             ) -> None:
        """A take round trip's outcome: the queues asked, those of which a shard granted
        all it was asked (the keys hold more), the keys granted of each."""
        for q in asked:
            if q in full:  # its keys hold more, and take a turn
                self.keys_wait(q, self.waiting.get(q) or len(seen.get(q, ())))
            else:
                self.keys_done(q)

    def keys_wait(self, queue: str, keys: int) -> None:
        """A take of the queue got all it asked of a shard: its keys hold more (`keys`: in
        its rings, as last read, at least 1)."""
        if queue not in self.waiting:
            self._count_plain(queue)
        self.waiting[queue] = max(1, keys)

    def keys_done(self, queue: str) -> None:
        """A take of the queue got less than it asked of every shard: nothing more of its
        keys can start now; the plain claims take every free slot again."""
        if self.waiting.pop(queue, None) is not None:
            self.slots.capacity.set()

    def rings_read(self, queue: str, keys: int, at: float) -> None:
        self.read_at[queue] = at
        if keys <= 0:
            self.keys_done(queue)
        elif queue in self.waiting:
            self.waiting[queue] = keys

    def stale(self, queues: Iterable[str], now: float) -> list[str]:
        """The queues whose keys should be read again: unkeyed entries of theirs wait, and
        their rings were last read RING_S ago."""
        return [q for q in queues if now - self.read_at.get(q, -RING_S) >= RING_S
                and self.plain_waits(q)]

    # --- the shares ----------------------------------------------------------------------

    def share(self, queue: str) -> int:
        """The plain claims' share of the queue's runs (the rule: the module's header)."""
        keys = self.waiting[queue]
        runs = self.plain[queue] + self.keyed[queue] + max(0, self.slots.free())
        return max(1, (2 * runs + keys + 1) // (2 * (keys + 1)))

    def plain_room(self, queue: str) -> int:
        """How many more plain runs of the queue may start now (-1: no bound)."""
        if queue not in self.waiting:
            return -1
        return max(0, self.share(queue) - self.plain[queue])

    def keyed_room(self, queue: str, free: int) -> int:
        """How many of `free` slots the keyed takes of the queue may ask for now: all but
        what the plain claims' share still lacks, while unkeyed entries wait."""
        if queue not in self.waiting or not self.plain_waits(queue):
            return free
        return max(0, free - max(0, self.share(queue) - self.plain[queue]))

    def plain_waits(self, queue: str) -> bool:
        return any(queue_of(e[1]) == queue for e in self.reader.backlog)

    # --- the plain side ------------------------------------------------------------------

    def take(self, n: int) -> tuple[list[Entry], Counter[str], bool]:
        """Up to n entries of the reader's backlog, in its order, none past its queue's
        plain room; the others stay first in line. Also: how many of each waiting queue's
        were taken (they count as its plain runs until `claimed`), and whether any entry
        was held back."""
        reader, rooms = self.reader, {q: self.plain_room(q) for q in self.waiting}
        kept: list[Entry] = []
        back: list[Entry] = []
        counted: Counter[str] = Counter()
        while len(kept) < n:
            got = reader.take(n - len(kept))
            if not got:
                break
            for entry in got:
                q = queue_of(entry[1])
                room = rooms.get(q, -1)
                if room == 0:
                    back.append(entry)
                    continue
                kept.append(entry)
                if room > 0:
                    rooms[q] = room - 1
                    counted[q] += 1
        self.plain.update(counted)
        if back:
            reader.give_back(back)
            self.yielded.set()
        return kept, counted, bool(back)

    def claimed(self, counted: Counter[str]) -> None:
        """The claim of entries `take` counted has returned (its runs are counted as they
        start: `on_start`)."""
        self.plain.subtract(counted)

    def on_start(self, run: Run) -> None:
        """A plain run starts: counted while its queue waits on keys."""
        if self.waiting and run.on_end is None:
            q = queue_of(run.lane)
            if q in self.waiting:
                self.plain[q] += 1
                run.on_end = self._plain_end

    def _plain_end(self, run: Run) -> None:
        q = queue_of(run.lane)
        self.plain[q] -= 1
        if q in self.waiting and self.plain_room(q) == 0:
            self.yielded.set()  # its slot is the keys' turn

    def _count_plain(self, queue: str) -> None:
        """The plain runs of a queue that just began waiting on keys, started before."""
        for run in self.slots.running.values():
            if run.on_end is None and queue_of(run.lane) == queue:
                self.plain[queue] += 1
                run.on_end = self._plain_end

    # --- the keyed side's runs -----------------------------------------------------------

    def keyed_start(self, queue: str) -> None:
        self.keyed[queue] += 1

    def keyed_end(self, queue: str) -> None:
        self.keyed[queue] -= 1
