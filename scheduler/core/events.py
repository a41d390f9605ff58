"""The lifecycle event types: what each shard's events stream (`<ns>:{sNN}:events`) says
happened. The Lua transitions write them (`emit` in _lib.lua, and complete.lua's own XADD);
the snapshotter and the history store read them. tests/lua/test_lua_contracts.py checks that every
type a script writes is declared here, and every type declared here is written.

Each entry: `type`, `ts` (Redis ms), `worker`, and `data`, a JSON list of records (one per
slot or job the transition touched), each a JSON object, or on the hot path the slot id
alone: a "submitted" record of a job with a slot (its job id is the slot id's prefix), a
"queued" record (not an overlap="skip" slot's: {slot, job}, its job's `active` changed, so the
snapshotter copies the job too), and the records of a "succeeded" entry whose slots all
succeeded with the same attempt, which its field `attempt` then holds (submit.lua,
promote.lua, complete.lua). `records()` reads either form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    # a job and its first slot (submit.lua), or a slot restored from history (restore.lua)
    SUBMITTED = "submitted"
    RECOVERED = "recovered"
    # cron (materialize.lua): occurrences created; occurrences skipped or not backfilled
    MATERIALIZED = "materialized"
    SKIPPED = "skipped"
    MISSED = "missed"
    # occurrences written to a job's fire ledger (core/ledger.py) by materialize, redefine or
    # delete_job: one record {job, reason, fires: [fire_ms as text]}; promote's overlap
    # entries have their skipped slot instead
    NOT_RUN = "not_run"
    # a slot's way through its attempts
    QUEUED = "queued"  # promoted from `due` into its dispatch stream
    CLAIMED = "claimed"  # a run still going at its worker's first heartbeat (heartbeat.lua)
    SUCCEEDED = "succeeded"
    RETRY = "retry"
    DEAD = "dead"
    RELEASED = "released"  # handed back by a stopping worker
    REFUSED = "refused"  # a commit by a worker that no longer held the lease
    LOST = "lost"  # an at-most-once lease expired
    RECLAIMED = "reclaimed"  # an at-least-once lease expired: dispatched again
    REDISPATCHED = "redispatched"  # an entry read but never claimed, dispatched again
    ORPHANED = "orphaned"  # a slot that fell out of every index, repaired (sweep.lua)
    # an operator's actions
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "cancelled"
    REPLAYED = "replayed"
    PURGED = "purged"
    DELETED = "deleted"  # a job's series ended (delete_job.lua): the job's definition changed
    TRIGGERED = "triggered"  # one extra slot of a job, now (trigger.lua)
    REDEFINED = "redefined"  # a named schedule's definition replaced (redefine.lua)
    # shard ownership (lease.lua)
    OWNER = "owner"


# Types that only move slots. Any other type (submissions, and whatever a newer version adds)
# also makes the snapshotter copy the job definition.
SLOT_ONLY = frozenset({
    EventType.CLAIMED, EventType.SUCCEEDED, EventType.RETRY, EventType.DEAD,
    EventType.CANCELLED, EventType.CANCEL_REQUESTED, EventType.REFUSED, EventType.RELEASED,
    EventType.LOST, EventType.RECLAIMED, EventType.REDISPATCHED, EventType.REPLAYED,
    EventType.PURGED, EventType.QUEUED, EventType.RECOVERED, EventType.SKIPPED,
    EventType.ORPHANED})

# The status an event proves for a slot whose hash is already gone (history rows).
FINAL_STATUS = {EventType.SUCCEEDED: "succeeded", EventType.DEAD: "dead",
                EventType.CANCELLED: "cancelled", EventType.LOST: "lost",
                EventType.PURGED: "dead"}


def records(fields: Mapping[bytes, bytes]) -> list[dict[str, Any]]:
    """An entry's records as objects: a slot id alone is {"slot": id}, with "attempt" from
    the entry's `attempt` when it has one (for readers that are not the snapshotter's hot
    path: tests, tools)."""
    attempt = fields.get(b"attempt")
    alone = {"attempt": int(attempt)} if attempt else {}
    return [{"slot": r, **alone} if isinstance(r, str) else r
            for r in json.loads(fields.get(b"data") or b"[]")]
