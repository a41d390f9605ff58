"""A submit of a task no worker has registered (the task catalog does not list it): a
warning, once per task name per client, by default; refused, naming the known tasks closest
first and writing nothing, with the namespace's `strict_tasks` on. Through the SDK, the
CLI, a named schedule and the outbox relay; a TaskHandle's submit is not checked (its name
comes from code)."""

from __future__ import annotations

import asyncio
import json
import warnings

import pytest
import redis

from helpers import outbox_schema, run_until, sched
from scheduler import (
    AsyncClient,
    Client,
    Context,
    Registry,
    UnknownTaskWarning,
    ValidationError,
)
from scheduler.core.keys import Keys
from scheduler.redis.clock import RedisClock

registry = Registry()


@registry.task("emails.send", queue="mail")
def send(ctx: Context, payload: dict[str, int]) -> None:
    pass


@registry.task("emails.digest")
def digest(ctx: Context, payload: dict[str, int]) -> None:
    pass


@registry.task("reports.build")
def build(ctx: Context, payload: dict[str, int]) -> None:
    pass


elsewhere = Registry()  # a task whose workers never started in the namespace


@elsewhere.task("billing.charge", queue="billing")
def charge(ctx: Context, payload: dict[str, int]) -> None:
    pass


def _published(redis_url: str, ns: str, r: redis.Redis) -> None:
    with Client(redis_url, ns) as client:
        client.create_namespace()
    asyncio.run(run_until(redis_url, ns, registry, lambda: r.exists(Keys(ns).tasks) == 1))


def _jobs(r: redis.Redis, ns: str) -> list[bytes]:
    return list(r.scan_iter(match=f"{ns}:*job:*", count=1000))


def _quiet() -> warnings.catch_warnings[list[warnings.WarningMessage]]:
    """Records the warnings of its block (simplefilter("always") inside it: pyproject's
    filter ignores UnknownTaskWarning in the other tests)."""
    return warnings.catch_warnings(record=True)


def test_an_unknown_task_warns_once_per_name_per_client_naming_the_closest_known_first(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    _published(redis_url, ns, r)
    with Client(redis_url, ns) as client, _quiet() as caught:
        warnings.simplefilter("always")
        first = client.submit("emails.sned", {"number": 1})
        client.submit("emails.sned", {"number": 2})
        client.submit_many([{"task": "emails.sned"}, {"task": "reprots.build"},
                            {"task": "emails.send"}])
        known = client.submit("emails.send", {"number": 3})
        assert client.get_job(first).queue == "default"  # written, with no task defaults
        assert client.get_job(known).queue == "mail"
    assert [w.category for w in caught] == [UnknownTaskWarning] * 2, caught
    sned, reprots = (str(w.message) for w in caught)
    assert "'emails.sned' is not a task any worker of namespace" in sned
    # closest first: emails.send, then emails.digest, before reports.build
    listed = sned.split("closest first: ")[1].split(")")[0].split(", ")
    assert listed[0] == "emails.send" and set(listed) == {"emails.send", "emails.digest",
                                                          "reports.build"}
    assert reprots.split("closest first: ")[1].startswith("reports.build")
    assert caught[0].filename == __file__  # it points at the caller's line
    with Client(redis_url, ns) as other, _quiet() as again:  # another client: warned again
        warnings.simplefilter("always")
        other.submit("emails.sned")
    assert [w.category for w in again] == [UnknownTaskWarning]


def test_an_empty_catalog_says_no_worker_has_started(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client, pytest.warns(UnknownTaskWarning,
                                                       match="no worker has started"):
        client.submit("anything")


def test_a_task_registered_after_the_clients_last_read_is_known_at_once(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    """The client's copy of the catalog may predate a worker's start: before it warns (or
    refuses) it reads the catalog again, and the job takes the defaults now listed."""
    with Client(redis_url, ns, clock=RedisClock(resync_s=3600)) as client, _quiet() as caught:
        warnings.simplefilter("always")
        client.create_namespace()
        asyncio.run(run_until(redis_url, ns, registry, lambda: r.exists(Keys(ns).tasks) == 1))
        job_id = client.submit("emails.send", {"number": 1})
        assert client.get_job(job_id).queue == "mail"
    assert caught == []


def test_strict_tasks_refuses_an_unknown_task_and_writes_nothing(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    _published(redis_url, ns, r)
    with Client(redis_url, ns) as client:
        assert client.strict_tasks() is False
        assert client.set_strict_tasks(True) is True and client.strict_tasks() is True
        before = _jobs(r, ns)
        with pytest.raises(ValidationError) as refused:
            client.submit("emails.sned", {"number": 1})
        with pytest.raises(ValidationError, match="'reprots.build'"):
            client.submit_many([{"task": "emails.send"}, {"task": "reprots.build"}])
        with pytest.raises(ValidationError, match="strict_tasks"):
            client.schedule("nightly", "emails.sned", cron="0 3 * * *")
        assert _jobs(r, ns) == before  # nothing written, the batch's known job neither
        text = str(refused.value)
        assert text.startswith("task: 'emails.sned' is not a task any worker")
        assert "closest first: emails.send, " in text and "strict_tasks is on" in text
        assert client.get_job(client.submit("emails.send", {"number": 2})).queue == "mail"
        # The scheduler's own task (`sched verify`'s canary), never listed, is not refused.
        assert client.get_job(client.submit("sched.canary", {})).task == "sched.canary"
        with pytest.raises(ValidationError, match="True or False"):
            client.set_strict_tasks("yes")  # type: ignore[arg-type]
        client.set_strict_tasks(False)
        with pytest.warns(UnknownTaskWarning):
            client.submit("emails.sned")


def test_a_clients_strictness_follows_the_setting_within_its_resync(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    """A name already warned about costs no round trip, so a client learns that the
    namespace turned strict at its next clock re-sync, where it reads the setting."""
    _published(redis_url, ns, r)

    async def scenario() -> None:
        async with AsyncClient(redis_url, ns, clock=RedisClock(resync_s=0.2)) as client, \
                AsyncClient(redis_url, ns) as admin:
            with pytest.warns(UnknownTaskWarning):
                await client.submit("emails.sned")
            await admin.set_strict_tasks(True)
            await asyncio.sleep(0.3)
            with pytest.raises(ValidationError, match="strict_tasks is on"):
                await client.submit("emails.sned")

    asyncio.run(scenario())


def test_a_task_handles_submit_is_not_checked(redis_url: str, ns: str, r: redis.Redis) -> None:
    """Its name comes from code: no warning, and strict lets it through."""
    _published(redis_url, ns, r)
    with Client(redis_url, ns) as client, _quiet() as caught:
        warnings.simplefilter("always")
        job_id = charge.submit(client, {"number": 1})
        client.set_strict_tasks(True)
        assert client.get_job(charge.submit(client, {"number": 2})).queue == "billing"
        assert client.get_job(job_id).task == "billing.charge"

        async def through_async() -> str:
            async with AsyncClient(redis_url, ns) as aclient:
                return await charge.asubmit(aclient, {"number": 3})

        assert client.get_job(asyncio.run(through_async())).queue == "billing"
    assert caught == []


def test_sched_submit_warns_in_one_line_and_strict_exits_non_zero_writing_nothing(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str, r: redis.Redis) -> None:
    _published(redis_url, ns, r)
    code, out, err = sched(capsys, redis_url, ns, "submit", "emails.sned")
    assert code == 0 and out.strip()
    assert len(err.strip().splitlines()) == 1 and err.startswith("warning: 'emails.sned' ")
    assert "Traceback" not in err and "UnknownTaskWarning" not in err
    code, out, err = sched(capsys, redis_url, ns, "namespace", "set", "--strict-tasks")
    assert code == 0 and "refused (strict_tasks on)" in out
    code, out, _ = sched(capsys, redis_url, ns, "namespace", "show", "--json")
    assert code == 0 and json.loads(out)["strict_tasks"] is True
    before = _jobs(r, ns)
    code, out, err = sched(capsys, redis_url, ns, "submit", "emails.sned")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: task: 'emails.sned' is not a task") and "emails.send" in err
    assert _jobs(r, ns) == before
    code, out, err = sched(capsys, redis_url, ns, "submit", "emails.send")
    assert code == 0 and err == ""
    code, out, _ = sched(capsys, redis_url, ns, "namespace", "set", "--no-strict-tasks",
                         "--json")
    assert code == 0 and json.loads(out)["strict_tasks"] is False


def test_the_outbox_relay_with_strict_tasks_rejects_the_row_with_the_reason(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    import psycopg

    from conftest import POSTGRES_DSN
    from scheduler import outbox
    from scheduler.outbox.relay import OutboxRelay

    _published(redis_url, ns, r)
    with outbox_schema(POSTGRES_DSN, ns) as schema:
        with psycopg.connect(POSTGRES_DSN) as conn:
            typo = outbox.submit(conn, "emails.sned", {"number": 1}, schema=schema)
            good = outbox.submit(conn, "emails.send", {"number": 2}, schema=schema)
            conn.commit()
        with Client(redis_url, ns) as client:
            client.set_strict_tasks(True)
            relay = OutboxRelay(client, POSTGRES_DSN, schema=schema)
            try:
                assert relay.run_once() == 2
            finally:
                relay.close()
            assert client.get_job(good).queue == "mail"
            assert not r.exists(client._core.job_key(typo))
        with psycopg.connect(POSTGRES_DSN) as conn:
            rejected = dict(conn.execute(
                f'SELECT job_id, error FROM "{schema}".outbox_rejected').fetchall())
        assert list(rejected) == [typo]
        assert "'emails.sned' is not a task" in rejected[typo]
        assert "strict_tasks is on" in rejected[typo]
