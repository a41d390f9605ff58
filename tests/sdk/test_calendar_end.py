"""The calendar ends with year 9999 (the last instant a datetime can show): a schedule that
reaches past it is a ValidationError for every caller (SDK, CLI, the outbox's relay), and a
series that runs into it ends there: its next fire times stop, its job reads, and the
materializer ends it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from helpers import sched
from scheduler import Client, ValidationError
from scheduler.core.cron import LATEST_MS, CronSpec
from scheduler.core.states import Catchup
from scheduler.core.timing import utc_of_ms
from scheduler.node.materializer import Recurrence, plan

LAST_31_DEC = int(datetime(9999, 12, 31, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize("options", [
    {"cron": "0 0 1 1 *", "start_at": datetime(9999, 12, 31, tzinfo=UTC)},
    {"cron": "0 0 * * *", "start_at": datetime(9999, 12, 31, 23, 59, tzinfo=UTC)},
    # 23:00 in New York on 31 December 9999 is already year 10000 in UTC.
    {"cron": "0 23 31 12 *", "tz": "America/New_York",
     "start_at": datetime(9999, 12, 30, tzinfo=UTC)},
    {"cron": "0 0 1 1 *", "tz": "Asia/Tokyo", "start_at": datetime(9999, 12, 31, 23, 59,
                                                                    tzinfo=UTC)},
])
def test_a_first_fire_past_year_9999_is_a_validation_error(redis_url: str, ns: str,
                                                           options: dict[str, object]) -> None:
    with Client(redis_url, ns) as client:
        with pytest.raises(ValidationError, match="year 9999") as err:
            client.submit("t", **options)  # type: ignore[arg-type]
        assert "\n" not in str(err.value)
        with pytest.raises(ValidationError, match="year 9999"):
            client.schedule("yearly", "t", **options)  # type: ignore[arg-type]
        assert client.list_jobs() == []


def test_a_series_that_reaches_year_9999_ends_there(redis_url: str, ns: str) -> None:
    """Its first fire is the last one the calendar has: next_fires lists it alone, the job
    reads, and the materializer's plan ends the series after it."""
    with Client(redis_url, ns) as client:
        job_id = client.submit("t", cron="0 0 31 12 *",
                               start_at=datetime(9999, 12, 30, tzinfo=UTC))
        assert client.next_fires(job_id, 5) == [datetime(9999, 12, 31, tzinfo=UTC)]
        assert client.get_job(job_id).next_fire_ms == LAST_31_DEC
        named = client.schedule("last-day", "t", cron="59 23 31 12 *",
                                start_at=datetime(9999, 12, 30, tzinfo=UTC))
        assert client.next_fires(named, 3) == [utc_of_ms(LATEST_MS - 59_000)]
        assert client.next_fires(named, 3) == [datetime(9999, 12, 31, 23, 59, tzinfo=UTC)]
    recurrence = Recurrence(spec=CronSpec("0 0 31 12 *"), catchup=Catchup.ALL,
                            catchup_limit=10, end_ms=0)
    made = plan(recurrence, LAST_31_DEC, LAST_31_DEC, 3_000, 5_000)
    assert (made.fires, made.next_ms) == ([LAST_31_DEC], -1)


def test_cron_occurrences_stop_at_the_calendars_end() -> None:
    spec = CronSpec("* * * * * *")
    assert list(spec.after(LATEST_MS - 3_000)) == [LATEST_MS - 2_000, LATEST_MS - 1_000,
                                                   LATEST_MS]
    assert list(CronSpec("0 0 1 1 *", "Asia/Tokyo").after(LATEST_MS - 1)) == []
    with pytest.raises(ValidationError, match="no occurrence after 9999-12-31T00:00:00"):
        CronSpec("0 0 31 12 *").next_after(LAST_31_DEC)
    assert len(list(CronSpec("0 0 1 1 *").before(0))) == 1969  # back to year 1, then ends


def test_the_cli_refuses_a_start_past_the_calendar_in_one_line(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, "submit", "t", "--cron", "0 0 1 1 *",
                           "--start-at", "9999-12-31T00:00:00Z")
    assert code != 0 and "Traceback" not in out + err
    assert len(err.strip().splitlines()) == 1 and "year 9999" in err, err


@pytest.mark.parametrize("delay", [10**400, -(10**400), 10**20], ids=["huge", "-huge", "1e20"])
def test_a_delay_past_the_calendar_is_a_validation_error(redis_url: str, ns: str,
                                                         delay: int) -> None:
    """An integer too large for a float is out of range like any other (not an
    OverflowError)."""
    with Client(redis_url, ns) as client:
        with pytest.raises(ValidationError, match="from 0 to 31,536,000"):
            client.submit("t", delay=delay)
