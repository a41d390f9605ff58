"""Paged lists of what no other operation lists: a queue's queued slots, the slots waiting in
the due sets (scheduled, and among them the retries), the runs in progress, and the jobs
submitted most recently (immediate jobs included, which no index holds). What the console's
lists show; SDK operations (scheduler/sdk/requests.py says how), so `Client` and
`AsyncClient` both have them.

A page costs bounded work whatever the backlog. Each source (one lane of a queue in one
shard, a shard's `due` or `leases` set, a shard's events stream) is read from where the
last page stopped, at most a page's worth, or `SCAN` entries when a filter drops some
(XRANGE, XPENDING, ZRANGE, XREVRANGE, all with COUNT/LIMIT: never a whole stream or set).
The sources are merged into one order and the page's `next` (a cursor: where the page
stopped in that order) starts the next page there, so an entry that stays where it was is
neither repeated nor skipped. Each command names one key: on a Redis Cluster it goes to its
shard's node (cluster.pipeline).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import msgspec

from scheduler.core.errors import ValidationError
from scheduler.core.events import EventType
from scheduler.core.keys import (
    DISPATCH_GROUP,
    PRIORITIES,
    check_name,
    queue_of,
    shard_of,
    split_slot_id,
)
from scheduler.core.models import Slot, slot_from_hash, whole_number
from scheduler.core.states import TERMINAL, JobKind, SlotStatus
from scheduler.sdk.requests import Op, Pipe
from scheduler.sdk.state import ClientState, ready

PAGE = 50  # entries on a page unless the caller says
MAX_PAGE = 500
SCAN = 200  # entries read per source for a page a filter thins (a queue's scheduled slots)
EVENTS_SCAN = 200  # events read per shard for a page of recent submissions

_CURSOR = re.compile(r"(\d{1,19})-(\d{1,19})\.(\d{1,6})\.(\d{1,9})")


class SlotPage(msgspec.Struct, frozen=True):
    slots: list[Slot]
    next: str | None  # pass as `after` for the page that follows; None: this was the last


class Submission(msgspec.Struct, frozen=True, kw_only=True):
    job_id: str
    slot_id: str | None  # its first slot; None for a recurring job (its slots come later)
    submitted_ms: int
    task: str = ""  # "" when the job's hash has left Redis (retention)
    queue: str = ""
    kind: JobKind = JobKind.IMMEDIATE
    status: SlotStatus | None = None  # the slot's now; None with no slot, or gone


class SubmissionPage(msgspec.Struct, frozen=True):
    jobs: list[Submission]
    next: str | None


class _Cursor(NamedTuple):
    """Where a page stopped: a position (a stream entry id, or a set's score and 0) in
    source `source`, of which `ties` entries at that very position were on pages already
    (several set members share a score; several records share an event)."""

    a: int
    b: int
    source: int
    ties: int

    def text(self) -> str:
        return f"{self.a}-{self.b}.{self.source}.{self.ties}"


def _cursor(after: str | None) -> _Cursor | None:
    if after is None:
        return None
    found = _CURSOR.fullmatch(after) if isinstance(after, str) else None
    if not found:
        raise ValidationError("after", f"{after!r} is not a page cursor: pass the `next` of "
                                       f"the page before")
    a, b, source, ties = (int(g) for g in found.groups())
    if a >= 2**63 or b >= 2**63:
        raise ValidationError("after", f"{after!r} is not a page cursor: pass the `next` of "
                                       f"the page before")
    return _Cursor(a, b, source, ties)


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValidationError("limit", f"{limit!r} is not allowed; must be an integer from 1 "
                                       f"to {MAX_PAGE}")
    return limit


class _Start(NamedTuple):
    """Where one source's read begins, given the cursor."""

    a: int
    b: int
    inclusive: bool  # at (a, b), passing over `skip` entries there; else after it
    skip: int


def _start(cursor: _Cursor | None, k: int, unique: bool) -> _Start | None:
    """Sources before the cursor's resume after its position, those after it at it; its own
    resumes after it when positions are unique in it (stream entries), else at it, past the
    ties already shown."""
    if cursor is None:
        return None
    if k < cursor.source or (k == cursor.source and unique):
        return _Start(cursor.a, cursor.b, False, 0)
    return _Start(cursor.a, cursor.b, True, cursor.ties if k == cursor.source else 0)


def _starts(cursor: _Cursor | None, first: int, n: int, unique: bool) -> list[_Start | None]:
    """_start of sources first .. first + n - 1."""
    return [_start(cursor, k, unique) for k in range(first, first + n)]


def _id(a: int, b: int) -> str:
    return f"{a}-{b}"


def _pos(entry_id: bytes) -> tuple[int, int]:
    ms, _, seq = entry_id.decode().partition("-")
    return int(ms), int(seq)


class _Batch:
    """What one read of source `k` gave: (position, value) pairs in the merge's order, and
    whether the source may hold more past them (`last`: the last position it scanned)."""

    def __init__(self, k: int, start: _Start | None, items: list[tuple[tuple[int, int], Any]],
                 full: bool, last: tuple[int, int] | None = None,
                 descending: bool = False) -> None:
        self.k, self.start, self.items, self.full = k, start, items, full
        self.descending = descending
        self.last = last if last is not None else (items[-1][0] if items else None)

    def order(self, pos: tuple[int, int]) -> tuple[int, int]:
        return (-pos[0], -pos[1]) if self.descending else pos

    def ties(self, pos: tuple[int, int], upto: int) -> int:
        """Entries at `pos` among this read's first `upto`, and those a cursor passed over."""
        n = sum(1 for p, _ in self.items[:upto] if p == pos)
        if self.start is not None and self.start.inclusive and (self.start.a,
                                                                self.start.b) == pos:
            n += self.start.skip
        return n


class _Item(NamedTuple):
    key: tuple[tuple[int, int], int, int]
    batch: _Batch
    at: int  # in its batch's items (len(items): past them all, for a horizon)
    value: Any


def _candidates(batches: list[_Batch]) -> tuple[list[_Item], _Item | None]:
    """Every entry read that may be shown now, in order: none past the end of a source that
    may hold more (a later page reads on from there); and that end, the horizon."""
    items = sorted((_Item((b.order(p), b.k, i), b, i, v) for b in batches
                    for i, (p, v) in enumerate(b.items)), key=lambda x: x.key)
    ends = [_Item((b.order(b.last), b.k, len(b.items)), b, len(b.items), None)
            for b in batches if b.full and b.last is not None]
    horizon = min(ends, key=lambda x: x.key, default=None)
    if horizon is not None:
        items = [x for x in items if x.key < horizon.key]
    return items, horizon


def _cut(items: list[_Item], horizon: _Item | None, limit: int,
         keep: Callable[[Any], bool] = lambda v: True) -> tuple[list[Any], str | None]:
    """The first `limit` entries `keep` accepts, and the cursor after them (None: the end)."""
    shown: list[Any] = []
    stop: _Item | None = None
    for n, item in enumerate(items):
        if keep(item.value):
            shown.append(item.value)
            if len(shown) == limit:
                stop = item
                if n == len(items) - 1 and horizon is None:
                    return shown, None
                break
    else:
        stop = horizon
    if stop is None:
        return shown, None
    b = stop.batch
    pos = b.items[stop.at][0] if stop.at < len(b.items) else b.last
    assert pos is not None
    upto = stop.at + 1 if stop is not horizon else stop.at
    return shown, _Cursor(pos[0], pos[1], b.k, b.ties(pos, upto)).text()


# --- sources --------------------------------------------------------------------------------

def _stream_min(start: _Start | None, delivered: tuple[int, int] | None) -> str:
    """XRANGE/XPENDING's lower bound: after the cursor, and after the entries already
    delivered to the workers when `delivered` is given."""
    if delivered is not None and (start is None or (start.a, start.b) <= delivered):
        return "(" + _id(*delivered)
    if start is None:
        return "-"
    return ("" if start.inclusive else "(") + _id(start.a, start.b)


def _set_min(start: _Start | None) -> tuple[str, int]:
    """ZRANGE BYSCORE's lower bound and offset."""
    if start is None:
        return "-inf", 0
    if start.inclusive:
        return str(start.a), start.skip
    return f"({start.a}", 0


def _set_batch(k: int, start: _Start | None, reply: Any, count: int) -> _Batch:
    rows = [] if isinstance(reply, Exception) else reply
    return _Batch(k, start, [((int(score), 0), member.decode()) for member, score in rows],
                  full=len(rows) == count)


def _delivered(reply: Any) -> tuple[int, int] | None:
    """The workers group's last-delivered id of a lane (XINFO GROUPS); (0, 0) before any
    delivery, None when the lane has no such group (every entry is undelivered)."""
    if isinstance(reply, Exception):
        return None
    for group in reply:
        name = group.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == DISPATCH_GROUP:
            return _pos(group["last-delivered-id"])
    return None


def _slots(core: ClientState, slot_ids: list[str],
           keep: Callable[[Slot], bool] = lambda s: True) -> Op[list[Slot]]:
    """The slots, in order; those whose hash has gone since, or that `keep` refuses, are
    left out."""
    if not slot_ids:
        return []
    pipe = Pipe()
    for s in slot_ids:
        pipe.hgetall(core.slot_key(s))
    raws = yield pipe
    found = (slot_from_hash(s, raw) for s, raw in zip(slot_ids, raws, strict=True) if raw)
    return [s for s in found if keep(s)]


def _lanes(core: ClientState, queues: Iterable[str]) -> list[tuple[str, int, str]]:
    """(queue, shard, stream key) of every lane of the queues in every shard, in source
    order."""
    return [(q, shard, core.keys.queue(shard, q, p)) for q in queues
            for shard in range(core.shards) for p in PRIORITIES]


# --- the operations -------------------------------------------------------------------------

def queued(core: ClientState, queue: str, *, after: str | None = None, limit: int = PAGE
           ) -> Op[SlotPage]:
    """A queue's slots waiting for a worker (dispatched, not read by one yet: its depth but
    for its concurrency keys' slots, which wait in their keys' queues: `queue_keys`),
    oldest first over its priorities and shards, `limit` at a time; `after` is the `next`
    of the page before. An entry whose slot was cancelled since stays until a worker reads
    it and drops it: it shows with its status. Three round trips."""
    check_name("queue", queue)
    limit, cursor = _check_limit(limit), _cursor(after)
    yield from ready(core)
    lanes = _lanes(core, [queue])
    pipe = Pipe(raise_on_error=False)
    for _, _, key in lanes:
        pipe.xinfo_groups(key)
    groups = yield pipe
    pipe = Pipe(raise_on_error=False)
    starts = _starts(cursor, 0, len(lanes), unique=True)
    for (_, _, key), reply, start in zip(lanes, groups, starts, strict=True):
        delivered = _delivered(reply) if not isinstance(reply, Exception) else None
        pipe.xrange(key, _stream_min(start, delivered), "+", limit)
    batches = []
    for k, (start, reply) in enumerate(zip(starts, (yield pipe), strict=True)):
        rows = [] if isinstance(reply, Exception) or reply is None else reply
        batches.append(_Batch(k, start, [(_pos(entry), fields.get(b"s", b"").decode())
                                         for entry, fields in rows],
                              full=len(rows) == limit))
    items, horizon = _candidates(batches)
    slot_ids, nxt = _cut(items, horizon, limit, keep=bool)
    return SlotPage((yield from _slots(core, slot_ids)), nxt)


def scheduled(core: ClientState, queue: str | None = None, *, retrying: bool = False,
              after: str | None = None, limit: int = PAGE) -> Op[SlotPage]:
    """Slots waiting for their time in the due sets (delayed and `at` jobs, cron occurrences
    made ahead, retries), soonest first, `limit` at a time; `after` is the `next` of the page
    before. `queue`: that queue's only; `retrying`: only slots that ran before (a retry
    waiting out its backoff). With either, a page reads at most `SCAN` entries per shard
    and may show fewer than `limit` before its `next`. Two round trips, three with a
    filter."""
    if queue is not None:
        check_name("queue", queue)
    limit, cursor = _check_limit(limit), _cursor(after)
    filtered = queue is not None or retrying
    count = max(limit, SCAN) if filtered else limit
    yield from ready(core)
    pipe = Pipe(raise_on_error=False)
    starts = _starts(cursor, 0, core.shards, unique=False)
    for shard, start in enumerate(starts):
        low, offset = _set_min(start)
        pipe.zrange(core.keys.due(shard), low, "+inf", byscore=True, offset=offset,
                    num=count, withscores=True)
    batches = [_set_batch(k, start, reply, count)
               for k, (start, reply) in enumerate(zip(starts, (yield pipe), strict=True))]
    items, horizon = _candidates(batches)
    fields: dict[str, list[bytes | None]] = {}
    if filtered and items:
        pipe = Pipe()
        for item in items:
            pipe.hmget(core.slot_key(item.value), "queue", "attempt")
        fields = {item.value: f for item, f in zip(items, (yield pipe), strict=True)}

    def keep(slot: str) -> bool:
        if not filtered:
            return True
        q, attempt = fields[slot]
        # An attempt that is no number keeps the slot listed, where it shows as unreadable.
        tried = whole_number(attempt) if attempt else 0
        return ((queue is None or (q or b"default").decode() == queue)
                and (not retrying or tried is None or tried > 0))
    slot_ids, nxt = _cut(items, horizon, limit, keep)
    return SlotPage((yield from _slots(core, slot_ids)), nxt)


def running(core: ClientState, queue: str | None = None, *, after: str | None = None,
            limit: int = PAGE) -> Op[SlotPage]:
    """Runs in progress now: slots a worker holds (a pending entry in their lane, or, for
    at_most_once jobs, a lease in the shard's `leases` set), `limit` at a time, in order of
    dispatch (at_most_once runs by lease end); `after` is the `next` of the page before.
    `queue`: that queue's only (its at_most_once runs are picked out of every queue's, so
    such a page may show fewer than `limit` before its `next`). A slot dispatched early and
    held until its time shows, as queued. Reads every lane in use (the shards' lane indexes):
    O(lanes) commands. Four round trips."""
    if queue is not None:
        check_name("queue", queue)
    limit, cursor = _check_limit(limit), _cursor(after)
    yield from ready(core)
    # The lanes each shard's index names (scheduler/node/queue_cleaner.py keeps it).
    if queue is None:
        pipe = Pipe()
        for shard in range(core.shards):
            pipe.zrange(core.keys.lane_index(shard), 0, -1)
        lanes = sorted((queue_of(name.decode()), shard, core.keys.lane_stream(
            shard, name.decode())) for shard, found in enumerate((yield pipe))
            for name in found)
    else:
        lanes = _lanes(core, [queue])
    pipe = Pipe(raise_on_error=False)
    starts = _starts(cursor, 0, len(lanes), unique=True)
    for (_, _, key), start in zip(lanes, starts, strict=True):
        pipe.xpending_range(key, DISPATCH_GROUP, _stream_min(start, None), "+", limit)
    starts += _starts(cursor, len(lanes), core.shards, unique=False)
    for shard, start in enumerate(starts[len(lanes):]):
        low, offset = _set_min(start)
        pipe.zrange(core.keys.leases(shard), low, "+inf", byscore=True, offset=offset,
                    num=limit, withscores=True)
    replies = yield pipe
    batches = []
    for k, (start, reply) in enumerate(zip(starts, replies, strict=True)):
        if k >= len(lanes):
            batches.append(_set_batch(k, start, reply, limit))
            continue
        rows = [] if isinstance(reply, Exception) else reply
        batches.append(_Batch(k, start, [(_pos(r["message_id"]), (lanes[k][2], r["message_id"]))
                                         for r in rows], full=len(rows) == limit))
    items, horizon = _candidates(batches)
    chosen, nxt = _cut(items, horizon, limit)
    entries = [c for c in chosen if isinstance(c, tuple)]
    ids: dict[tuple[str, bytes], str] = {}  # (lane, entry id): entry ids repeat across lanes
    if entries:
        pipe = Pipe()
        for key, entry in entries:
            pipe.xrange(key, entry, entry, 1)
        for found, rows in zip(entries, (yield pipe), strict=True):
            if rows:
                ids[found] = rows[0][1].get(b"s", b"").decode()
    slot_ids = [ids.get(c, "") if isinstance(c, tuple) else c for c in chosen]
    # A run that ended between the reads is left out; so is, with `queue`, an at_most_once
    # run of another queue (the `leases` set holds every queue's).
    return SlotPage((yield from _slots(core, [s for s in slot_ids if s], lambda s: (
        s.status not in TERMINAL and (queue is None or s.queue == queue)))), nxt)


def recent_jobs(core: ClientState, *, after: str | None = None, limit: int = PAGE
                ) -> Op[SubmissionPage]:
    """Jobs submitted most recently, newest first (by the ms: jobs of one ms in two shards
    come in shard order), of every kind (immediate jobs, which no index lists, included),
    `limit` at a time; `after` is the `next` of the page before.
    Read from each shard's events stream (its "submitted" events): a page looks at most
    `EVENTS_SCAN` events per shard, so under load it may show fewer than `limit` before its
    `next`; what the stream has trimmed (`events_maxlen`) is in the history store only. Two
    round trips."""
    limit, cursor = _check_limit(limit), _cursor(after)
    yield from ready(core)
    pipe = Pipe(raise_on_error=False)
    starts = _starts(cursor, 0, core.shards, unique=False)
    for shard, start in enumerate(starts):
        high = "+" if start is None else (("" if start.inclusive else "(")
                                          + _id(start.a, start.b))
        pipe.xrevrange(core.keys.events(shard), high, "-", EVENTS_SCAN)
    batches = []
    for k, (start, reply) in enumerate(zip(starts, (yield pipe), strict=True)):
        rows = [] if isinstance(reply, Exception) or reply is None else reply
        items: list[tuple[tuple[int, int], Any]] = []
        for entry, fields in rows:
            if fields.get(b"type") != EventType.SUBMITTED.value.encode():
                continue
            pos = _pos(entry)
            found = _submitted(fields, pos)
            if start is not None and start.inclusive and (start.a, start.b) == pos:
                found = found[start.skip:]
            items += [(pos, s) for s in found]
        full, last = len(rows) == EVENTS_SCAN, _pos(rows[-1][0]) if rows else None
        if len(items) > limit:  # a bulk submit's event holds up to 500 jobs: a page's worth
            items, full = items[:limit], True
            last = items[-1][0]
        batches.append(_Batch(k, start, items, full=full, last=last, descending=True))
    candidates, horizon = _candidates(batches)
    chosen, nxt = _cut(candidates, horizon, limit)
    return SubmissionPage((yield from _describe(core, chosen)), nxt)


def _submitted(fields: dict[bytes, bytes], pos: tuple[int, int]) -> list[Submission]:
    """A "submitted" event's jobs, the last submitted first (scheduler/core/events.py: a
    record is a slot id alone, or {job, slot?})."""
    out = []
    try:
        records = json.loads(fields.get(b"data") or b"[]")
        ts = int(fields.get(b"ts") or pos[0])
    except ValueError:
        return []
    for record in reversed(records if isinstance(records, list) else []):
        if isinstance(record, dict) and isinstance(record.get("job"), str):
            if not isinstance(record.get("slot"), str):
                out.append(Submission(job_id=record["job"], slot_id=None, submitted_ms=ts))
                continue
            record = record["slot"]
        if not isinstance(record, str):
            continue
        slot = record
        try:
            job_id, _ = split_slot_id(slot)
        except ValidationError:
            continue
        out.append(Submission(job_id=job_id, slot_id=slot, submitted_ms=ts))
    return out


_JOB_FIELDS = ("task", "queue", "kind")


def _describe(core: ClientState, found: list[Submission]) -> Op[list[Submission]]:
    """Each submission with its job's task, queue and kind and its slot's status now."""
    if not found:
        return []
    pipe = Pipe()
    for s in found:
        shard = shard_of(s.job_id, core.shards)
        pipe.hmget(core.keys.job(shard, s.job_id), *_JOB_FIELDS)
        if s.slot_id:
            pipe.hget(core.keys.slot(shard, s.slot_id), "status")
    replies = iter((yield pipe))
    out = []
    for s in found:
        task, queue, kind = next(replies)
        status = _status(next(replies)) if s.slot_id else None
        out.append(msgspec.structs.replace(
            s, task=(task or b"").decode(), queue=(queue or b"").decode(), kind=_kind(kind),
            status=status))
    return out


def _kind(raw: bytes | None) -> JobKind:
    try:
        return JobKind((raw or b"immediate").decode())
    except ValueError:
        return JobKind.IMMEDIATE


def _status(raw: bytes | None) -> SlotStatus | None:
    try:
        return SlotStatus(raw.decode()) if raw else None
    except ValueError:
        return None
