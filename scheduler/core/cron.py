"""Cron expressions: validation and occurrence times (ms since the epoch, UTC instants).

Five fields (minute hour day-of-month month day-of-week), or six with a seconds field first
(`*/10 * * * * *` is every ten seconds). Times are wall-clock times in `tz` (UTC by default).

Daylight saving: the expression is matched against local wall-clock times, then each is
turned into an instant.
- A local time that does not exist that day (the hour skipped when clocks go forward) is
  skipped: `30 2 * * *` in Europe/Paris has no run on the spring-forward day.
- A local time that occurs twice (the hour repeated when clocks go back) runs once, at its
  first occurrence (fold=0): `30 2 * * *` runs at 02:30 CEST, not again at 02:30 CET. The
  same holds for expressions that fire every few minutes: the repeated hour runs once.

The calendar ends with year 9999 (what a datetime, and so every reader of a fire time, can
show): a series has no occurrence after LATEST_MS, and `next_after` raises ValidationError
when none is left before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from scheduler.core.errors import ValidationError

# The last instant a datetime (and so the history store and every listing) can show: a fire
# time past it would be accepted and then break every reader of the namespace.
LATEST_MS = int(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp() * 1000)
# What datetime and croniter raise past year 9999 (or before year 1), inside the iteration.
_CALENDAR_ENDS = (OverflowError, ValueError)

_HINT = ("use 5 fields (minute hour day month weekday), 6 with seconds first, or @hourly, "
         "@daily, @weekly, @monthly, @yearly")


def check_tz(tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise ValidationError("tz", f"{tz!r} is not a time zone; use an IANA name such as "
                                    f"Europe/Paris or UTC")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError("tz", f"{tz!r} is not a known IANA time zone (e.g. Europe/Paris, "
                                    f"America/New_York, UTC)") from None


# The usual shorthands, stored as the expression they stand for (so every reader of a job's
# `cron` field sees 5 fields).
ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
           "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@hourly": "0 * * * *"}


def check_cron(expr: object) -> str:
    if not isinstance(expr, str) or not expr.strip():
        raise ValidationError("cron", f"{expr!r} is not a cron expression; {_HINT}")
    expr = " ".join(expr.split())
    expr = ALIASES.get(expr.lower(), expr)
    fields = len(expr.split(" "))
    if fields not in (5, 6):
        raise ValidationError("cron", f"{expr!r} has {fields} fields; {_HINT}")
    try:
        it = croniter(expr, datetime(2000, 1, 1), second_at_beginning=True)
    except (CroniterError, ValueError, KeyError) as exc:
        raise ValidationError("cron", f"{expr!r} is not valid ({exc}); {_HINT}") from None
    try:
        it.get_next(datetime)
    except CroniterError:
        raise ValidationError("cron", f"{expr!r} matches no date (e.g. February 30); check "
                                      f"the day and month fields") from None
    return expr


class CronSpec:
    """A validated expression in a zone; iterates occurrence instants in ms."""

    __slots__ = ("expr", "tz", "zone")

    def __init__(self, expr: str, tz: str = "UTC") -> None:
        self.expr = check_cron(expr)
        self.tz = tz or "UTC"
        self.zone = check_tz(self.tz)

    def _local(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, self.zone).replace(tzinfo=None, fold=0)

    def _instant(self, local: datetime) -> int | None:
        """The instant of a local wall-clock time; None when it does not exist that day."""
        aware = local.replace(tzinfo=self.zone, fold=0)
        utc = aware.astimezone(UTC)
        if utc.astimezone(self.zone).replace(tzinfo=None) != local:
            return None  # skipped by a spring-forward change
        return int(utc.timestamp() * 1000)

    def after(self, ms: int) -> Iterator[int]:
        """Occurrences strictly after `ms`, ascending, up to LATEST_MS (then it ends)."""
        # No local time before local(ms) maps to a later instant (a repeated hour maps to
        # its first pass), so starting there misses nothing; the filter drops the repeated
        # hour's times when `ms` lies in its second pass.
        try:
            it = croniter(self.expr, self._local(ms), second_at_beginning=True)
            while True:
                local: datetime = it.get_next(datetime)
                instant = self._instant(local)
                if instant is not None and instant > LATEST_MS:
                    return
                if instant is not None and instant > ms:
                    yield instant
        except _CALENDAR_ENDS:
            return  # the next local time, or its instant, is past year 9999

    def before(self, ms: int) -> Iterator[int]:
        """Occurrences strictly before `ms`, descending, down to year 1 (then it ends)."""
        try:
            start = self._local(ms)
            if datetime.fromtimestamp(ms / 1000, self.zone).fold:
                # In the second pass of a repeated hour, the rest of that hour's local times
                # already ran (as first-pass instants before `ms`).
                start += timedelta(hours=1)
            it = croniter(self.expr, start, second_at_beginning=True)
            while True:
                local: datetime = it.get_prev(datetime)
                instant = self._instant(local)
                if instant is not None and instant < ms:
                    yield instant
        except _CALENDAR_ENDS:
            return

    def next_after(self, ms: int) -> int:
        """The first occurrence after `ms`; ValidationError when none is left before the
        end of year 9999."""
        for instant in self.after(ms):
            return instant
        raise ValidationError("cron", f"{self.expr!r} has no occurrence after "
                                      f"{_shown(ms)} before the end of year 9999")


def _shown(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
    except _CALENDAR_ENDS:
        return f"{ms} ms"
