"""The snapshotter's intake (scheduler/history/snapshotter.py): which slots and jobs a batch of events
touches, and the memory that lets it skip events a read already covered and hold back slots
about to change (the snapshotter's docstring says why). No I/O: the snapshotter reads the
events and the hashes, this decides what to read.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any

import msgspec

from scheduler.core.bounds import SNAPSHOTTER_BOUNDS
from scheduler.core.errors import ConfigError
from scheduler.core.events import SLOT_ONLY, EventType
from scheduler.core.finite import check_bounds, check_finite
from scheduler.redis.clock import Clock

log = logging.getLogger("scheduler.history.snapshotter")

class SnapshotterConfig(msgspec.Struct, kw_only=True, frozen=True):
    read_count: int = 100
    """Most events entries per shard per batch (one entry holds a whole Lua batch of records:
    from one to thousands)."""
    batch_records: int = 20_000
    """About how many slots and jobs one batch should hold: the entries read per shard adapt
    (from 1 up to read_count) to keep batches near this size."""
    claim_idle_s: float = 30.0
    """Pending entries idle this long belong to a dead snapshotter and are taken over."""
    idle_sleep_s: float = 0.2
    settle_s: float = 0.5
    """After a batch that reached the head of every events stream, wait this long before the
    next: by then most of the slots it will name have finished, and each costs one read and
    one row instead of one per step. History trails Redis by about this much."""
    retention_s: float | None = 3600.0
    """How long a finished slot stays in Redis once it is in the store; None keeps it."""
    consumer: str = ""
    overlap_writes: bool = True
    """Write batch N to the store while reading batch N+1 from Redis (acks still follow each
    commit)."""
    seen_capacity: int = 250_000
    """Slots and jobs whose last read version is remembered, to skip events that read already
    covered (about 150 bytes each)."""
    defer_s: float = 2.0
    """Hold back a slot whose `submitted` event comes alone and that is due within this long,
    until its next event (a promotion ahead of its time only renews the wait) or this long
    has passed (see snapshotter.py's docstring); 0 writes at once."""

    def __post_init__(self) -> None:
        check_finite(self)
        if self.read_count < 1 or self.batch_records < 1:
            raise ConfigError(f"read_count and batch_records must be >= 1, not "
                              f"{self.read_count} and {self.batch_records}")
        if self.settle_s < 0 or self.idle_sleep_s < 0 or self.defer_s < 0:
            raise ConfigError("settle_s, idle_sleep_s and defer_s must be >= 0")
        if self.claim_idle_s <= 0:
            raise ConfigError(f"claim_idle_s must be > 0, not {self.claim_idle_s}")
        if self.seen_capacity < 0:
            raise ConfigError(f"seen_capacity must be >= 0, not {self.seen_capacity}")
        if self.retention_s is not None and self.retention_s < 0:
            raise ConfigError(f"retention_s must be >= 0 or None, not {self.retention_s}")
        check_bounds(self, SNAPSHOTTER_BOUNDS)


class _Record(msgspec.Struct):
    """The fields of an event record the snapshotter uses (the rest are skipped unparsed)."""

    slot: Any = None
    job: Any = None
    task: Any = None
    queue: Any = None
    attempt: Any = None
    fires: Any = None  # a `not_run` record's fire times, and their reason
    reason: Any = None


# A record is an object, or a slot id alone (a "succeeded" entry's: events.py).
_records = msgspec.json.Decoder(list[_Record | str])
NOT_RUN = EventType.NOT_RUN.value
# Most slots held back at once (defer_s), each a little memory. Past it (a long backlog of
# submissions no worker takes), slots are written at once.
DEFER_MAX = 200_000


def _fire_ms(slot_id: str) -> int:
    """A slot id is `<job id>:<fire_ms>`."""
    try:
        return int(slot_id.rpartition(":")[2])
    except ValueError:
        return 0


def _decoded(shard: int, entry_id: bytes, fields: dict[bytes, bytes]) -> list[_Record | str]:
    try:
        return _records.decode(fields.get(b"data") or b"[]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        log.error("shard %d: event %s has unreadable data; skipped", shard, entry_id)
        return []


def version_of(entry_id: bytes | str) -> int:
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms) * 1_000_000 + int(seq or 0)


class Work:
    """What one batch touches in one shard."""

    __slots__ = ("ids", "slots", "jobs", "created", "fires")

    def __init__(self) -> None:
        self.ids: list[bytes] = []
        self.slots: dict[str, tuple[str, _Record]] = {}  # slot -> (event type, record)
        self.jobs: set[str] = set()
        self.created: set[str] = set()  # slots and "job:" ids whose `submitted` event is here
        # fire ledger entries (job, fire_ms, reason) of `not_run` events: the event holds
        # them whole, nothing is read from Redis
        self.fires: list[tuple[str, int, str]] = []


class Intake:
    """Sorts events into per-shard Work. `seen`: slot id or "job:" + job id -> the version
    of its last read (bounded by seen_capacity). `held`: slots held back (defer_s) and not
    written yet, slot -> (shard, monotonic deadline), in deadline order."""

    def __init__(self, config: SnapshotterConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.seen: dict[str, int] = {}
        self.held: dict[str, tuple[int, float]] = {}
        self.skipped = 0  # event records already covered by an earlier read
        self.deferred = 0  # slots held back so far
        self.reheld = 0  # `queued` events of held-back slots that left them held

    def take(self, work: dict[int, Work], shard: int,
              entries: Sequence[tuple[bytes, dict[bytes, bytes]]]) -> None:
        w = work.setdefault(shard, Work())
        seen = self.seen
        defer = self.config.defer_s > 0
        deferred = self.held
        horizon = self.clock.now_ms() + int(self.config.defer_s * 1000)
        deadline = self.clock.monotonic() + self.config.defer_s
        for entry_id, fields in entries:
            w.ids.append(entry_id)
            if not fields:
                continue
            version = version_of(entry_id)
            kind = fields.get(b"type", b"").decode()
            for record in _decoded(shard, entry_id, fields):
                if isinstance(record, str):
                    record = _Record(slot=record)
                job = record.job  # submitted and materialized: cron jobs have no slot
                if kind == NOT_RUN and isinstance(job, str):
                    self._fires(w, job, record)
                slot = record.slot
                if isinstance(slot, str):
                    if kind not in SLOT_ONLY and not isinstance(job, str):
                        job = slot.rpartition(":")[0]
                    if seen.get(slot, -1) >= version:
                        self.skipped += 1
                    elif (kind == "submitted" and defer and _fire_ms(slot) <= horizon
                          and len(deferred) < DEFER_MAX):
                        # Due soon: its next event (or the deadline) brings it, still new.
                        # Unread: whatever it did since, a later event of it is unread too.
                        deferred[slot] = (shard, deadline)
                        self.deferred += 1
                    elif kind == "queued" and slot in deferred and _fire_ms(slot) <= horizon:
                        # Held back and promoted ahead of its time (promote.lua, "Early"):
                        # its claim comes at its fire time, still within the horizon. Written
                        # now, it would be written again then, as an upsert (bench
                        # sustained). Held on, its deadline counted from now (dicts
                        # keep insertion order: re-inserted, it stays in deadline order).
                        del deferred[slot]
                        deferred[slot] = (shard, deadline)
                        self.reheld += 1
                    else:
                        self._slot(w, slot, kind, record)
                if isinstance(job, str):
                    self._job(w, job, kind, version)

    def _job(self, w: Work, job: str, kind: str, version: int) -> None:
        if self.seen.get("job:" + job, -1) < version:
            w.jobs.add(job)
            if kind == "submitted":
                w.created.add("job:" + job)

    @staticmethod
    def _fires(w: Work, job: str, record: _Record) -> None:
        reason = record.reason if isinstance(record.reason, str) else ""
        for fire in record.fires if isinstance(record.fires, list) else []:
            text = str(fire)
            if text.isdigit() and reason:
                w.fires.append((job, int(text), reason))

    def _slot(self, w: Work, slot: str, kind: str, record: _Record) -> None:
        w.slots[slot] = (kind, record)
        if kind == "submitted":
            w.created.add(slot)
        elif self.held.pop(slot, None) is not None:
            w.created.add(slot)  # held back, never written: still new

    def take_deferred(self, work: dict[int, Work], everything: bool, limit: int) -> int:
        """Add up to `limit` held-back slots whose deadline passed (or any, oldest first) to
        the batch, as new rows; returns how many."""
        now, taken = self.clock.monotonic(), 0
        while self.held and taken < limit:
            slot, (shard, deadline) = next(iter(self.held.items()))
            if deadline > now and not everything:
                break
            del self.held[slot]
            w = work.setdefault(shard, Work())
            w.slots.setdefault(slot, ("deferred", _Record(slot=slot)))
            w.created.add(slot)
            taken += 1
        return taken

    def forget_oldest(self) -> None:
        """Keep the memory of versions read within `seen_capacity`."""
        excess = len(self.seen) - self.config.seen_capacity
        if excess > 0:  # dicts keep insertion order: drop the oldest tenth past the bound
            for key in list(itertools.islice(self.seen, excess + self.config.seen_capacity
                                             // 10)):
                del self.seen[key]
