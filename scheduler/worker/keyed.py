"""A worker's claims of keyed slots: jobs submitted with a concurrency key, which wait in
their key's queue rather than in a dispatch stream, and start in the keys' turns under the
queue's per-key limit (lua/take.lua holds the rule and the count; keys.py the layout).

Each pass asks every shard, in one round trip, for what the free run slots can take of each
of the worker's queues: take.lua walks the queue's ring of keys there and claims in turn. A
key at its limit is passed over (its slots stay queued, never failed), so a worker never
sits on a blocked key's work while other keys have some: nothing of a key is in a worker's
hands before it may start. Outcomes waiting to be committed ride the same round trip ahead
of the takes (Claims.send), so a run that ends frees its key's permit for the take that
follows it at once.

A take whose reply is lost may have granted slots this worker does not know it holds: the
next take of that shard and queue asks for them again (take.lua's `again`, as a claim sent
again is granted again by claim.lua), so they run now rather than wait out their lease.

A queue that also has a queue-wide limit takes its permits first (limiter.py's acquire), and
asks take.lua for no more than were granted; permits it did not use go back at once. The
limits themselves are take.lua's to read (scheduler/core/limits.py): a take of a queue whose
queue-wide limit this worker has not read yet is refused, and the worker reads the limits at
once and takes with permits from the next pass.

A queue that started nothing keyed lately is first probed (an LLEN of its ring per shard,
sent without holding a run slot or a permit, so the worker's other claims never wait on this
loop and a rate loses no token to it). Between passes that started nothing the loop waits on
the queues' wake streams (keywake.py: a key entering a ring ends the wait at once, and the
next pass takes the queues it names without a probe, so a free key's first job starts a
round trip after the wake, as a plain job starts a round trip after its read), a run of
ours ending, or a slot the unkeyed jobs' turn left to the keys (turns.py), for POLL_S while
keys wait at their limits, else IDLE_POLL_S: the polls only catch what no wake says (a
key's permit freed by another worker's run).

A queue's unkeyed jobs take a turn among its keys as one more key (turns.py holds the rule):
a take asks for no more of the free slots than their share leaves, and tells the turn
whether the keys hold more (a shard gave all it was asked) or can start nothing more. While
both kinds wait, the queue's rings are read (LLEN) every RING_S for the number of keys, and a
take asks only the shards whose rings held keys then, rather than shards in turn that hold
none (with a slot or two free at a time, most such takes would find nothing); a wake asks
every shard again.

A worker runs up to `pipelines` take loops, as its plain claims do, so that a take's round trip
overlaps the runs the last one started (without it, the worker's and Redis's time per job
add up). The first loop is the one above; the others (`KeyedFollower`) take only while
the last pass took all it asked for, a loop's share of the run slots at least (the keys hold
more than the free slots, and runs free them by the share, not one at a time), each loop
asking for no more than its share then; they never probe or poll: passes that start nothing
are the first loop's alone. Two takes in flight keep the rules of one:
  * a re-ask (`again`) of a shard and queue is sent only when no other take of it is in
    flight, and none is sent while it flies, so a slot granted by the other take is never
    granted again after its run ended; only a take that carried the re-ask clears it, so a
    take sent before another's reply was lost does not pass for the re-ask;
  * with several live workers (the spread counts this worker's runs of each key, from
    `HeldKeys`) a queue has one take in flight at a time: a second would count without the
    first's grants. The per-key limit itself is take.lua's, exact under any number of takes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
import scheduler.scripts.replies as replies
from scheduler.redis.clock import resync
from scheduler.redis.service import ErrorLog, Service, pause_until
from scheduler.worker.claims import Claims
from scheduler.worker.inflight import Run
from scheduler.worker.keywake import KeyWake
from scheduler.worker.limiter import LimitedClaims
from scheduler.worker.turns import RING_S

log = logging.getLogger("scheduler.worker.worker")

POLL_S = 0.05  # a pass that found keys but started nothing waits this long (or a wake)
IDLE_POLL_S = 1.0  # ... and one that found no key this long: a key entering wakes it
IDLE_AFTER_S = 5.0  # (only as "long ago": a queue never found is cold)
HOT_S = 0.2  # a queue whose take started something this recently is taken without a probe
FRESH_S = 2 * RING_S  # a read of a queue's rings tells which shards hold keys for this long


class HeldKeys:
    """The keyed runs a worker holds, by queue and key: what take.lua's spread counts."""

    def __init__(self) -> None:
        self.count: Counter[tuple[str, str]] = Counter()
        self.of: dict[str, tuple[str, str]] = {}  # slot id -> (queue, key)

    def add(self, slot_id: str, queue: str, key: str) -> None:
        if slot_id not in self.of:
            self.of[slot_id] = (queue, key)
            self.count[queue, key] += 1

    def remove(self, slot_id: str) -> None:
        held = self.of.pop(slot_id, None)
        if held is not None:
            self.count[held] -= 1
            if self.count[held] <= 0:
                del self.count[held]

    def mine(self, queue: str) -> dict[str, int]:
        return {key: n for (q, key), n in self.count.items() if q == queue}


class KeyedClaims(Service):
    """Claims of a worker's keyed slots, every queue and shard in one round trip a pass."""

    what = "claiming keyed slots"
    log = log

    def __init__(self, claims: Claims, limited: LimitedClaims, errors: ErrorLog,
                 live: Callable[[], int] | None = None, held: HeldKeys | None = None) -> None:
        super().__init__(stop=claims.stopping, errors=errors)
        self.claims = claims
        self.live = live or (lambda: 1)  # the namespace's live workers (heartbeat.py)
        self.held = held or HeldKeys()  # the worker's keyed runs (one for all its loops)
        self.limited = limited  # the limits (refreshed there) and the queue-wide permits
        self.shards = 0
        self.ended = asyncio.Event()  # a run of ours ended: its key may take another turn
        self._turn = 0  # which (shard, queue) asks first when the free slots are fewer
        self._found: dict[str, float] = {}  # queue -> when a take last started one (monotonic)
        self._again: set[tuple[int, str]] = set()  # (shard, queue) whose last take failed
        self._rings: dict[str, tuple[float, list[int]]] = {}  # queue -> when read, lengths
        self._flying: Counter[tuple[int, str]] = Counter()  # takes in flight, by (shard, queue)
        self._asking: set[tuple[int, str]] = set()  # ... of them, those carrying a re-ask
        self.loops = max(1, claims.config.pipelines)  # this one and its followers
        self.busy = asyncio.Event()  # the last pass took all it asked, a share at least
        self._sleep_s = 0.0
        self.wake = KeyWake(claims.redis, claims.keys, claims.block_ms)
        self._wake_ok = False  # the last pass worked: its sleep may wait on the wake streams

    async def open(self, shards: int) -> None:
        self.shards = shards
        await self.wake.open(shards, self.claims.config.queues)

    async def ready(self) -> None:
        await self.claims.slots.wait(self.finished)

    def _asks(self, free: int, queues: list[str], caps: dict[str, int]
              ) -> list[tuple[int, str, int]]:
        """(shard, queue, n): the free run slots shared among the queues, each queue's share
        no more than its cap (the queue-wide permits it got) and shared among the shards;
        the odd ones to a first queue and shard that move on every pass."""
        if not queues or free <= 0:
            return []
        k = self._turn
        self._turn += 1
        first = k % len(queues)
        queues = queues[first:] + queues[:first]
        each, extra = divmod(free, len(queues))
        out = []
        mono = self.claims.clock.monotonic()
        for i, q in enumerate(queues):
            budget = min(each + (i < extra), caps.get(q, free))
            shards = self._holding(q, mono)
            per, more = divmod(budget, len(shards))
            for j in range(len(shards)):
                n = per + (j < more)
                if n > 0:
                    out.append((shards[(k + j) % len(shards)], q, n))
        return out

    def _holding(self, queue: str, mono: float) -> list[int]:
        """The shards a take of the queue asks: those whose ring held keys when read lately
        (while its unkeyed entries wait: turns.py), else every one."""
        at, lengths = self._rings.get(queue, (-FRESH_S, []))
        if mono - at < FRESH_S:
            held = [s for s, n in enumerate(lengths) if n]
            if held:
                return held
        return list(range(self.shards))

    async def run_once(self) -> int:
        self.ended.clear()
        self.claims.turns.yielded.clear()
        self._wake_ok = False
        started, self._sleep_s = await self.take_pass(lead=True)
        return started

    async def take_pass(self, lead: bool) -> tuple[int, float]:
        """One pass of a take loop: (how many started, how long to wait before the next).
        The first loop (`lead`) probes cold queues and re-asks; a follower takes only the
        queues found lately, and only while `busy`."""
        w = self.claims
        free = w.slots.free()
        if free <= 0 or not self.shards or not (lead or self.busy.is_set()):
            return 0, POLL_S
        share = -(-w.slots.concurrency // self.loops)  # a loop's share of the run slots
        if self.loops > 1 and self.busy.is_set():  # a share each, so both have a take going
            free = min(free, share)
        await resync(w.clock, w.redis)
        queues = await self._queues(lead)
        if lead:
            self._wake_ok = True
        live = self.live()
        workers = live if live > 1 else None
        flying = {q for _, q in self._flying}
        if workers and flying & set(queues):  # the spread counts runs held: one take a queue
            queues = [q for q in queues if q not in flying]
            if not queues:
                return 0, POLL_S  # (a run of the take in flight ending cuts it short)
        if not queues:
            self.busy.clear()
            return 0, IDLE_POLL_S
        rooms = await self._rooms(queues, free)
        queues = [q for q in queues if rooms.get(q, free) > 0]
        wide = [q for q in queues if q in self.limited.limits]
        permits: dict[str, list[str]] = {}
        if wide:  # queue-wide permits first: take no more than were granted
            got = await self.limited.acquire({q: rooms.get(q, free) for q in wide})
            permits = {q: list(g.members) for q, g in got.items() if g.granted}
        caps = {q: room for q, room in rooms.items() if room < free}
        caps.update({q: len(members) for q, members in permits.items()})
        asks = [(s, q, n) for s, q, n in self._asks(
                    free, [q for q in queues if q not in wide or q in permits], caps)
                if self._may(s, q)]
        try:
            started, rate_wait_ms = await self._take(asks, permits, workers)
        finally:
            for q, members in permits.items():  # not used (or the take failed): back at once
                for member in members:
                    self.limited.give_back(q, member)
        # Took all it asked, a share or more: the keys hold more, the followers take too
        # (not for a slot or two freed at a time: their passes would mostly find nothing).
        asked = sum(n for _, _, n in asks)
        (self.busy.set if started >= max(asked, share) else self.busy.clear)()
        sleep_s = 0.0 if started else POLL_S
        if rate_wait_ms >= 0:  # a key's rate: its next token, if sooner
            sleep_s = min(sleep_s, max(0.001, rate_wait_ms / 1000))
        return started, sleep_s

    async def _rooms(self, queues: list[str], free: int) -> dict[str, int]:
        """How many of the free slots each queue's take may ask for: those the turn of its
        unkeyed entries (turns.py) does not keep for them."""
        w = self.claims
        if not w.reader.backlog:
            return {}
        stale = w.turns.stale(queues, w.clock.monotonic())
        if stale:
            await self._ring_lengths(stale)
        if not w.turns.waiting:
            return {}
        rooms = {q: w.turns.keyed_room(q, free) for q in queues}
        if any(room < free for room in rooms.values()):
            w.slots.capacity.set()  # a plain claim held back for them may go
        return rooms

    def _may(self, shard: int, queue: str) -> bool:
        """May a take of the queue on the shard go now? Not while a re-ask of it flies, nor
        a re-ask while another take of it flies (the module's header)."""
        return (shard, queue) not in self._asking and not (
            (shard, queue) in self._again and self._flying[shard, queue])

    async def _queues(self, lead: bool) -> list[str]:
        """The queues a pass takes: those found lately, and for the first loop those asked
        again and the cold ones whose ring holds a key (_queued)."""
        w = self.claims
        mono = w.clock.monotonic()
        again = {q for _, q in self._again} if lead else set()  # asked whatever rings hold
        hot = [q for q in w.config.queues
               if q in again or mono - self._found.get(q, -IDLE_AFTER_S) < HOT_S]
        cold = [q for q in w.config.queues if q not in hot] if lead else []
        return hot + (await self._queued(cold) if cold else [])

    async def _queued(self, queues: Sequence[str], keep: bool = False) -> list[str]:
        """The queues whose ring holds a key on some shard: asked without holding run slots
        or permits, so that while a queue has no keyed slot the worker's other claims never
        wait on this loop, nor does a rate lose tokens to it. `keep`: note which shards hold
        keys, for the takes that follow (_holding)."""
        w = self.claims
        pipe = transport.pipeline(w.redis)
        for q in queues:
            for s in range(self.shards):
                pipe.llen(w.keys.key_ring(s, q))
        lengths = await transport.send(pipe)
        mono = w.clock.monotonic()
        found = []
        for i, q in enumerate(queues):
            each = lengths[i * self.shards:(i + 1) * self.shards]
            if keep:  # (_holding: only while the unkeyed jobs take their turn)
                self._rings[q] = (mono, each)
            keys = sum(each)
            w.turns.rings_read(q, keys, mono)
            if keys:
                found.append(q)
        return found

    async def _ring_lengths(self, queues: Sequence[str]) -> None:
        """Read how many keys the queues' rings hold (what the unkeyed jobs' share counts),
        and in which shards."""
        await self._queued(queues, keep=True)

    async def _take(self, asks: list[tuple[int, str, int]], permits: dict[str, list[str]],
                    workers: int | None) -> tuple[int, int]:
        """Send the takes and start what they granted: (how many started, the least wait
        for a key's rate token, -1 for none)."""
        if not asks:
            return 0, -1
        w = self.claims
        tracer = w.execution.tracer
        now = w.clock.now_ms()
        # The spread: with several workers, a per-key limit is shared out among them
        # (take.lua), counting the runs this one holds of each key.
        mine = {q: self.held.mine(q) for q in {q for _, q, _ in asks}} if workers else {}
        asking = {(s, q) for s, q, _ in asks if (s, q) in self._again}
        calls = [scripts.take(w.keys.prefix(s), now, w.worker_id, w.lease_ms, q, n, tracer,
                              (s, q) in self._again, q in permits or not w.wide_limits,
                              workers, mine.get(q))
                 for s, q, n in asks]
        deadline = w.clock.monotonic() + w.config.lease_s
        w.slots.claiming += sum(n for _, _, n in asks)
        asked: Counter[str] = Counter()
        for _, q, n in asks:
            asked[q] += n
        w.turns.keyed.update(asked)  # (its share counts the slots being taken)
        self._flying.update((s, q) for s, q, _ in asks)
        self._asking |= asking
        try:
            answers, unconfirmed = await w.send(calls, False)
        except BaseException:
            # The takes may have run and their reply been lost: the slots they granted are
            # running under this worker. The next take of each asks for them again.
            self._again.update((s, q) for s, q, _ in asks)
            raise
        finally:
            # Slots held for the take and not used are free again: wake a loop that waited
            # on them.
            w.slots.claiming -= sum(n for _, _, n in asks)
            w.turns.keyed.subtract(asked)
            self._flying.subtract((s, q) for s, q, _ in asks)
            self._flying = +self._flying
            self._asking -= asking
            w.slots.capacity.set()
        granted, rate_wait_ms = [], -1
        mono = w.clock.monotonic()
        refused = False
        keys_of: dict[str, tuple[str, str]] = {}  # slot id -> (queue, key), of this take
        full: set[str] = set()  # queues a shard of which granted all it was asked
        seen: dict[str, set[bytes]] = {}  # queue -> the keys granted
        # Only a take that carried the re-ask answers it: one sent before another take's
        # reply was lost did not ask again.
        self._again -= asking
        for (s, q, n), reply in zip(asks, answers, strict=True):
            entries, flat, wait_ms, limited, keys = replies.taken(reply, q)
            refused = refused or limited
            if workers:  # (only a spread counts the runs of each key)
                for (_, _, slot_id), key in zip(entries, keys, strict=True):
                    keys_of[slot_id] = (q, key.decode())
            if entries:
                self._found[q] = mono
                seen.setdefault(q, set()).update(keys)
                if len(entries) >= n:
                    full.add(q)
            if wait_ms >= 0:
                rate_wait_ms = min(wait_ms, rate_wait_ms) if rate_wait_ms >= 0 else wait_ms
            grants = replies.claimed(flat, entries) if tracer is None \
                else tracer.claimed(flat, entries)
            if len(set(keys)) > 1:
                entries, grants = _alternate(keys, entries, grants)
            granted.append((s, entries, grants))
        w.turns.took(asked, full, seen)
        started = w.start(granted, now, deadline, unconfirmed, w.reader,
                          on_start=lambda run: self._on_start(run, permits, keys_of))
        if refused:  # a queue-wide limit not read yet: read it, take with permits next pass
            await self.limited.refresh()
        return started, rate_wait_ms

    def _on_start(self, run: Run, permits: dict[str, list[str]],
                  keys_of: dict[str, tuple[str, str]]) -> None:
        key = keys_of.get(run.slot_id)
        if key is not None:
            self.held.add(run.slot_id, *key)
        queue = run.lane
        self.claims.turns.keyed_start(queue)
        held = permits.get(queue)
        if held:  # a queue-wide permit goes with it, given back when it ends
            run.permit = (queue, held.pop())
            run.on_end = self._on_end_limited
        else:
            run.on_end = self._on_end

    def _on_end(self, run: Run) -> None:
        self.held.remove(run.slot_id)
        self.claims.turns.keyed_end(run.lane)
        self.ended.set()

    def _on_end_limited(self, run: Run) -> None:
        self.limited.on_end(run)
        self.held.remove(run.slot_id)
        self.claims.turns.keyed_end(run.lane)
        self.ended.set()

    def delay(self, result: Any) -> float:
        return self._sleep_s

    async def sleep(self, seconds: float) -> None:
        """Cut short when a run of ours ends (its key may have room again) or, after a pass
        that worked, when a key enters one of the worker's rings; after an error, a pause."""
        if self._wake_ok:
            try:
                if await self.wake.wait(seconds, self.ended, self.claims.turns.yielded,
                                        self._stop):
                    self._entered()
                return
            except Exception as exc:  # (a failed read: the next pass finds out the rest)
                self._wake_ok = False
                self.errors.error(exc, " (waiting for keys)")
        await pause_until(self.ended, self._stop, seconds)

    def _entered(self) -> None:
        """A key entered a ring of these queues: the next pass takes them without a probe
        (its round trip would come before the take's: a free key's job would start a round
        trip later than an unkeyed one), and asks every shard (the key's may be one read
        empty)."""
        mono = self.claims.clock.monotonic()
        for q in self.wake.entered:
            self._found[q] = mono
            self._rings.pop(q, None)
        self.wake.entered.clear()

    async def run(self) -> None:
        followers = [asyncio.create_task(KeyedFollower(self).run(), name=f"claim-keyed-{i}")
                     for i in range(1, self.loops)]
        try:
            await super().run()
        finally:
            for task in followers:
                task.cancel()
            if followers:  # (a take cut short hands its outcomes back first: claims.py)
                await asyncio.wait(followers, timeout=1.0)
            await self.wake.close()


class KeyedFollower(Service):
    """A further take loop of a worker's keyed claims (the module's header): it takes while
    the last pass took all it asked for, a share at least, and otherwise waits for that."""

    what = "claiming keyed slots"
    log = log

    def __init__(self, first: KeyedClaims) -> None:
        super().__init__(stop=first.claims.stopping, errors=first.errors)
        self.first = first

    async def ready(self) -> None:
        while not self.finished():
            if self.first.busy.is_set():
                await self.first.claims.slots.wait(self.finished)
                return
            await pause_until(self.first.busy, self._stop, IDLE_POLL_S)

    async def run_once(self) -> int:
        started, _ = await self.first.take_pass(lead=False)
        return started

    def delay(self, result: Any) -> float:
        return 0.0  # (ready() waits for the first loop's busy passes)


def _alternate(keys: list[bytes], entries: list[Any], grants: list[Any]
               ) -> tuple[list[Any], list[Any]]:
    """A take's grants in the order the worker starts them: one of each key in turn, as the
    turns went, rather than a key's whole share before the next key's (take.lua gives each
    key its share of the call in one turn): a tenant with a few jobs does not wait for the
    start of a flood's share."""
    by_key: dict[bytes, list[int]] = {}
    for i, key in enumerate(keys):
        by_key.setdefault(key, []).append(i)
    order = [i for group in itertools.zip_longest(*by_key.values()) for i in group
             if i is not None]
    return [entries[i] for i in order], [grants[i] for i in order]
