"""Did a schedule fire, and if not, why (`fires`): one page of a recurring job's timeline,
each occurrence of a window with where it stands and why it did not run, and their summary.
scheduler/core/ledger.py says where each answer is read from. An SDK operation: a generator
of requests, driven by Client and AsyncClient alike."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from scheduler.core import objective
from scheduler.core.cron import CronSpec
from scheduler.core.errors import JobNotFound, StoreUnavailable, ValidationError
from scheduler.core.keys import check_job_id
from scheduler.core.ledger import (
    MAX_FIRES_PAGE,
    SUMMARY_CAP,
    Fire,
    FirePage,
    FiresSummary,
    FireState,
    Reason,
    from_entry,
    from_slot,
    parse_entry,
    summarize,
)
from scheduler.core.models import DEFAULT_ON_TIME_MS, Slot, slot_from_hash, whole_number
from scheduler.core.timing import ms_of_utc, utc_of_ms
from scheduler.sdk.requests import Op, Pipe, StoreCall
from scheduler.sdk.schedules import _placements
from scheduler.sdk.state import ClientState, ready
from scheduler.sdk.status import workers

DEFAULT_WINDOW = timedelta(hours=1)


def fires(core: ClientState, name_or_job_id: str, since: datetime | timedelta | None = None,
          until: datetime | None = None, limit: int = 1000, cursor: int | None = None
          ) -> Op[FirePage]:
    """One page of a recurring job's timeline: every occurrence whose fire time lies in
    [since, until] (since: an aware datetime, or a timedelta back from now, default one
    hour; until: an aware datetime, default and at most now), in fire-time order, at most
    `limit` (1 to 10,000) of them, each with its state (ran, running, pending, not_run),
    the reason it did not run (None when it ran), its slot, start lag and outcome; and
    the summary of the whole window, not only the page (due, on time, late, not started
    by reason, start-lag p50/p99/max; on time is within the job's `on_time_within`; over
    at most 10,000 occurrences, else `complete` is False and `through_ms` says where it
    stopped). Pass the page's `cursor` back for the next
    page (None: the window is done). `name_or_job_id`: a schedule's name (`schedule()`)
    or a cron job's id. JobNotFound when there is none; ValidationError for a job that
    does not recur or a bad argument."""
    _check_page(limit, cursor)
    yield from ready(core)
    now = core.clock.now_ms()
    lo = _since_ms(since, now)
    hi = now if until is None else min(now, _instant("until", until))
    job_id, raw = yield from _find(core, name_or_job_id)
    job = core.job(job_id, raw, None)
    if not job.cron:
        raise ValidationError("name_or_job_id", f"{job_id!r} is not a recurring job: it has "
                                                "one run (see `sched jobs show`)")
    on_time_ms = whole_number(raw.get(b"on_time_ms", b"")) or DEFAULT_ON_TIME_MS
    unlisted = whole_number(raw.get(b"missed_unlisted", b"")) or 0
    start = lo if cursor is None else max(lo, cursor + 1)
    out, more = yield from _page(core, job_id, job, start, hi, limit, now, on_time_ms)
    if start == lo and more is None:
        summary = summarize(out, on_time_ms, unlisted)
    else:  # the summary covers the whole window, read page by page up to SUMMARY_CAP
        summary = yield from _whole_window(core, job_id, job, lo, hi, now, on_time_ms,
                                           unlisted)
    pipe = Pipe()
    pipe.hgetall(core.ontime_key(job_id))
    pipe.zscore(core.behind_key(job_id), job_id)
    counted, behind_ms = yield pipe
    return FirePage(job_id=job_id, fires=out, summary=summary, cursor=more,
                    objective=objective.reading(counted, behind_ms, now))


def _whole_window(core: ClientState, job_id: str, job: Any, lo: int, hi: int, now: int,
                  on_time_ms: int, unlisted: int) -> Op[FiresSummary]:
    """The summary of [lo, hi], from pages of MAX_FIRES_PAGE read in turn; past SUMMARY_CAP
    occurrences it stops and says how far it got (`complete`, `through_ms`)."""
    seen: list[Fire] = []
    cursor: int | None = lo - 1
    while cursor is not None and len(seen) < SUMMARY_CAP:
        part, cursor = yield from _page(core, job_id, job, cursor + 1, hi, MAX_FIRES_PAGE, now,
                                        on_time_ms)
        seen.extend(part)
    summary = summarize(seen, on_time_ms, unlisted)
    if cursor is None:
        return summary
    return msgspec.structs.replace(summary, complete=False, through_ms=seen[-1].fire_ms)


def _page(core: ClientState, job_id: str, job: Any, lo: int, hi: int, limit: int, now: int,
          on_time_ms: int) -> Op[tuple[list[Fire], int | None]]:
    """The occurrences of [lo, hi], at most `limit`, and the cursor of the next (None: the
    window is done)."""
    # The current definition's fire times; its earlier ones show through slots and entries.
    ends = [hi, job.end_ms or hi, job.deleted_ms or hi]
    times: list[int] = []
    for t in CronSpec(job.cron, job.tz or "UTC").after(max(lo, job.fire_ms) - 1):
        if t > min(ends) or len(times) > limit:
            break
        times.append(t)
    top = times[limit - 1] if len(times) > limit else hi
    pipe = Pipe()
    pipe.zrange(core.runs_key(job_id), lo, top, byscore=True, offset=0, num=limit + 1,
                withscores=True)
    pipe.zrange(core.fires_key(job_id), lo, top, byscore=True, offset=0, num=limit + 1)
    pipe.zscore(core.cron_key(job_id), job_id)
    pipe.zrange(core.runs_key(job_id), 0, 0, withscores=True)  # the oldest each holds
    pipe.zrange(core.fires_key(job_id), 0, 0, withscores=True)
    ran, noted, watermark, *oldest = yield pipe
    slot_ids = {int(score): member.decode() for member, score in ran}
    entries = {e[0]: (e[1], e[2]) for e in map(parse_entry, noted) if e is not None}
    past = yield from _past(core, job_id, lo, top, limit, times, slot_ids, entries, watermark,
                            min((int(r[0][1]) for r in oldest if r), default=None))
    page = sorted({*times[:limit], *slot_ids, *entries, *past.slots, *past.entries})
    more = (len(times) > limit or len(ran) > limit or len(noted) > limit or len(page) > limit
            or past.more)
    page = page[:limit]

    pipe = Pipe()
    for fire in page:
        if fire in slot_ids:
            pipe.hgetall(core.slot_key(slot_ids[fire]))
    raws = iter((yield pipe))
    slots = {fire: (slot_ids[fire], next(raws)) for fire in page if fire in slot_ids}
    held = yield from _held_back(core, [slot_from_hash(s, r) for s, r in slots.values() if r],
                                 now, on_time_ms)
    out: list[Fire] = []
    for fire in page:
        sid, slot_raw = slots.get(fire, ("", {}))
        if slot_raw:
            out.append(_from_hash(sid, slot_raw, entries, held.get(sid)))
        elif fire in entries:
            out.append(from_entry(fire, *entries[fire]))
        elif fire in past.slots:  # left Redis: the history store's copy
            out.append(_from_hash(f"{job_id}:{fire}", past.slots[fire], past.entries, None))
        elif fire in past.entries:
            out.append(from_entry(fire, *past.entries[fire]))
        else:
            out.append(_unmade(fire, watermark, now, on_time_ms))
    return out, page[-1] if more and page else None


def _from_hash(slot_id: str, raw: dict[bytes, bytes], entries: dict[int, tuple[Reason, str]],
               held: Reason | None) -> Fire:
    slot = slot_from_hash(slot_id, raw)
    yielded = raw.get(b"yielded_to")
    return from_slot(slot, entries, yielded.decode() if yielded else None, held)


class _Past(msgspec.Struct):
    """What the history store holds of a page's range that Redis no longer does."""

    slots: dict[int, dict[bytes, bytes]] = {}
    entries: dict[int, tuple[Reason, str]] = {}
    more: bool = False


def _past(core: ClientState, job_id: str, lo: int, top: int, limit: int, times: list[int],
          slot_ids: dict[int, str], entries: dict[int, tuple[Reason, str]], watermark: Any,
          oldest: int | None) -> Op[_Past]:
    """The history store's slots and ledger entries of [lo, top], when Redis may have
    forgotten part of it: the window starts before the oldest record Redis holds of the job
    (or it holds none), or a fire time of the page below the watermark has no record in Redis
    (its slot expired, its entry was trimmed). One store read, of at most limit + 1 rows of
    each; Redis's records win over the store's. Without a store those occurrences read
    `unrecorded`."""
    mark = int(watermark) if watermark is not None else None
    missing = any(t not in slot_ids and t not in entries and (mark is None or t < mark)
                  for t in times[:limit])
    if not (oldest is None or lo < oldest or missing):
        return _Past()
    try:
        # the store's Ledger: (slots, entries), each (fire_ms, ...) in fire-time order
        rows, noted = yield StoreCall("ledger", (core.namespace, job_id, lo, top + 1,
                                                 limit + 1))
    except StoreUnavailable:
        return _Past()
    return _Past(
        slots={f: {k.encode(): v.encode() for k, v in state.items()} for f, state in rows
               if f not in slot_ids},
        entries={f: (Reason(r), "") for f, r in noted if r in set(Reason) and f not in entries},
        more=len(rows) > limit or len(noted) > limit)


def _check_page(limit: int, cursor: int | None) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_FIRES_PAGE:
        raise ValidationError("limit", f"{limit!r} is not allowed; must be an integer from 1 "
                                       f"to {MAX_FIRES_PAGE:,}")
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)
                               or cursor < 0):
        raise ValidationError("cursor", f"{cursor!r} is not a cursor; pass the `cursor` of "
                                        "the page before, or None for the first")


def _unmade(fire: int, watermark: Any, now: int, on_time_ms: int) -> Fire:
    """An occurrence with neither a slot nor an entry: at or past the job's watermark no
    node has made it yet; below it, its record has left Redis."""
    if watermark is not None and fire >= int(watermark):
        return Fire(fire_ms=fire, fire_at=utc_of_ms(fire), state=FireState.PENDING,
                    reason=Reason.NO_SCHEDULER if now - fire > on_time_ms else None)
    return Fire(fire_ms=fire, fire_at=utc_of_ms(fire), state=FireState.NOT_RUN,
                reason=Reason.UNRECORDED)


def _since_ms(since: datetime | timedelta | None, now: int) -> int:
    if since is None:
        since = DEFAULT_WINDOW
    if isinstance(since, timedelta):
        if since < timedelta(0):
            raise ValidationError("since", f"{since} is negative; give how far back to look")
        return max(0, now - since // timedelta(milliseconds=1))
    return _instant("since", since)


def _instant(name: str, value: Any) -> int:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValidationError(name, f"{value!r} is not a timezone-aware datetime"
                              + (" or a timedelta" if name == "since" else ""))
    return max(0, ms_of_utc(value))


def _find(core: ClientState, name: str) -> Op[tuple[str, dict[bytes, bytes]]]:
    """The job's id and hash: the id given, else the schedule of that name declared with a
    concurrency key (placed in its key's shard)."""
    check_job_id(name)
    pipe = Pipe()
    pipe.hgetall(core.job_key(name))
    raw = (yield pipe)[0]
    if raw:
        return name, raw
    ids = [i for i in _placements(name, core.shards)[1:] if len(i) <= 128]
    pipe = Pipe()
    for other in ids:
        pipe.hgetall(core.job_key(other))
    for other, found in zip(ids, (yield pipe), strict=True):
        if found.get(b"cron"):
            return other, found
    raise JobNotFound(name)


def _held_back(core: ClientState, slots: list[Slot], now: int, on_time_ms: int
               ) -> Op[dict[str, Reason]]:
    """Why each slot still waiting past its objective has not started: no live worker
    reads its queue, its queue's limit holds it, or the workers are behind. Reads the
    workers (and limits) only when such a slot exists."""
    late = [s for s in slots if s.status.value in ("scheduled", "queued")
            and now - s.fire_ms > on_time_ms and not s.attempts]
    if not late:
        return {}
    served = {q for w in (yield from workers(core)) if w.alive for q in w.queues}
    pipe = Pipe()
    pipe.hgetall(core.keys.limits)
    limited = {k.decode() for k in (yield pipe)[0]}
    return {s.slot_id: (Reason.NO_WORKER if s.queue not in served
                        else Reason.PAUSED_BY_LIMIT if s.queue in limited else Reason.BEHIND)
            for s in late}


__all__ = ["FirePage", "fires"]
