"""The rows the snapshotter writes, built from the Redis hashes the events point at.

The store holds each slot's latest known state (`state` is the slot hash, attempts included)
plus, for SQL users, a row per attempt of the slots that had more than one (`attempt_log`;
the `attempts` view adds every other slot's one attempt, from its state). Upserts are keyed by (namespace, job_id[, fire_ms[,
number]]) and guarded by `version` (the shard's last events-stream id at read time), so
replaying a batch, or two snapshotters racing on one slot, never moves a row back to an
older state.

Rows are NamedTuples rather than Structs: COPY and executemany take tuples as they are.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from scheduler.core.events import FINAL_STATUS
from scheduler.core.models import Slot, slot_from_hash, whole_number
from scheduler.core.states import TERMINAL, JobKind

DAY_MS = 86_400_000
SCHEMA_VERSION = 4

_json = msgspec.json.Encoder()
_TERMINAL = frozenset(s.value for s in TERMINAL)
_state_decoder = msgspec.json.Decoder(dict[str, str])


class JobRow(NamedTuple):
    namespace: str
    job_id: str
    task: str
    queue: str
    kind: str
    created_ms: int
    fire_ms: int
    definition: str  # the job hash as a JSON object


class SlotRow(NamedTuple):
    namespace: str
    job_id: str
    fire_ms: int
    status: str
    task: str
    queue: str
    attempt: int
    failures: int
    available_ms: int | None
    finished_ms: int | None
    version: int
    state: str  # the slot hash as a JSON object


class AttemptRow(NamedTuple):
    namespace: str
    job_id: str
    fire_ms: int
    number: int
    worker: str | None
    claimed_ms: int | None
    lease_until_ms: int | None
    started_ms: int | None
    finished_ms: int | None
    outcome: str | None
    error: str | None
    version: int


class FireRow(NamedTuple):
    """A fire ledger entry: an occurrence of a recurring job that will not run, and why
    (a `not_run` event's; scheduler/core/ledger.py)."""

    namespace: str
    job_id: str
    fire_ms: int
    reason: str


class Ledger(NamedTuple):
    """What the store holds of one job's timeline over a range of fire times: its slots
    (fire_ms, slot hash) and its ledger entries (fire_ms, reason), each in fire-time order."""

    slots: list[tuple[int, dict[str, str]]]
    entries: list[tuple[int, str]]


class Batch(msgspec.Struct):
    """Rows to upsert, and rows the writer believes are new (`new_*`: the snapshotter puts
    there the slots and jobs submitted within the batch that it has not written before). A
    store may insert the new rows without the upsert's conflict handling, as long as it falls
    back to upserting everything when one of them exists after all."""

    jobs: list[JobRow] = []
    slots: list[SlotRow] = []
    attempts: list[AttemptRow] = []
    new_jobs: list[JobRow] = []
    new_slots: list[SlotRow] = []
    new_attempts: list[AttemptRow] = []
    fires: list[FireRow] = []  # always upserted: few, and an entry may be written twice

    def __len__(self) -> int:
        return (len(self.jobs) + len(self.slots) + len(self.attempts) + len(self.new_jobs)
                + len(self.new_slots) + len(self.new_attempts) + len(self.fires))

    def merged(self) -> Batch:
        """Every row as an upsert."""
        if not (self.new_jobs or self.new_slots or self.new_attempts):
            return self
        return Batch(jobs=self.jobs + self.new_jobs, slots=self.slots + self.new_slots,
                     attempts=self.attempts + self.new_attempts, fires=self.fires)


class RecoveryJob(NamedTuple):
    job_id: str
    definition: dict[str, str]
    kind: str
    created_ms: int
    last_fire_ms: int | None


# --- rows from Redis hashes ----------------------------------------------------------------


def text_hash(reply: list[Any] | dict[Any, Any]) -> dict[str, str]:
    """An HGETALL reply (a RESP3 map, or RESP2's alternating field and value) as text: already
    text when the connection decoded it (reads.py's raw reads), else bytes. Every field
    the scheduler writes is UTF-8 text (payloads are JSON); bytes that are not, written
    straight to a script past the SDK, read as U+FFFD (as reads.py's raw reads do)."""
    if isinstance(reply, dict):
        first = next(iter(reply), "")
        if isinstance(first, str):
            return reply
        return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
                for k, v in reply.items()}
    if reply and isinstance(reply[0], str):
        it = iter(reply)
        return dict(zip(it, it, strict=True))
    it = iter(reply)
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
            for k, v in zip(it, it, strict=True)}


def _whole(h: dict[str, str], name: str, default: int = 0) -> int:
    """A number of the hash for its column; one that is not a whole number (written past the
    scripts) takes the default, so the row is still written: its state keeps the text, and
    reads of it show the slot unreadable (models.slot_from_hash)."""
    value = h.get(name)
    number = whole_number(value) if value else None
    # A column is a 64-bit integer: past it, the store would refuse the whole batch.
    return default if number is None or not -2**63 <= number < 2**63 else number


def job_row(namespace: str, job_id: str, h: dict[str, str]) -> JobRow:
    return JobRow(namespace, job_id, h.get("task", ""), h.get("queue", "default"),
                  h.get("kind", JobKind.IMMEDIATE), _whole(h, "created_ms"),
                  _whole(h, "fire_ms"), _json.encode(h).decode())




def slot_rows(namespace: str, slot_id: str, h: dict[str, str], version: int
              ) -> tuple[SlotRow, list[AttemptRow]]:
    if "grant" in h:
        # A keyed slot's copy of its job's fields for its take (grant_copy in lua/_lib.lua):
        # the job row holds them, and a slot restored from its row must not carry a stale copy.
        h = {k: v for k, v in h.items() if k != "grant"}
    status = h.get("status", "")
    attempt = _whole(h, "attempt")
    job_id = h.get("job_id", "")
    fire_ms = _whole(h, "fire_ms")
    if not attempt or (attempt == 1 and "a:1" not in h):
        # Never claimed, or the common case: one attempt, still in the slot's own fields
        # (complete.lua archives an attempt as JSON only when another one starts). The slot
        # row's state holds it, and the `attempts` view reads it from there (migration 0002).
        attempts = []
    else:
        slot = slot_from_hash(slot_id, {k.encode(): v.encode() for k, v in h.items()})
        attempts = [AttemptRow(namespace, slot.job_id, slot.fire_ms, a.number, a.worker,
                               a.claimed_ms, a.lease_until_ms, a.started_ms, a.finished_ms,
                               a.outcome.value if a.outcome else None, a.error, version)
                    for a in slot.attempts]
    finished = (_whole(h, "finished_ms") or None) if status in _TERMINAL else None
    row = SlotRow(namespace, job_id, fire_ms, status, h.get("task", ""),
                  h.get("queue", "default"), attempt, _whole(h, "failures"),
                  _whole(h, "available_ms") or fire_ms, finished, version,
                  _json.encode(h).decode())
    return row, attempts


def event_slot_row(namespace: str, slot_id: str, kind: str, record: dict[str, Any]
                   ) -> SlotRow | None:
    """What an event alone says about a slot whose hash is gone. Version 0: such a row is
    only inserted when the store has none, never replaces a row read from the hash."""
    status = FINAL_STATUS.get(kind)  # type: ignore[call-overload]
    if status is None:
        return None
    job_id, _, fire = slot_id.rpartition(":")
    state = {"job_id": job_id, "fire_ms": fire, "status": status}
    return SlotRow(namespace, job_id, int(fire), status, str(record.get("task") or ""),
                   str(record.get("queue") or "default"), int(record.get("attempt") or 0), 0,
                   None, None, 0, _json.encode(state).decode())


def slot_from_state(job_id: str, fire_ms: int, state: str | dict[str, str]) -> Slot:
    h = _state_decoder.decode(state) if isinstance(state, str | bytes) else state
    return slot_from_hash(f"{job_id}:{fire_ms}",
                          {k.encode(): str(v).encode() for k, v in h.items()})


def decode_state(state: str | dict[str, str]) -> dict[str, str]:
    if isinstance(state, str | bytes):
        return _state_decoder.decode(state)
    return {k: str(v) for k, v in state.items()}


def days_of(batch: Batch) -> set[int]:
    return {r.fire_ms // DAY_MS for rows in (batch.slots, batch.attempts, batch.new_slots,
                                             batch.new_attempts) for r in rows}


def is_terminal(status: str) -> bool:
    return status in _TERMINAL
