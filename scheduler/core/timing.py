"""When a job runs: immediate, after a `delay`, `at` an instant, or on a `cron` schedule.

`resolve()` validates the schedule options of one submit and returns the job's kind, its
first fire time and the job-hash fields that record the schedule. Nothing here touches Redis.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from scheduler.core.cron import LATEST_MS, CronSpec
from scheduler.core.errors import ValidationError
from scheduler.core.models import MAX_SECONDS
from scheduler.core.states import Catchup, JobKind, Overlap

DEFAULT_CATCHUP_LIMIT = 1000
MAX_CATCHUP_LIMIT = 100_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def utc_of_ms(ms: int) -> datetime:
    """Epoch milliseconds as a timezone-aware UTC datetime, exactly (no float on the way)."""
    return EPOCH + ms * _MS


def ms_of_utc(moment: datetime) -> int:
    """A timezone-aware datetime as epoch milliseconds, exactly (utc_of_ms's inverse)."""
    return (moment - EPOCH) // _MS


def _bounded(field: str, ms: int) -> int:
    if not 0 <= ms <= LATEST_MS:
        raise ValidationError(field, "is out of range: a fire time must fall between 1970 "
                                     "and the end of year 9999")
    return ms


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    kind: JobKind
    fire_ms: int  # the first (for cron: the next) occurrence
    fields: dict[str, str | int]  # job-hash fields recording the schedule


def _instant_ms(field: str, value: object) -> int:
    if not isinstance(value, datetime):
        raise ValidationError(field, f"{value!r} is not a datetime; pass a timezone-aware "
                                     f"datetime, e.g. datetime(2027, 1, 1, 8, tzinfo=UTC)")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, f"{value.isoformat()} is a naive datetime (no time zone); "
                                     f"pass a timezone-aware one, e.g. with tzinfo=UTC or a "
                                     f"'Z'/'+02:00' suffix")
    return _bounded(field, int(value.timestamp() * 1000))


def _delay_ms(delay: object) -> int:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    # An int is compared as it is: one too large for a float is out of range, not an
    # OverflowError.
    if (not isinstance(seconds, int | float) or isinstance(seconds, bool)
            or (isinstance(seconds, float) and not math.isfinite(seconds))):
        raise ValidationError("delay", f"{delay!r} is not a number of seconds or a timedelta")
    if not 0 <= seconds <= MAX_SECONDS:
        shown = f"{seconds:g}" if abs(seconds) < 1e300 else "a number this large"
        raise ValidationError("delay", f"{shown} is not allowed; must be a number of seconds "
                                       f"from 0 to {MAX_SECONDS:,} (a year; `at` takes a "
                                       f"later instant)")
    return int(seconds * 1000)


def delayed(now_ms: int, delay: Any) -> Schedule:
    """A one-time job `delay` (seconds or a timedelta) after now_ms."""
    ms = _delay_ms(delay)
    return Schedule(kind=JobKind.DELAYED, fire_ms=_bounded("delay", now_ms + ms),
                    fields={"delay_ms": ms})


def resolve(now_ms: int, *, delay: Any = None, at: Any = None, cron: Any = None,
            tz: Any = None, catchup: Any = None, catchup_limit: Any = None,
            overlap: Any = None, start_at: Any = None, end_at: Any = None,
            on_time_within: Any = None) -> Schedule:
    given = [name for name, v in (("delay", delay), ("at", at), ("cron", cron)) if v is not None]
    if len(given) > 1:
        raise ValidationError(given[1], f"cannot be combined with {given[0]}; use only one of "
                                        f"delay, at, cron")
    if cron is None:
        for name, v in (("tz", tz), ("catchup", catchup), ("catchup_limit", catchup_limit),
                        ("overlap", overlap), ("start_at", start_at), ("end_at", end_at),
                        ("on_time_within", on_time_within)):
            if v is not None:
                raise ValidationError(name, "only applies to recurring jobs; add cron=...")
    if delay is not None:
        return delayed(now_ms, delay)
    if at is not None:
        return Schedule(kind=JobKind.AT, fire_ms=_instant_ms("at", at), fields={})
    if cron is None:
        return Schedule(kind=JobKind.IMMEDIATE, fire_ms=now_ms, fields={})
    fields = {} if on_time_within is None else {"on_time_ms": _on_time_ms(on_time_within)}
    made = _cron(now_ms, cron, tz, catchup, catchup_limit, overlap, start_at, end_at)
    return msgspec.structs.replace(made, fields={**made.fields, **fields}) if fields else made


def _on_time_ms(seconds: Any) -> int:
    """A schedule's objective: a run starting within this of its fire time is on time."""
    if (isinstance(seconds, bool) or not isinstance(seconds, int | float)
            or not math.isfinite(seconds) or not 0.001 <= seconds <= MAX_SECONDS):
        raise ValidationError("on_time_within", f"{seconds!r} is not allowed; must be a "
                                                f"number of seconds from 0.001 to "
                                                f"{MAX_SECONDS:,}")
    return round(seconds * 1000)


def _cron(now_ms: int, cron: Any, tz: Any, catchup: Any, catchup_limit: Any, overlap: Any,
          start_at: Any, end_at: Any) -> Schedule:
    spec = CronSpec(cron, "UTC" if tz is None else tz)
    catchup = Catchup.ALL if catchup is None else catchup
    if catchup not in set(Catchup):
        raise ValidationError("catchup", f"{catchup!r} is not a catch-up policy; use one of "
                                         f"{', '.join(Catchup)}")
    limit = DEFAULT_CATCHUP_LIMIT if catchup_limit is None else catchup_limit
    if (not isinstance(limit, int) or isinstance(limit, bool)
            or not 1 <= limit <= MAX_CATCHUP_LIMIT):
        raise ValidationError("catchup_limit", f"{limit!r} is not allowed; must be an integer "
                                               f"from 1 to {MAX_CATCHUP_LIMIT}")
    overlap = Overlap.ALLOW if overlap is None else overlap
    if overlap not in set(Overlap):
        raise ValidationError("overlap", f"{overlap!r} is not an overlap policy; use one of "
                                         f"{', '.join(Overlap)}")
    start_ms = _instant_ms("start_at", start_at) if start_at is not None else 0
    end_ms = _instant_ms("end_at", end_at) if end_at is not None else 0
    if end_ms and start_ms and end_ms <= start_ms:
        raise ValidationError("end_at", "is not after start_at; the job would never run")
    first = next(spec.after(max(now_ms, start_ms) - 1), None)
    if first is None:
        raise ValidationError("start_at" if start_ms > now_ms else "cron",
                              "leaves no occurrence before the end of year 9999; the job "
                              "would never run")
    if end_ms and first > end_ms:
        raise ValidationError("end_at", "is before the first occurrence; the job would never "
                                        "run (move end_at later or drop it)")
    fields: dict[str, str | int] = {"cron": spec.expr, "catchup": catchup,
                                    "overlap": overlap, "catchup_limit": limit}
    if spec.tz != "UTC":
        fields["tz"] = spec.tz
    if start_ms:
        fields["start_ms"] = start_ms
    if end_ms:
        fields["end_ms"] = end_ms
    return Schedule(kind=JobKind.CRON, fire_ms=first, fields=fields)
