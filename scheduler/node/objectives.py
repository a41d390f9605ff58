"""Keeps each shard's list of schedules behind their objective (a scheduler node's loop).

A recurring job's objective is to start each occurrence within its `on_time_within` of its
fire time (scheduler/core/ledger.py), for a target share of its occurrences over a window
(scheduler/core/objective.py: 0.99 of the last hour unless the node is told otherwise).
`sched status`, the console and the exporter name the schedules that miss it, and must stay
cheap with tens of thousands of schedules: so this loop decides, and they read only the head
of a per-shard zset, `behind` (job id -> when the node saw it fall behind, ms).

`run_once()` looks at up to `batch` cron jobs per owned shard, round-robin over the shard's
`cron` index (ZSCAN: every job present throughout a sweep is seen once per sweep, whatever
their watermarks do meanwhile). For each it counts the occurrences decided since it last
looked (its `ontime` hash's `through`): those with a slot from the slot (started on time,
started or still waiting past the objective: late; skipped: overlap; cancelled: the fire
ledger's reason), those without one from the fire ledger, in fire-time order up to the first
still waiting within its objective (the next look starts there). The counts go to the job's
`ontime` hash by time bucket; a job whose window's share is below the target enters
`behind` (keeping the score of when it first fell behind), one at or above it (or whose
window decided nothing) leaves it. Entries of jobs no longer in the cron index (deleted,
ended) are dropped, from a random sample of `behind` at each pass.

The node counts, not claim.lua or promote.lua: they would need the job's objective and an
extra write on every start of the hot path, and this loop reads each schedule's recent
slots anyway. The share trails the present by up to a sweep.

Reads and writes go through plain commands, not a script: a stale answer is repaired at the
next sweep, and nothing else writes the keys. Two nodes that both hold a shard for a moment
(its lease passing) may count an occurrence twice; the window forgets it within the hour.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio

import scheduler.redis.transport as transport
from scheduler.core import objective
from scheduler.core.keys import Keys, split_slot_id
from scheduler.core.ledger import Reason, parse_entry, start_lag_ms
from scheduler.core.models import DEFAULT_ON_TIME_MS, Slot, slot_from_hash, whole_number
from scheduler.core.states import SlotStatus
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service

log = logging.getLogger("scheduler.node.objectives")

BATCH = 200  # cron jobs looked at per shard per pass
COUNTED = 100  # most occurrences of one job counted per look (the next look goes on)
INTERVAL_S = 1.0  # between passes once a sweep of the cron index ended
BETWEEN_S = 0.25  # between passes within a sweep: ~BATCH*4 jobs a second per shard at most
_WAITING = {SlotStatus.SCHEDULED, SlotStatus.QUEUED}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def verdict(slots: Sequence[Slot], on_time_ms: int, now_ms: int) -> bool | None:
    """True when the most recent decided occurrence (most recent first in `slots`) missed
    the objective, False when it met it, None when none is decided yet."""
    for slot in slots:
        lag = start_lag_ms(slot)
        if lag is not None:
            return lag > on_time_ms
        if slot.status in _WAITING:
            if now_ms - slot.fire_ms > on_time_ms:
                return True
            continue  # within its objective still: the one before decides
        # skipped, or cancelled before it started: not a miss of the schedule
    return None


def counted_as(slot: Slot, reasons: dict[int, Reason], on_time_ms: int, now_ms: int
               ) -> str | None:
    """What an occurrence with a slot counts as (objective.py's kinds), None while it waits
    within its objective. `reasons`: the fire ledger's entries by fire time."""
    missed = verdict([slot], on_time_ms, now_ms)
    if missed is not None:
        return objective.LATE if missed else objective.ON_TIME
    if slot.status in _WAITING:
        return None
    if slot.status is SlotStatus.SKIPPED:
        return Reason.OVERLAP.value
    if slot.status is SlotStatus.CANCELLED:
        return reasons.get(slot.fire_ms, Reason.CANCELLED).value
    return objective.LATE  # it ended with no start recorded


def count(slots: Sequence[Slot], reasons: dict[int, Reason], on_time_ms: int, now_ms: int,
          horizon_ms: int) -> tuple[list[tuple[int, str]], int | None]:
    """The occurrences decided, in fire-time order, up to the first still undecided or
    `horizon_ms` (beyond it, what was read may be cut): ([(fire_ms, kind)], the fire time
    of the first undecided, None for none before the horizon). A ledger entry without a
    slot counts its reason."""
    by_fire: dict[int, Slot | Reason] = {f: reason for f, reason in reasons.items()}
    by_fire.update({s.fire_ms: s for s in slots})
    out: list[tuple[int, str]] = []
    for fire_ms in sorted(by_fire):
        if fire_ms > horizon_ms:
            break
        what = by_fire[fire_ms]
        kind = what.value if isinstance(what, Reason) else counted_as(what, reasons, on_time_ms,
                                                                      now_ms)
        if kind is None:
            return out, fire_ms
        out.append((fire_ms, kind))
    return out, None


class ObjectiveWatch(Service):
    what = "objective watch"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, shards: Sequence[int],
                 clock: Clock, *, batch: int = BATCH, interval_s: float = INTERVAL_S,
                 target: float = objective.DEFAULT_ON_TIME_TARGET,
                 window_s: float = objective.DEFAULT_OBJECTIVE_WINDOW_S) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.shards = list(shards)  # the shards this node owns
        self.clock = clock
        self.batch = batch
        self.interval_s = interval_s
        self.target = target
        self.window_ms = int(window_s * 1000)
        self._cursors: dict[int, int] = {}  # per shard: the cron index's ZSCAN cursor
        # per shard: job id -> when its next occurrence is decided (ms); a job is read only
        # from then (at most a bucket later), so a per-minute schedule costs one read a
        # minute, not one a sweep
        self._next: dict[int, dict[str, int]] = {}
        self.looked = 0  # jobs read in the last pass

    async def run_once(self) -> int:
        """One batch per owned shard; returns how many shards are mid-sweep (0: go idle)."""
        await resync(self.clock, self.redis)
        now = self.clock.now_ms()
        busy = self.looked = 0
        for shard in set(self._next) - set(self.shards):
            del self._next[shard]  # another node counts there meanwhile
        for shard in list(self.shards):
            busy += await self._shard(shard, now)
        return busy

    async def _shard(self, shard: int, now: int) -> int:
        cron, behind = self.keys.cron(shard), self.keys.behind(shard)
        cursor, found = await transport.call(self.redis, "zscan", cron,
                                             self._cursors.get(shard, 0), None, self.batch)
        self._cursors[shard] = int(cursor)
        nexts = self._next.setdefault(shard, {})
        marks = {_text(m): int(score) for m, score in found}  # job -> its watermark
        job_ids = [j for j in marks if nexts.get(j, 0) <= now]
        self.looked += len(job_ids)
        pipe = transport.pipeline(self.redis)
        for job_id in job_ids:
            pipe.hget(self.keys.job(shard, job_id), "on_time_ms")
            pipe.hgetall(self.keys.ontime(shard, job_id))
        pipe.zrandmember(behind, self.batch)  # a sample: bounded, and in time every entry
        replies = await transport.send(pipe)
        listed = [_text(m) for m in replies[-1]]
        on_time = {j: whole_number(replies[2 * i] or b"") or DEFAULT_ON_TIME_MS
                   for i, j in enumerate(job_ids)}
        counts = {j: replies[2 * i + 1] for i, j in enumerate(job_ids)}
        # Each job from the occurrence after the last it counted (a job first seen: the
        # window's start); past now, only to learn when its next occurrence fires.
        since = {j: whole_number(counts[j].get(objective.THROUGH.encode(), b""))
                 or now - self.window_ms for j in job_ids}
        pipe = transport.pipeline(self.redis)
        for job_id in job_ids:
            low = f"({since[job_id]}"
            pipe.zrangebyscore(self.keys.runs(shard, job_id), low, "+inf", start=0,
                               num=COUNTED)
            pipe.zrangebyscore(self.keys.fires(shard, job_id), low, now, start=0, num=COUNTED)
        replies = await transport.send(pipe) if job_ids else []
        runs = {j: [_text(s) for s in replies[2 * i]] for i, j in enumerate(job_ids)}
        entries = {j: [e for e in map(parse_entry, replies[2 * i + 1]) if e]
                   for i, j in enumerate(job_ids)}
        pipe = transport.pipeline(self.redis)
        for job_id in job_ids:
            for slot_id in runs[job_id]:
                if split_slot_id(slot_id)[1] <= now:
                    pipe.hgetall(self.keys.slot(shard, slot_id))
        if listed:  # entries whose job left the cron index
            pipe.zmscore(cron, listed)
        raws = iter(await transport.send(pipe) if len(pipe) else [])
        verdicts: dict[str, bool | None] = {}
        pipe = transport.pipeline(self.redis)
        for job_id in job_ids:
            past = [s for s in runs[job_id] if split_slot_id(s)[1] <= now]
            slots = [slot_from_hash(s, r) for s, r in ((s, next(raws)) for s in past) if r]
            verdicts[job_id], nexts[job_id] = self._note(
                pipe, shard, job_id, slots, runs[job_id], entries[job_id], on_time[job_id],
                counts[job_id], now, marks[job_id])
        late = [j for j, v in verdicts.items() if v]
        met = [j for j, v in verdicts.items() if v is False]
        gone = [j for j, score in zip(listed, next(raws), strict=True)
                if score is None] if listed else []
        if late:
            pipe.zadd(behind, {j: now for j in late}, nx=True)
        if met or gone:
            pipe.zrem(behind, *met, *gone)
        if len(pipe):
            await transport.send(pipe)
        if not self._cursors[shard]:  # a sweep ended: forget the jobs due anyway (or gone)
            self._next[shard] = {j: t for j, t in nexts.items() if t > now}
        return 1 if self._cursors[shard] else 0

    def _note(self, pipe: Any, shard: int, job_id: str, slots: list[Slot], read: list[str],
              entries: list[tuple[int, Reason, str]], on_time_ms: int,
              held: dict[bytes, bytes], now: int, watermark: int) -> tuple[bool, int]:
        """Queue on `pipe` the counts of a job's occurrences decided since its last look
        (`read`: its slot ids from there, the first to come included); whether its window
        now misses the target, and when it may have one more to count."""
        reasons = {fire: reason for fire, reason, _ in entries}
        fires = [split_slot_id(s)[1] for s in read]
        # A read cut at COUNTED ends where it was cut: the rest is the next look's.
        cut = len(read) == COUNTED or len(entries) == COUNTED
        horizon = min([now] + fires[-1:] * (len(read) == COUNTED)
                      + [f for f, _, _ in entries[-1:] if len(entries) == COUNTED])
        decided, waiting = count(slots, reasons, on_time_ms, now, horizon)
        through = decided[-1][0] if decided else None
        window = objective.totals(held, now, self.window_ms)
        key, width = self.keys.ontime(shard, job_id), objective.bucket_ms(self.window_ms)
        for fire_ms, kind in decided:
            pipe.hincrby(key, objective.field(fire_ms, kind, width), 1)
            if fire_ms > now - self.window_ms:
                window[kind] = window.get(kind, 0) + 1
        old = objective.expired(held, now, self.window_ms)
        if old:
            pipe.hdel(key, *old)
        if through is not None:
            pipe.hset(key, objective.THROUGH, through)
            pipe.hset(key, mapping={objective.WINDOW: self.window_ms,
                                    objective.TARGET: repr(self.target)})
            # a job no longer counted (ended, deleted) leaves no key behind for long
            pipe.pexpire(key, 2 * self.window_ms)
        # Read again once the next occurrence is decided whatever it does: past its
        # objective it started (its lag says whether on time) or is late. The waiting one's,
        # else the first to come's (at the watermark at the latest). The window moves a
        # bucket at a time: read again by then, whatever comes.
        if cut:
            due = now
        elif waiting is not None:
            due = waiting + on_time_ms + 1
        else:
            due = min([f for f in fires if f > now] + [watermark]) + on_time_ms + 1
        return objective.is_behind(window, self.target), min(due, now + width)

    def delay(self, busy: int) -> float:
        return BETWEEN_S if busy else self.interval_s
