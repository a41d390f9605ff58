"""A run's result for the caller: `result()` waits for a slot to end and returns what its
handler returned (stored with the slot by complete.lua, at most the payload limit; kept in the
history store after the slot leaves Redis), or raises RunFailed with how it ended, and
ResultExpired once the namespace's retention removed it and no history store has it."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from scheduler.core.errors import (
    JobNotFound,
    ResultExpired,
    ResultTimeout,
    RunFailed,
    SlotNotFound,
    StoreUnavailable,
    ValidationError,
)
from scheduler.core.finite import finite_number
from scheduler.core.keys import check_job_id, shard_of, split_slot_id
from scheduler.core.models import Slot
from scheduler.core.namespace import parse_retention, read_retention
from scheduler.core.states import TERMINAL, SlotStatus
from scheduler.sdk.history import history
from scheduler.sdk.jobs import get_job, get_slot
from scheduler.sdk.requests import Io, Op, Pipe
from scheduler.sdk.state import ClientState, ready

POLL_S = 0.05  # between looks at a slot still running; a wait costs one HGETALL per look


def _sleep(redis: Any, seconds: float) -> None:
    time.sleep(seconds)


async def _asleep(redis: Any, seconds: float) -> None:
    await asyncio.sleep(seconds)


def result(core: ClientState, job_or_slot_id: str, timeout: float | None = None) -> Op[Any]:
    """The value the slot's handler returned (None if it returned nothing), once the slot
    has ended; for a job id, its one slot (a recurring job has many: give the slot id).
    Waits up to `timeout` seconds (None: as long as it takes); raises ResultTimeout then,
    and RunFailed when the slot ended without success."""
    if timeout is not None and (not finite_number(timeout) or timeout < 0):
        raise ValidationError("timeout", f"{timeout!r} is not a finite number of seconds >= 0 "
                                         f"(None waits as long as it takes)")
    try:
        slot_id = yield from _slot_of(core, job_or_slot_id)
    except JobNotFound:
        yield from _raise_if_expired(core, job_or_slot_id)
        raise
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            slot = yield from _current(core, slot_id)
        except SlotNotFound:
            yield from _raise_if_expired(core, slot_id)
            raise
        if slot.status in TERMINAL:
            if slot.status is SlotStatus.SUCCEEDED:
                return slot.result
            raise RunFailed(slot_id, slot.status.value,
                            slot.attempts[-1].error if slot.attempts else None)
        if deadline is not None and time.monotonic() >= deadline:
            raise ResultTimeout(slot_id, slot.status.value, timeout or 0)
        yield Io(_sleep, _asleep, (POLL_S,))


# jobspec._JobIds: submit ms first; a dedupe window's or a concurrency key's id holds one
_DRAWN_ID = re.compile(r"(?:^|\.)([0-9a-f]{12})7[0-9a-f]{19}(?:\.|$)")


def _raise_if_expired(core: ClientState, given: str) -> Op[None]:
    """ResultExpired when the job is gone and its shard's expirer has removed work that
    finished after the job was submitted (or its slot was due): it ended and left Redis.
    Nothing when that cannot be told (an id chosen by the caller carries no time)."""
    job_id, _, fire = given.rpartition(":") if ":" in given else (given, "", "")
    if fire.isdigit():
        since = int(fire)
    elif drawn := _DRAWN_ID.search(job_id):
        since = int(drawn.group(1), 16)
    else:
        return
    yield from ready(core)
    pipe = Pipe()
    pipe.hget(core.keys.stats(shard_of(job_id, core.shards)), "retired_ms")
    read_retention(pipe, core.keys)
    retired, settings = yield pipe
    if retired is not None and int(retired) >= since:
        kept = parse_retention(settings)
        raise ResultExpired(job_id, kept.retention_s, kept.retain_max)


def _slot_of(core: ClientState, given: str) -> Op[str]:
    if ":" in given:
        split_slot_id(given)  # ValidationError for a malformed one
        return given
    try:
        job = yield from get_job(core, given)
    except JobNotFound:
        # Retention removed it from Redis: its one slot may be in the history store.
        try:
            rows = yield from history(core, job_id=check_job_id(given), limit=2)
        except StoreUnavailable:
            raise JobNotFound(given) from None
        if len(rows) != 1:
            raise
        return rows[0].slot_id
    if job.cron:
        raise ValidationError("job_or_slot_id", f"{given} is a recurring job with a run per "
                                                f"occurrence: pass one slot's id")
    return f"{given}:{job.fire_ms}"


def _current(core: ClientState, slot_id: str) -> Op[Slot]:
    """The slot from Redis, or from the history store once retention has removed it."""
    try:
        return (yield from get_slot(core, slot_id))
    except SlotNotFound:
        pass
    try:
        rows = yield from history(core, job_id=split_slot_id(slot_id)[0], limit=10_000)
    except StoreUnavailable:
        raise SlotNotFound(slot_id) from None
    for row in rows:
        if row.slot_id == slot_id:
            return row
    raise SlotNotFound(slot_id)



