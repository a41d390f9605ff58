"""Creates the slots of recurring jobs' occurrences shortly before they fall due, and
backfills the ones missed while no scheduler node ran.

Each job's score in its shard's `cron` set is its watermark: the first occurrence that has no
slot yet. `run_once()` reads the jobs whose watermark is within `lookahead` of now, computes
their occurrences here (croniter, scheduler/core/cron.py) and runs one `materialize` script
per job, all in one pipelined round trip. The script creates the missing slots and moves the
watermark with a compare-and-set, so nodes that do the same job at once create each slot
once; the loser's call is a no-op.

A node also materializes, on the shards it does not own, the jobs whose watermark is within
`overdue_ahead_ms` (a second) of now: their owner, which keeps them `lookahead` ahead, is dead,
frozen or behind, and its shards have no new owner until their lease runs out. With the
promoter's overdue pass (scheduler/node/promoter.py) that keeps a dead node's cron occurrences
starting within about a second and a half of their fire time.

Redefinitions: a job's definition is read once and kept, with its `spec` field (the digest of
a named schedule's spec: every redefinition changes it, redefine.lua) as its version. The
materialize script refuses a plan computed from another version (or from a moved watermark);
the refused job's definition and watermark are then read again and planned once more within
the same pass, so a running node takes a new cadence in the pass that first meets it, and no
extra round trip is paid in a pass where nothing changed.

Catch-up: an occurrence more than `misfire_grace` before now was missed (no node ran in
time). Per job policy, `all` creates the most recent `catchup_limit` of them, `latest` the
most recent one, `none` none; the rest are counted (job field and shard stats `missed`, event
"missed") and the most recent CATCHUP_LISTED of them listed one by one in the job's fire
ledger (scheduler/core/ledger.py). Occurrences less late than the grace run late rather than
count as missed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import msgspec
import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.cron import CronSpec
from scheduler.core.errors import SchedulerError
from scheduler.core.keys import cron_in, job_in
from scheduler.core.ledger import CATCHUP_LISTED
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.core.states import Catchup
from scheduler.core.timing import DEFAULT_CATCHUP_LIMIT
from scheduler.redis.clock import Clock, resync
from scheduler.redis.service import Service
from scheduler.scripts.replies import MaterializeReply

log = logging.getLogger("scheduler.node.materializer")

OVERDUE_AHEAD_MS = 1000
SCAN_LIMIT = 100_000  # missed occurrences counted one by one; beyond this the count is a floor
_FIELDS = ("cron", "tz", "catchup", "catchup_limit", "end_ms", "spec")


class Recurrence(msgspec.Struct, frozen=True):
    """What the materializer needs of a cron job's definition, as of `digest`."""

    spec: CronSpec
    catchup: Catchup
    catchup_limit: int
    end_ms: int  # 0 = no end
    digest: str = ""  # the job's `spec` field ("" for none): materialize.lua compares it


class Unplannable(msgspec.Struct, frozen=True):
    """A cron job whose definition does not parse (a hash written past the SDK): its series
    is ended, as one past its end_at is, rather than stop every other job's occurrences."""

    digest: str


class Plan(msgspec.Struct, frozen=True):
    fires: list[int]  # occurrences to create, ascending
    missed: int  # occurrences dropped by the catch-up policy
    next_ms: int  # the new watermark; -1 when the job has ended
    dropped: list[int] = []  # the most recent CATCHUP_LISTED of the missed, ascending


ENDED = Plan(fires=[], missed=0, next_ms=-1)


def plan(job: Recurrence, watermark_ms: int, now_ms: int, lookahead_ms: int,
         grace_ms: int) -> Plan:
    """The occurrences from the watermark up to now + lookahead. The watermark is normally
    itself an occurrence; one that is not (`sched recover` restores "last fire + 1 ms", or a
    job's creation time) starts at the first occurrence after it, never at itself."""
    horizon, late_before = now_ms + lookahead_ms, now_ms - grace_ms
    end = job.end_ms or float("inf")
    keep = {Catchup.ALL: job.catchup_limit, Catchup.LATEST: 1}.get(job.catchup, 0)
    kept: deque[int] = deque(maxlen=keep)
    listed: deque[int] = deque(maxlen=CATCHUP_LISTED)  # the fire ledger's catch-up entries
    missed = 0
    fires: list[int] = []
    next_ms = -1
    it = job.spec.after(watermark_ms - 1)
    t = next(it, None)  # None: the calendar ends (year 9999), and so does the series
    while t is not None and t <= end:
        if t > horizon:
            next_ms = t
            break
        if t < late_before:
            missed += 1
            if keep == 0:
                listed.append(t)
            elif len(kept) == keep:
                listed.append(kept[0])  # pushed out of the kept ones by this one
            kept.append(t)
            if missed >= SCAN_LIMIT:
                # A very long outage: keep the most recent occurrences, count the rest as at
                # least what was scanned, and continue from the grace boundary.
                kept = deque(sorted(x for _, x in zip(range(keep), job.spec.before(late_before),
                                                      strict=False)), maxlen=keep)
                missed += len(kept)
                listed = deque(sorted(x for _, x in zip(
                    range(CATCHUP_LISTED), job.spec.before(kept[0] if kept else late_before),
                    strict=False)), maxlen=CATCHUP_LISTED)
                it = job.spec.after(late_before - 1)
        else:
            fires.append(t)
        t = next(it, None)
    dropped = missed - len(kept)
    return Plan(fires=[*kept, *fires], missed=dropped, next_ms=next_ms,
                dropped=list(listed)[-dropped:] if dropped else [])


def _recurrence(job_id: str, raw: list[Any]) -> Recurrence | Unplannable | None:
    """The definition of a cron job; None for none (the hash is gone or is not a cron
    job's); Unplannable for one that does not parse (logged)."""
    cron, tz, catchup, limit, end, digest = (v.decode(errors="replace") if v is not None
                                             else "" for v in raw)
    if not cron:
        return None
    try:
        return Recurrence(spec=CronSpec(cron, tz or "UTC"),
                          catchup=Catchup(catchup) if catchup else Catchup.ALL,
                          catchup_limit=int(limit or DEFAULT_CATCHUP_LIMIT),
                          end_ms=int(end or 0), digest=digest)
    except (SchedulerError, ValueError) as exc:
        log.error("cron job %s cannot be planned: its definition does not parse (%s); its "
                  "series ends (submit or declare it again with a valid one)", job_id, exc)
        return Unplannable(digest)


class Materializer(Service):
    what = "materialize"
    log = log

    def __init__(self, client: redis.asyncio.Redis, prefixes: Sequence[str], clock: Clock, *,
                 lookahead_s: float = 3.0, misfire_grace_s: float = 5.0, batch: int = 500,
                 max_sleep_s: float = 0.5, events_maxlen: int = EVENTS_MAXLEN,
                 others: Sequence[str] = (), overdue_interval_s: float = 0.25) -> None:
        super().__init__()
        self.redis = client
        self.prefixes = list(prefixes)  # the node replaces these two when ownership moves
        self.others = list(others)
        self.overdue_interval_s = overdue_interval_s
        self._overdue_at = 0.0
        self.clock = clock
        self.lookahead_ms = int(lookahead_s * 1000)
        self.grace_ms = int(misfire_grace_s * 1000)
        self.batch = batch
        self.max_sleep_s = max_sleep_s
        self.events_maxlen = events_maxlen
        self.created = 0
        self._reported = 0  # created at the last progress line
        self.refused = 0
        self._jobs: dict[tuple[str, str], Recurrence | Unplannable | None] = {}
        self.overdue = 0

    def progress(self) -> str | None:
        n, self._reported = self.created - self._reported, self.created
        return f"created {n:,} cron occurrence slot(s) in the last {self.progress_every_s:.0f}s" if n else None

    async def run_once(self) -> int:
        """One batch per owned shard (and, every overdue interval, the overdue jobs of the
        others); returns how many jobs were due (a full batch means more may be waiting)."""
        await resync(self.clock, self.redis)
        now = self.clock.now_ms()
        reads = [(p, now + self.lookahead_ms) for p in self.prefixes]
        if self.others and time.monotonic() >= self._overdue_at:
            self._overdue_at = time.monotonic() + self.overdue_interval_s
            reads += [(p, now + OVERDUE_AHEAD_MS) for p in self.others]
        pipe = transport.pipeline(self.redis)
        for p, horizon in reads:
            pipe.zrange(cron_in(p), "-inf", horizon, byscore=True, offset=0,
                        num=self.batch, withscores=True)
        owned = set(self.prefixes)
        due = [(p, m.decode(), int(score)) for (p, _), reply in zip(reads, await transport.send(pipe),
                                                                     strict=True)
               for m, score in reply]
        overdue = sum(1 for p, _, _ in due if p not in owned)
        if overdue:
            self.overdue += overdue
            metrics.MATERIALIZED_OVERDUE.inc(overdue)
        refused = await self._materialize(due, now)
        if refused:
            # Redefined since its definition was read (or another node moved the watermark):
            # read both again and plan once more, now rather than a pass later.
            horizons = dict(reads)
            pipe = transport.pipeline(self.redis)
            for prefix, job_id in refused:
                pipe.zscore(cron_in(prefix), job_id)
            again = [(p, j, int(score)) for (p, j), score in zip(refused, await transport.send(pipe),
                                                                 strict=True)
                     if score is not None and score <= horizons[p]]
            await self._materialize(again, now)
        return len(due)

    async def _materialize(self, due: list[tuple[str, str, int]], now: int
                           ) -> list[tuple[str, str]]:
        """One materialize call per (prefix, job id, watermark), in one round trip; returns
        the jobs refused, whose kept definitions are dropped."""
        await self._learn([(p, j) for p, j, _ in due if (p, j) not in self._jobs])
        calls, sent = [], []
        for prefix, job_id, watermark in due:
            job = self._jobs.get((prefix, job_id))
            if job is None:
                continue  # no longer a cron job hash (removed); nothing to create
            pl = (ENDED if isinstance(job, Unplannable)
                  else plan(job, watermark, now, self.lookahead_ms, self.grace_ms))
            calls.append(scripts.materialize(prefix, now, self.events_maxlen, job_id, watermark,
                                             job.digest, pl.next_ms, pl.missed, pl.fires,
                                             pl.dropped))
            sent.append((prefix, job_id, pl.missed))
        missed, refused = 0, []
        for (prefix, job_id, dropped), raw in zip(sent, await scripts.run_async(self.redis, calls),
                                                  strict=True):
            reply = MaterializeReply.decode(raw)
            if not reply.moved:
                self.created += reply.created
                missed += dropped
            else:
                self.refused += 1
                self._jobs.pop((prefix, job_id), None)
                refused.append((prefix, job_id))
        if missed:
            metrics.OCCURRENCES_NOT_BACKFILLED.inc(missed)
        return refused

    async def _learn(self, jobs: list[tuple[str, str]]) -> None:
        if not jobs:
            return
        if len(self._jobs) > 200_000:
            self._jobs.clear()  # bounded memory; definitions are simply read again
        pipe = transport.pipeline(self.redis)
        for prefix, job_id in jobs:
            pipe.hmget(job_in(prefix, job_id), *_FIELDS)
        for key, raw in zip(jobs, await transport.send(pipe), strict=True):
            self._jobs[key] = _recurrence(key[1], raw)

    def delay(self, due: int) -> float:
        return 0 if due >= self.batch else self.max_sleep_s
