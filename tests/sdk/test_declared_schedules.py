"""Schedules declared with the code (`registry.schedule`): checked when declared, with no
I/O; applied by name at each start of the app (Client.declare), which deletes what the same
app declared before and no longer does, and leaves the API's schedules and other apps'
declarations alone."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
import redis

from scheduler import Client, Registry, ValidationError
from scheduler.core.keys import Keys
from scheduler.testing import TestScheduler


class Report(msgspec.Struct):
    day: str


def app(*names: str, cron: str = "0 2 * * *") -> Registry:
    registry = Registry()

    @registry.task("reports.build", queue="reports", timeout=60)
    def build(ctx: Any, payload: Report) -> str:
        return payload.day

    for name in names:
        registry.schedule(name, build, {"day": "today"}, cron=cron, tz="Europe/Paris")
    return registry


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "0 2 * * *", "tz": "Europe/Nowhere"}, "tz"),
    ({"cron": "0 2 * * *", "catchup": "some"}, "catchup"),
    ({"cron": "0 2 * * *", "overlap": "maybe"}, "overlap"),
    ({"cron": "0 2 * * *", "queue": "no spaces"}, "queue"),
    ({"cron": "0 2 * * *", "on_time_within": 0}, "on_time_within"),
])
def test_a_bad_option_is_refused_when_declared(kwargs: dict[str, Any], field: str) -> None:
    registry = Registry()
    with pytest.raises(ValidationError) as exc:
        registry.schedule("nightly", "reports.build", **kwargs)
    assert exc.value.field == field
    assert registry.schedules == {}


def test_a_bad_name_a_bad_typed_payload_and_a_name_declared_twice_are_refused() -> None:
    registry = Registry()

    @registry.task("reports.build")
    def build(ctx: Any, payload: Report) -> str:
        return payload.day

    registry.schedule("nightly", build, Report("today"), cron="0 2 * * *")
    with pytest.raises(ValidationError, match="name"):
        registry.schedule("no spaces", build, Report("x"), cron="0 2 * * *")
    with pytest.raises(ValidationError, match="day"):
        registry.schedule("other", build, {"day": 3}, cron="0 2 * * *")
    with pytest.raises(ValueError, match="'nightly' is already declared"):
        registry.schedule("nightly", "reports.build", cron="0 3 * * *")
    assert list(registry.schedules) == ["nightly"]


def test_a_handle_gives_its_task_name_and_defaults_and_the_declaration_writes_nothing(
        r: redis.Redis, ns: str) -> None:
    registry = app("nightly")
    declared = registry.schedules["nightly"]
    assert declared.task == "reports.build"
    assert declared.options["queue"] == "reports" and declared.options["timeout"] == 60
    assert declared.options["tz"] == "Europe/Paris"
    by_name = registry.schedule("by-name", "reports.build", {"day": "monday"}, cron="0 3 * * *",
                                timeout=5)
    assert (by_name.options["queue"], by_name.options["timeout"]) == ("reports", 5)
    with pytest.raises(ValidationError, match="day"):
        registry.schedule("bad", "reports.build", {"day": 1}, cron="0 3 * * *")
    elsewhere = registry.schedule("elsewhere", "mail.digest", cron="0 3 * * *")
    assert elsewhere.options["queue"] is None  # another app's task: the catalog's defaults
    assert not r.keys(f"{ns}:*")


def test_each_start_creates_updates_and_removes_by_name(r: redis.Redis, redis_url: str,
                                                          ns: str) -> None:
    with Client(redis_url, ns) as client:
        api = client.schedule("made-by-api", "reports.build", cron="0 4 * * *")
        other = client.declare("other.app:registry", app("theirs").schedules.values())
        assert (other.created, other.removed) == (1, [])

        first = client.declare("my.app:registry", app("a", "b").schedules.values())
        assert (first.declared, first.created, first.updated, first.removed) == (2, 2, 0, [])
        assert first.line() == "2 declared schedules: 2 created, 0 updated, 0 removed"
        again = client.declare("my.app:registry", app("a", "b").schedules.values())
        assert (again.created, again.updated, again.removed) == (0, 0, [])
        changed = client.declare("my.app:registry",
                                 app("a", cron="0 3 * * *").schedules.values())
        assert (changed.declared, changed.created, changed.updated, changed.removed) == \
            (1, 0, 1, ["b"])

        assert client.get_job("b").deleted_ms is not None
        assert client.get_job("a").cron == "0 3 * * *" and client.get_job("a").deleted_ms is None
        for untouched in (api, "theirs"):
            assert client.get_job(untouched).deleted_ms is None
        assert set(r.hkeys(Keys(ns).declared)) == {b"a", b"theirs"}
        assert client.get_job("a").queue == "reports"  # the task's default, from the app

        # Declared again by a later version (a rollback): a series again, not left deleted.
        back = client.declare("my.app:registry", app("a", "b").schedules.values())
        assert (back.created, back.removed) == (1, [])
        assert client.get_job("b").deleted_ms is None
        assert client.next_fires("b", 1)


def test_a_start_that_declares_nothing_removes_what_the_app_declared(
        redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        client.declare("my.app:registry", app("a").schedules.values())
        done = client.declare("my.app:registry", [])
        assert done.removed == ["a"] and client.get_job("a").deleted_ms is not None
        assert client.declare("my.app:registry", []).line() == \
            "0 declared schedules: 0 created, 0 updated, 0 removed"
        with pytest.raises(ValidationError, match="app"):
            client.declare(" ", [])
        with pytest.raises(ValidationError, match="'a' declared twice"):
            client.declare("my.app:registry", [*app("a").schedules.values(),
                                               *app("a").schedules.values()])


def test_the_testing_mode_runs_the_declared_schedules() -> None:
    registry = app("nightly")
    with TestScheduler(registry, start=datetime(2030, 1, 1, tzinfo=UTC)) as tester:
        ran = tester.advance(24 * 3600)
    assert [(run.job_id, run.result) for run in ran] == [("nightly", "today")]
    assert ran[0].fire_time == datetime(2030, 1, 1, 1, tzinfo=UTC)  # 02:00 in Paris


def test_many_processes_starting_at_once_apply_one_version(r: redis.Redis, redis_url: str,
                                                           ns: str) -> None:
    with Client(redis_url, ns) as client:
        client.declare("my.app:registry", app("a", "b").schedules.values())
    version = app("a", "c", cron="0 3 * * *").schedules.values()
    barrier = threading.Barrier(6)

    def start() -> Any:
        with Client(redis_url, ns) as client:
            barrier.wait()
            return client.declare("my.app:registry", version)

    with ThreadPoolExecutor(6) as pool:
        done = list(pool.map(lambda _: start(), range(6)))
    assert all(d.declared == 2 for d in done)
    with Client(redis_url, ns) as client:
        assert client.get_job("b").deleted_ms is not None
        for name in ("a", "c"):
            job = client.get_job(name)
            assert (job.cron, job.deleted_ms) == ("0 3 * * *", None)
        series = [m for s in range(client.shards) for m in r.zrange(Keys(ns).cron(s), 0, -1)]
    assert sorted(series) == [b"a", b"c"]  # one series each
    assert set(r.hkeys(Keys(ns).declared)) == {b"a", b"c"}


def test_a_start_that_cannot_reach_redis_warns_and_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    from scheduler.cli.run import apply_declared

    apply_declared("redis://127.0.0.1:1/0", "nowhere", "my.app:registry", app("a"))
    assert "declared schedules not applied: Redis did not answer" in caplog.text


def test_a_keyed_schedule_is_found_under_its_placed_id_when_dropped(redis_url: str,
                                                                     ns: str) -> None:
    registry = Registry()
    registry.schedule("tenant-report", "reports.build", cron="0 2 * * *",
                      concurrency_key="tenant-42")
    with Client(redis_url, ns, shards=4) as client:
        first = client.declare("my.app:registry", registry.schedules.values())
        assert (first.created, first.updated) == (1, 0)
        [job] = [j for j in client.list_jobs() if j.job_id.startswith("tenant-report")]
        assert job.job_id != "tenant-report" and job.deleted_ms is None  # placed: NAME.N
        assert client.declare("my.app:registry", []).removed == ["tenant-report"]
        assert client.get_job(job.job_id).deleted_ms is not None


def test_a_declared_objective_reaches_the_job(redis_url: str, ns: str) -> None:
    registry = Registry()
    registry.schedule("nightly", "reports.build", cron="0 2 * * *", on_time_within=90)
    registry.schedule("hourly", "reports.build", cron="0 * * * *")
    with Client(redis_url, ns) as client:
        client.declare("my.app:registry", registry.schedules.values())
        assert client.get_job("nightly").on_time_within_s == 90
        assert client.get_job("hourly").on_time_within_s == 2  # the default
        assert client.fires("nightly").summary.on_time_within_ms == 90_000
