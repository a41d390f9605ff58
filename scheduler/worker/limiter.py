"""A worker's side of queue-wide limits (scheduler/core/limits.py): permits, and the claims
of limited queues.

A queue without a limit costs nothing here: the worker's main claim loops read and claim it as
always. A queue with a limit is read by `LimitedClaims` instead, over a reader of its own, and
each entry is claimed only with a permit from acquire.lua (the one global count, on one Redis
node even in a Cluster: its keys share the hash tag `{lim:<queue>}`). Which queues are limited
is read every REFRESH_S, and at once when a claim is refused for a limit not read yet (claim.lua
and take.lua answer LIMITED: the scripts hold the limits, scheduler/core/limits.py has the
rule); the limit itself is never this worker's copy: acquire.lua reads it. A queue whose
limit was cleared is read here for one more block beside the main loops (refresh()), so a
job submitted after the clear starts at once. So:

  * slots over the limit stay queued in their streams or in this loop's hands, never failed;
    entries read but not granted a permit are handed back (requeue) after HOLD_S, so another
    worker can start them;
  * a permit is taken before a run starts and given back when it ends (`Run.on_end`), so at
    most `concurrency` handlers of the queue run at once, measured from their own start and
    end times; a crashed worker's permits expire with its lease, and the heartbeat of this
    loop renews the ones in use every lease/3;
  * the rate is a token bucket in acquire.lua: a grant held back by it says how long until
    the next token, and the loop sleeps that long, but never past REFRESH_S nor past the
    moment its entries in hand are due back: a slow rate (one an hour) must not keep the
    loop from seeing its limit changed or cleared, nor its entries from going back.

Why permits before the claim rather than a count inside claim.lua: a claim script runs on one
shard, and a queue-wide count lives in one key, which on a Cluster is on another node; and an
entry claim.lua refused for the limit would sit delivered in one worker's pending list. The
acquire round trip is paid by limited queues only (its cost per job: `python -m bench
burndown --limit N`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import scheduler.core.limits as limits
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.keys import queue_of
from scheduler.redis.service import ErrorLog, Service, pause_until
from scheduler.scripts.replies import Acquired
from scheduler.worker.claims import Claims
from scheduler.worker.inflight import Run
from scheduler.worker.reader import Reader

log = logging.getLogger("scheduler.worker.worker")

HOLD_S = 1.0  # entries read without a permit for this long go back to their streams
POLL_S = 0.05  # without a permit, look again this often (or sooner, when a run of ours ends)
REFRESH_S = 1.0  # how often the limits are read again


class LimitedClaims(Service):
    """The claims of a worker's limited queues (all of them: one read, one round trip of
    acquire calls, one claim per pass)."""

    what = "claiming limited queues"
    log = log

    def __init__(self, claims: Claims, errors: ErrorLog) -> None:
        # The worker's claims: its run slots, its main reader (which stops reading the
        # limited queues) and the claim round trip, shared with this loop.
        super().__init__(stop=claims.stopping, errors=errors)
        self.claims = claims
        self.keys = claims.keys
        self.shards = 0
        self.limits: dict[str, limits.QueueLimit] = {}  # this worker's queues limited as a whole
        # Queues whose limit was cleared, still read here until then (monotonic): refresh().
        self.leaving: dict[str, float] = {}
        self._reading: set[str] = set()  # the queues this loop's reader reads
        self.reader: Reader | None = None
        self.held: dict[str, set[str]] = {}  # queue -> permits of runs in flight
        self.returning: dict[str, list[str]] = {}  # queue -> permits to give back
        self.ended = asyncio.Event()  # a limited run of ours ended: a permit is free
        self._calls = itertools.count()
        self._refreshed = -REFRESH_S
        self._renewed = 0.0
        self._waiting_since: float | None = None  # entries in hand, no permit since
        self._sleep_s = 0.0
        self._refreshing = asyncio.Lock()  # this loop, the claim loops and the keyed claims
        claims.on_limited = self.refresh

    # --- the limits ------------------------------------------------------------------------

    async def open(self, shards: int) -> None:
        """At the worker's setup, once it knows the shard count: read the limits (and write
        the scripts' copies of any set before the scripts read their own: copy_missing)."""
        self.shards = shards
        await self.refresh()
        raw: Any = await transport.call(self.claims.redis, "hgetall", self.keys.limits)
        await self.copy_missing(limits.parse(raw))

    async def copy_missing(self, found: dict[str, limits.QueueLimit]) -> list[str]:
        """Limits in the `limits` hash whose copies the scripts read are missing (set by a
        version whose set_queue_limit wrote the hash alone; the scripts would claim as if
        there were none): written now, by the first worker to start. Returns those queues.
        A set_queue_limit of the same queue at that very moment may be undone by it."""
        keys, queues = self.keys, sorted(found)
        if not queues:
            return []
        pipe = transport.pipeline(self.claims.redis)
        for q in queues:
            pipe.exists(keys.limit(q))
            pipe.sismember(keys.limited(0), q)
            pipe.exists(keys.key_limit(0, q))
        have = await transport.send(pipe)
        missing = [q for i, q in enumerate(queues)
                   if (found[q].queue_wide, found[q].queue_wide, found[q].per_key)
                   != tuple(bool(x) for x in have[3 * i:3 * i + 3])]
        if missing:
            pipe = transport.pipeline(self.claims.redis)
            for q in missing:
                limits.write_copies(pipe, keys, self.shards, q, found[q])
            await transport.send(pipe)
            log.warning("queue limits of %s written where the claim scripts read them (set "
                        "by an older version)", ", ".join(missing))
        return missing

    async def refresh(self) -> bool:
        """Read the limits; True when the set of limited queues changed (the worker then
        reads them here, and no longer in its main loops). Also called by a claim refused
        for a limit not read yet (Claims.on_limited, keyed.py).

        A queue whose limit was cleared moves to the main loops at once, but this loop's
        reader goes on reading it for a block (`leaving`): the main loops' reads sent before
        still block without it, and a job submitted meanwhile would wait for them to end.
        Its entries read here get a permit at once (acquire.lua: no limit, no wait)."""
        async with self._refreshing:
            # The worker's clients decode nothing: keys and values are bytes.
            raw: Any = await transport.call(self.claims.redis, "hgetall", self.keys.limits)
            mine = {q: lim for q, lim in limits.parse(raw).items()
                    if q in self.claims.config.queues and lim.queue_wide}
            now = self.claims.clock.monotonic()
            changed = set(mine) != set(self.limits)
            for q in set(self.limits) - set(mine):
                self.leaving[q] = now + self.claims.block_ms / 1000
            self.leaving = {q: t for q, t in self.leaving.items() if q not in mine and t > now}
            reading = set(mine) | set(self.leaving)
            self.limits = mine
            self._refreshed = now
            if changed or reading != self._reading:
                await self._reopen(reading, changed)
                self.ended.set()  # this loop may be asleep: the new reader starts now
            return changed

    async def _reopen(self, reading: set[str], main: bool) -> None:
        """This loop reads `reading` (the limited queues and those leaving); the main loops
        read the rest when `main` (the limited queues changed)."""
        w = self.claims
        if reading != self._reading:
            if self.reader is not None:
                await self.reader.settle()
                if self.reader.in_hand():
                    await self.reader.requeue_backlog(w.clock.now_ms())
            self.reader = None
            self._reading = reading
            if reading:
                self.reader = Reader(w.redis, self.keys, w.worker_id, w.config.batch,
                                     w.config.events_maxlen, w.clock, w.reader.hold_cap)
                await self.reader.open(self.shards, sorted(reading))
        if main:
            log.info("queue limits: %s", "; ".join(f"{q} {lim.text()}"
                                                   for q, lim in sorted(self.limits.items()))
                     or "none")
            await w.reader.open(self.shards,
                                [q for q in w.config.queues if q not in self.limits])

    # --- permits ---------------------------------------------------------------------------

    def give_back(self, queue: str, member: str) -> None:
        held = self.held.get(queue)
        if held is not None and member in held:
            held.discard(member)
            self.returning.setdefault(queue, []).append(member)
        self.ended.set()

    def on_end(self, run: Run) -> None:
        queue, member = run.permit
        self.give_back(queue, member)

    async def acquire(self, wants: dict[str, int]) -> dict[str, Acquired]:
        w = self.claims
        now = w.clock.now_ms()
        queues = list(wants) + [q for q in self.returning if q not in wants]
        back = {q: self.returning.pop(q, []) for q in queues}
        calls = [scripts.acquire(self.keys.permits(q), self.keys.bucket(q), self.keys.limit(q),
                                 now, wants.get(q, 0), w.lease_ms,
                                 f"{w.worker_id}:{next(self._calls)}", back[q])
                 for q in queues]
        try:
            replies = await scripts.run_async(w.redis, calls)
        except BaseException:
            # The give-backs may not have run: send them again next pass (ZREM twice is
            # harmless), rather than leave those permits to expire with the lease.
            for q, members in back.items():
                if members:
                    self.returning.setdefault(q, []).extend(members)
            raise
        out = {q: Acquired.decode(r) for q, r in zip(queues, replies, strict=True)}
        for q, got in out.items():
            if got.granted and got.members[0]:  # "" without a concurrency limit: none held
                self.held.setdefault(q, set()).update(got.members)
        return out

    async def _renew(self) -> None:
        """Every lease/3: the permits of runs in flight expire a lease from now."""
        w = self.claims
        expires = w.clock.now_ms() + w.lease_ms
        pipe = transport.pipeline(w.redis)
        for q, members in self.held.items():
            if members:
                pipe.zadd(self.keys.permits(q), dict.fromkeys(members, expires), xx=True)
        await transport.send(pipe)
        self._renewed = w.clock.monotonic()

    # --- the loop --------------------------------------------------------------------------

    async def ready(self) -> None:
        await self.claims.slots.wait(self.finished)

    async def run_once(self, block: bool = True) -> int:
        """One pass: read the limited queues (blocking up to REFRESH_S unless `block` is
        False, as the testing mode's passes read), take the permits they get, claim and start
        those entries, keep the rest in hand."""
        w = self.claims
        self.ended.clear()
        mono = w.clock.monotonic()
        if mono - self._refreshed >= REFRESH_S:
            await self.refresh()
        if mono - self._renewed >= w.lease_ms / 3000 and any(self.held.values()):
            await self._renew()
        reader = self.reader
        if reader is None:
            if self.returning:
                await self.acquire({})
            self._sleep_s = REFRESH_S
            return 0
        if (reader.backlog and self._waiting_since is not None
                and mono - self._waiting_since >= HOLD_S):
            await reader.requeue_backlog(w.clock.now_ms(), held=False)  # another worker's turn
            self._waiting_since = None
        if not reader.ready():
            await reader.read(max(1, min(w.slots.free(), w.config.batch)),
                              min(w.block_ms, int(REFRESH_S * 1000)) if block else None)
        entries = reader.take(len(reader.backlog))
        by_queue: dict[str, list[Any]] = {}
        for entry in entries:
            by_queue.setdefault(queue_of(entry[1]), []).append(entry)
        free = w.slots.free()
        wants = {}
        for q, mine in by_queue.items():
            wants[q] = min(len(mine), max(0, free))
            free -= wants[q]
        got = await self.acquire(wants) if wants or self.returning else {}
        start, keep = [], []
        permits: dict[str, tuple[str, str]] = {}  # slot id -> (queue, permit)
        for q, mine in by_queue.items():
            granted = got[q].granted if q in got else 0
            start += mine[:granted]
            keep += mine[granted:]
            for entry, member in zip(mine[:granted], got[q].members, strict=False):
                permits[entry[3]] = (q, member)
        started = await self._claim(reader, start, permits) if start else 0
        reader.give_back(keep)
        if reader is not self.reader:
            # The limits were read again meanwhile (a claim elsewhere was refused for a new
            # one) and another reader took over: what this one holds goes back to its streams.
            await reader.requeue_backlog(w.clock.now_ms())
            keep = []
        self._pace(got, keep, mono)
        return started

    async def _claim(self, reader: Reader, entries: list[Any],
                     permits: dict[str, tuple[str, str]]) -> int:
        slots = self.claims.slots

        def on_start(run: Run) -> None:
            run.permit = permits.pop(run.slot_id)
            if run.permit[1]:
                run.on_end = self.on_end

        by_shard: dict[int, list[tuple[str, bytes, str]]] = {}
        for shard, lane, msg_id, slot_id in entries:
            by_shard.setdefault(shard, []).append((lane, msg_id, slot_id))
        slots.claiming += len(entries)
        try:
            started: int = await self.claims.claim(by_shard, on_start=on_start,
                                                   reader=reader, permitted=True)
        except BaseException:
            reader.give_back(entries)
            reader.must_recover = True
            raise
        finally:
            slots.claiming -= len(entries)
            # Permits of entries not started (gone, cancelled, claimed elsewhere) go back.
            for queue, member in permits.values():
                self.give_back(queue, member)
        return started

    def _pace(self, got: dict[str, Acquired], keep: list[Any], mono: float) -> None:
        """How long to wait before the next pass: none while permits come; the rate's own
        wait, or POLL_S, while entries wait without one (handed back after HOLD_S)."""
        if not keep:
            self._waiting_since, self._sleep_s = None, 0.0
            return
        if self._waiting_since is None:
            self._waiting_since = mono
        waits = [g.wait_ms / 1000 for g in got.values() if g.wait_ms > 0]
        # Awake at least every REFRESH_S, and when the entries in hand are due back.
        due_back = HOLD_S - (mono - self._waiting_since)
        self._sleep_s = max(0.001, min([*waits, REFRESH_S, due_back]) if waits else POLL_S)

    def delay(self, result: Any) -> float:
        return self._sleep_s

    def next_try_ms(self, now_ms: int) -> int | None:
        """When the next pass has a permit to ask for, for entries in hand that the rate (or
        the concurrency) held back: None with none in hand."""
        if self.reader is None or not self.reader.backlog:
            return None
        return now_ms + max(1, round(self._sleep_s * 1000))

    async def sleep(self, seconds: float) -> None:
        """Cut short when a limited run of ours ends (its permit is free at once)."""
        await pause_until(self.ended, self._stop, seconds)

    async def hand_back(self) -> None:
        """At shutdown: entries in hand go back to their streams; permits of runs that end
        later are given back as they end (the worker drains first) and flushed here."""
        reader = self.reader
        if reader is not None:
            await reader.settle()
            if reader.in_hand():
                await reader.requeue_backlog(self.claims.clock.now_ms())
        if self.returning:
            await self.acquire({})
