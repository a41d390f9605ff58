"""Bad schedule input: a ValidationError naming the field from the SDK, one line from the
CLI, and nothing written to Redis."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from conftest import ns_keys
from helpers import sched
from scheduler import Client, JobSpec, ValidationError

SOON = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("options", "field", "problem"), [
    ({"cron": "61 * * * *"}, "cron", "is not valid"),
    ({"cron": "* * *"}, "cron", "has 3 fields; use 5 fields"),
    ({"cron": "* * * * * * *"}, "cron", "has 7 fields"),
    ({"cron": "0 0 30 2 *"}, "cron", "matches no date"),
    ({"cron": "0 8 * * *", "tz": "Mars/Olympus"}, "tz", "is not a known IANA time zone"),
    ({"at": datetime(2030, 1, 1)}, "at", "is a naive datetime"),
    ({"delay": -5}, "delay", "-5 is not allowed; must be a number of seconds from 0 to "
                             "31,536,000 (a year"),
    ({"delay": timedelta(seconds=-1)}, "delay", "from 0 to 31,536,000"),
    ({"delay": timedelta(days=366)}, "delay", "from 0 to 31,536,000"),
    ({"delay": "soon"}, "delay", "is not a number of seconds"),
    ({"cron": "* * * * *", "start_at": SOON, "end_at": SOON - timedelta(days=1)}, "end_at",
     "is not after start_at"),
    ({"delay": 5, "cron": "* * * * *"}, "cron", "cannot be combined with delay"),
    ({"at": SOON, "delay": 5}, "at", "cannot be combined with delay"),
    ({"cron": "* * * * *", "catchup": "some"}, "catchup", "use one of all, latest, none"),
    ({"cron": "* * * * *", "overlap": "never"}, "overlap", "use one of allow, skip"),
    ({"delay": 5, "tz": "UTC"}, "tz", "only applies to recurring jobs"),
    ({"cron": "* * * * *", "start_at": datetime(2030, 1, 1)}, "start_at", "naive"),
])
def test_sdk_names_the_field_and_writes_nothing(r: redis.Redis, redis_url: str, ns: str,
                                                options: dict[str, Any], field: str,
                                                problem: str) -> None:
    with Client(redis_url, ns) as client:
        with pytest.raises(ValidationError) as err:
            client.submit("t", **options)
        assert err.value.field == field and problem in err.value.problem, str(err.value)
        with pytest.raises(ValidationError):  # one bad job in a batch: nothing is written
            client.submit_many([JobSpec(task="ok", delay=1), JobSpec(task="t", **options)])
    assert ns_keys(r, ns) == []


@pytest.mark.parametrize(("args", "message"), [
    (["--cron", "61 * * * *"], "error: cron: '61 * * * *' is not valid"),
    (["--cron", "* * *"], "error: cron: '* * *' has 3 fields"),
    (["--cron", "0 0 30 2 *"], "error: cron: '0 0 30 2 *' matches no date"),
    (["--cron", "0 8 * * MON", "--tz", "Nowhere/City"], "error: tz: 'Nowhere/City' is not a known"),
    (["--at", "2030-01-01T08:00:00"], "error: at: 2030-01-01T08:00:00 is a naive datetime"),
    (["--at", "tomorrow"], "error: at: 'tomorrow' is not an ISO 8601 time"),
    (["--delay", "-5"], "error: delay: -5 is not allowed"),
    (["--delay", "5 minutes"], "error: delay: '5 minutes' is not a duration"),
    (["--cron", "* * * * *", "--start-at", "2030-01-02T00:00:00Z", "--end-at",
      "2030-01-01T00:00:00Z"], "error: end_at: is not after start_at"),
    (["--delay", "5s", "--cron", "* * * * *"], "error: cron: cannot be combined with delay"),
    (["--at", "2030-01-01T00:00:00Z", "--cron", "* * * * *"], "error: cron: cannot be combined"),
    (["--cron", "* * * * *", "--catchup", "maybe"], "error: Invalid value for '--catchup': 'maybe'"),
])
def test_cli_bad_schedule_is_one_line(capsys: pytest.CaptureFixture[str], r: redis.Redis,
                                      redis_url: str, ns: str, args: list[str],
                                      message: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, "submit", "demo.hello", *args)
    assert code != 0 and out == ""
    assert err.startswith(message) and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert ns_keys(r, ns) == []


def test_schedules_are_recorded_and_shown(capsys: pytest.CaptureFixture[str],
                                          redis_url: str, ns: str) -> None:
    code, out, _ = sched(capsys, redis_url, ns, "submit", "t", "--delay", "5m", "--json")
    assert code == 0

    delayed = json.loads(out)
    assert delayed["kind"] == "delayed" and delayed["next_fire_ms"] > 0
    code, out, _ = sched(capsys, redis_url, ns, "submit", "t", "--cron", "0 8 * * MON",
                         "--tz", "Europe/Paris", "--catchup", "latest", "--overlap", "skip",
                         "--end-at", "2099-01-01T00:00:00+01:00", "--json")
    assert code == 0
    cron = json.loads(out)
    assert cron["kind"] == "cron" and "slot_id" not in cron
    with Client(redis_url, ns) as client:
        job = client.get_job(cron["job_id"])
        assert (job.cron, job.tz, job.catchup, job.overlap) == ("0 8 * * MON", "Europe/Paris",
                                                                "latest", "skip")
        assert job.end_ms == int(datetime(2098, 12, 31, 23, tzinfo=UTC).timestamp() * 1000)
        fire = datetime.fromtimestamp(job.next_fire_ms / 1000, UTC)  # type: ignore[operator]
        assert fire.weekday() == 0 and fire.hour in (6, 7)  # 08:00 Paris is 06/07:00 UTC
        assert client.get_job(delayed["job_id"]).delay_s == 300

    code, out, _ = sched(capsys, redis_url, ns, "jobs", "list")
    assert "cron '0 8 * * MON' Europe/Paris, catchup latest, overlap skip" in out
    assert "delayed 300s" in out
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "list", "--json")
    assert {j["kind"] for j in json.loads(out)} == {"cron", "delayed"}
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "show", cron["job_id"])
    assert "schedule:   cron '0 8 * * MON'" in out and "next fire:" in out


def test_an_instant_in_the_past_runs_now(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        job_id = client.submit("t", at=datetime(2020, 1, 1, tzinfo=UTC))
        (slot,) = client.slots(job_id)
        assert slot.status == "queued" and slot.fire_ms == 1577836800000
        assert client.get_job(job_id).next_fire_ms is None


@pytest.mark.parametrize(("alias", "expr"), [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"),
                                             ("@WEEKLY", "0 0 * * 0"), ("@yearly", "0 0 1 1 *")])
def test_cron_shorthands_are_stored_as_what_they_stand_for(alias: str, expr: str) -> None:
    from scheduler.core.cron import check_cron

    assert check_cron(alias) == expr


@pytest.mark.parametrize("options", [
    {}, {"delay": 30}, {"delay": 0}, {"delay": timedelta(minutes=2), "timeout": 1.5},
    {"delay": 5, "priority": 1, "delivery": "at_most_once"}, {"at": SOON},
    {"cron": "*/5 * * * *", "tz": "Europe/Paris", "catchup": "latest"},
    {"delay": 5, "dedupe_key": "once-a"}, {"timeout": 2.0, "priority": 5},
])
def test_every_job_hash_holds_the_fields_of_its_options(r: redis.Redis, redis_url: str,
                                                        ns: str, options: dict[str, Any]
                                                        ) -> None:
    """submit_many makes each distinct option set's fields once and adds the schedule's:
    what it writes is what job_fields() lays out for the job alone."""
    from scheduler.core.keys import shard_of
    from scheduler.core.models import Delivery, RetryPolicy, job_fields
    from scheduler.core.timing import resolve

    sched_opts = {k: v for k, v in options.items() if k in ("delay", "at", "cron", "tz",
                                                            "catchup")}
    with Client(redis_url, ns) as client:
        # Twice in one batch and once more: the cached fields must not leak between jobs.
        ids = client.submit_many([{"task": "t", **options, **({"dedupe_key": None}
                                   if "dedupe_key" in options else {})}
                                  for _ in range(2)] + [{"task": "t", **options}])
        for job_id in ids:
            stored = {k.decode(): v.decode() for k, v in
                      r.hgetall(client.keys.job(shard_of(job_id, client.shards), job_id)).items()}
            fire = resolve(int(stored["created_ms"]), **sched_opts) if sched_opts else None
            dedupe = options.get("dedupe_key") if job_id == ids[-1] else None
            want = job_fields(b"null", options.get("timeout"), RetryPolicy(),
                              Delivery(options.get("delivery", "at_least_once")), dedupe,
                              fire.kind if fire else "immediate", fire.fields if fire else None,
                              options.get("priority", 3))
            pairs = dict(zip(want[::2], want[1::2], strict=True))
            extra = {k: v for k, v in stored.items()
                     if k not in ("task", "queue", "fire_ms", "created_ms")}
            assert extra == {k: str(v) for k, v in pairs.items()}, (options, job_id)


def test_delays_in_one_batch_keep_their_own_fields(r: redis.Redis, redis_url: str,
                                                   ns: str) -> None:
    from scheduler.core.keys import shard_of

    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "t", "delay": d} for d in (30, 0, 5, 0)])
        got = [r.hget(client.keys.job(shard_of(j, client.shards), j), "delay_ms") for j in ids]
    assert got == [b"30000", None, b"5000", None]
