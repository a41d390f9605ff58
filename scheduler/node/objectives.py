"""Keeps each shard's list of schedules behind their objective (a scheduler node's loop).

A recurring job's objective is to start each occurrence within its `on_time_within` of its
fire time (scheduler/core/ledger.py). `sched status`, the console and the exporter name the
schedules that miss it, and must stay cheap with tens of thousands of schedules: so this
loop decides, and they read only the head of a per-shard zset, `behind` (job id -> when the
node saw it fall behind, ms).

`run_once()` looks at up to `batch` cron jobs per owned shard, round-robin over the shard's
`cron` index (ZSCAN: every job present throughout a sweep is seen once per sweep, whatever
their watermarks do meanwhile). For each it reads its last LOOKED_AT slots whose fire time
is past and takes the most recent one that is decided: started (its start lag says whether
it was on time) or still waiting past its objective (late). Skipped (overlap) and cancelled
slots are the schedule's own policy or an operator's, not a miss, and are passed over. A
job whose decided occurrence missed the objective enters `behind` (keeping the score of
when it first fell behind); one whose occurrence started on time leaves it. So a schedule
whose queue no worker reads enters within a sweep, and leaves at its first occurrence
started on time once a worker catches up. Entries of jobs no longer in the cron index
(deleted, ended) are dropped, from a random sample of `behind` at each pass.

Reads and writes go through plain commands, not a script: a stale answer is repaired at the
next sweep, and nothing else writes the key.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio

import scheduler.redis.transport as transport
from scheduler.core.keys import Keys
from scheduler.core.ledger import start_lag_ms
from scheduler.core.models import DEFAULT_ON_TIME_MS, slot_from_hash, whole_number
from scheduler.core.states import SlotStatus
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service

log = logging.getLogger("scheduler.node.objectives")

BATCH = 200  # cron jobs looked at per shard per pass
LOOKED_AT = 20  # a job's most recent past slots read to find its latest decided occurrence
FIRST_READ = 2  # of them, read first: the rest only for a job those leave undecided
INTERVAL_S = 1.0  # between passes once a sweep of the cron index ended
BETWEEN_S = 0.25  # between passes within a sweep: ~BATCH*4 jobs a second per shard at most
_WAITING = {SlotStatus.SCHEDULED, SlotStatus.QUEUED}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def verdict(slots: Sequence[Any], on_time_ms: int, now_ms: int) -> bool | None:
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


class ObjectiveWatch(Service):
    what = "objective watch"
    log = log

    def __init__(self, client: redis.asyncio.Redis, keys: Keys, shards: Sequence[int],
                 clock: Clock, *, batch: int = BATCH, interval_s: float = INTERVAL_S) -> None:
        super().__init__()
        self.redis = client
        self.keys = keys
        self.shards = list(shards)  # the shards this node owns
        self.clock = clock
        self.batch = batch
        self.interval_s = interval_s
        self._cursors: dict[int, int] = {}  # per shard: the cron index's ZSCAN cursor

    async def run_once(self) -> int:
        """One batch per owned shard; returns how many shards are mid-sweep (0: go idle)."""
        await resync(self.clock, self.redis)
        now = self.clock.now_ms()
        busy = 0
        for shard in list(self.shards):
            busy += await self._shard(shard, now)
        return busy

    async def _shard(self, shard: int, now: int) -> int:
        cron, behind = self.keys.cron(shard), self.keys.behind(shard)
        cursor, found = await transport.call(self.redis, "zscan", cron,
                                             self._cursors.get(shard, 0), None, self.batch)
        self._cursors[shard] = int(cursor)
        job_ids = [_text(m) for m, _ in found]
        pipe = transport.pipeline(self.redis)
        for job_id in job_ids:
            pipe.hget(self.keys.job(shard, job_id), "on_time_ms")
            pipe.zrevrangebyscore(self.keys.runs(shard, job_id), now, "-inf", start=0,
                                  num=LOOKED_AT)
        pipe.zrandmember(behind, self.batch)  # a sample: bounded, and in time every entry
        replies = await transport.send(pipe)
        listed = [_text(m) for m in replies[-1]]
        runs = {job_id: ([_text(s) for s in replies[2 * i + 1]],
                         whole_number(replies[2 * i] or b"") or DEFAULT_ON_TIME_MS)
                for i, job_id in enumerate(job_ids)}
        # Most jobs are decided by their latest past slot or two: read those first, and the
        # rest of the LOOKED_AT only for jobs still undecided (a pass costs ~FIRST_READ
        # slot reads per job, not LOOKED_AT).
        verdicts: dict[str, bool | None] = {}
        undecided = {job_id: ids[:FIRST_READ] for job_id, (ids, _) in runs.items()}
        for stage in (0, 1):
            pipe = transport.pipeline(self.redis)
            for ids in undecided.values():
                for slot_id in ids:
                    pipe.hgetall(self.keys.slot(shard, slot_id))
            if stage and listed:  # entries whose job left the cron index
                pipe.zmscore(cron, listed)
            raws = iter(await transport.send(pipe) if len(pipe) else [])
            for job_id, ids in undecided.items():
                slots = [slot_from_hash(s, r) for s, r in ((s, next(raws)) for s in ids) if r]
                verdicts[job_id] = verdict(slots, runs[job_id][1], now)
            undecided = {j: runs[j][0] for j, v in verdicts.items()
                         if v is None and len(runs[j][0]) > FIRST_READ and not stage}
        late = [j for j, v in verdicts.items() if v]
        met = [j for j, v in verdicts.items() if v is False]
        gone = [j for j, score in zip(listed, next(raws), strict=True)
                if score is None] if listed else []
        pipe = transport.pipeline(self.redis)
        if late:
            pipe.zadd(behind, {j: now for j in late}, nx=True)
        if met or gone:
            pipe.zrem(behind, *met, *gone)
        if len(pipe):
            await transport.send(pipe)
        return 1 if self._cursors[shard] else 0

    def delay(self, busy: int) -> float:
        return BETWEEN_S if busy else self.interval_s

