"""Runs that have left Redis: the history store's slots (`history`), and a job's runs
from Redis and the store together (`runs`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduler.core.errors import JobNotFound, StoreUnavailable, ValidationError
from scheduler.core.keys import check_job_id
from scheduler.core.models import Slot
from scheduler.core.states import SlotStatus
from scheduler.sdk.jobs import slots
from scheduler.sdk.requests import Op, StoreCall
from scheduler.sdk.state import ClientState


def history(core: ClientState, *, job_id: str | None = None, status: str | None = None,
            since: datetime | int | None = None, until: datetime | int | None = None,
            limit: int = 100) -> Op[list[Slot]]:
    """Slots from the history store, newest fire time first. since/until bound the fire
    time (aware datetimes or ms); status is a slot status."""
    query = history_query(core.namespace, job_id, status, since, until, limit)
    namespace = query.pop("namespace")
    return (yield StoreCall("history", (namespace,), query))  # type: ignore[no-any-return]


def runs(core: ClientState, job_id: str) -> Op[list[Slot]]:
    """A job's slots: those still in Redis, and from the history store those that have
    left it (retention); JobNotFound when neither knows the job."""
    try:
        live = yield from slots(core, job_id)
    except JobNotFound:
        live = []
    try:
        past = yield from history(core, job_id=job_id, limit=10_000)
    except StoreUnavailable:
        if not live:
            raise
        past = []  # Redis alone still answers for the slots it holds
    return merge_runs(job_id, live, past)


def history_query(namespace: str, job_id: str | None, status: str | None,
                   since: datetime | int | None, until: datetime | int | None,
                   limit: int) -> dict[str, Any]:
    """The store.history() arguments, validated (a bad one raises and nothing is read)."""
    if job_id is not None:
        check_job_id(job_id)
    if status is not None:
        try:
            status = SlotStatus(status).value
        except ValueError:
            raise ValidationError("status", f"{status!r} is not a slot status; use one of "
                                  + ", ".join(s.value for s in SlotStatus)) from None
    if not isinstance(limit, int) or limit < 1:
        raise ValidationError("limit", f"{limit!r} is not allowed; must be an integer >= 1")
    return {"namespace": namespace, "job_id": job_id, "status": status,
            "since_ms": ms_of(since, 0), "until_ms": ms_of(until, 2**62), "limit": limit}


def merge_runs(job_id: str, live: list[Slot], past: list[Slot]) -> list[Slot]:
    have = {s.slot_id for s in live}
    merged = live + [s for s in past if s.slot_id not in have]
    if not merged:
        raise JobNotFound(job_id)
    return sorted(merged, key=lambda s: s.fire_ms)


def ms_of(value: datetime | int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError("since/until", "datetimes must be timezone-aware (UTC)")
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValidationError("since/until", f"{value!r} is not a datetime or a time in ms")


