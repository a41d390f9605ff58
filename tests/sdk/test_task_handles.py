"""Task handles (what `@registry.task` returns) and typed payloads, against the test Redis
with a real worker: a handle calls like its handler, submits jobs of its task with the task's
defaults (the call's own options win), and a handler annotated with a msgspec Struct or a
dataclass has its payload validated at submit (nothing written when it does not fit) and
decoded into its type when the worker runs it, in the worker's threads, on its event loop
and in its process pool alike."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Iterator
from typing import Any

import msgspec
import pool_tasks
import psycopg
import pytest

from conftest import POSTGRES_DSN
from helpers import run_until
from scheduler import AsyncClient, Client, Context, Registry, RetryPolicy, ValidationError
from scheduler.outbox.relay import OutboxRelay
from scheduler.outbox.rows import upgrade
from scheduler.worker.handles import TaskHandle


class Email(msgspec.Struct):
    to: str
    subject: str
    retries_left: int = 3


@dataclasses.dataclass
class Invoice:
    number: int
    lines: list[str]


registry = Registry()
seen: list[Any] = []


@registry.task("emails.send", queue="mail", timeout=30, priority=2,
               retry=RetryPolicy(max_attempts=7), dedupe_ttl=60)
async def send(ctx: Context, payload: Email) -> str:
    """Send one email."""
    seen.append(payload)
    return payload.to


@registry.task("invoices.render")
def render(ctx: Context, payload: Invoice) -> int:
    seen.append(payload)
    return len(payload.lines)


@registry.task("plain.echo")
def echo(ctx: Context, payload: dict[str, Any]) -> Any:
    seen.append(payload)
    return payload


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    seen.clear()
    yield
    seen.clear()


def test_a_handle_calls_like_its_handler_and_the_registry_holds_the_handler() -> None:
    assert isinstance(send, TaskHandle) and send.name == "emails.send"
    assert inspect.iscoroutinefunction(send) and send.__doc__ == "Send one email."
    assert send.__name__ == "send" and send.__module__ == __name__
    assert asyncio.run(send(None, Email("a@b", "hi"))) == "a@b"
    assert render(None, Invoice(1, ["x", "y"])) == 2
    assert registry.get("emails.send").fn is send.fn  # type: ignore[union-attr]
    assert registry.get("emails.send").payload_type is Email  # type: ignore[union-attr]
    assert registry.get("invoices.render").payload_type is Invoice  # type: ignore[union-attr]
    assert registry.get("plain.echo").payload_type is None  # type: ignore[union-attr]
    assert registry.get("plain.echo").decoder is None  # type: ignore[union-attr]


def test_a_submit_through_the_handle_takes_the_tasks_defaults_and_its_own_win(
        redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        first = send.submit(client, Email("a@b", "hello"))
        job = client.get_job(first)
        assert (job.task, job.queue, job.timeout_s, job.priority, job.retry.max_attempts) == \
            ("emails.send", "mail", 30.0, 2, 7)
        assert job.dedupe_ttl_s is None  # a window default needs a dedupe key
        other = send.submit(client, {"to": "c@d", "subject": "x"}, queue="bulk", priority=5,
                            dedupe_key="weekly")
        job = client.get_job(other)
        assert (job.queue, job.priority, job.timeout_s, job.dedupe_ttl_s) == \
            ("bulk", 5, 30.0, 60.0)
        plain = echo.submit(client, {"a": 1})
        job = client.get_job(plain)
        assert (job.task, job.queue, job.timeout_s, job.priority) == \
            ("plain.echo", "default", None, 3)


def test_a_typed_payload_that_does_not_fit_is_refused_naming_the_field(
        redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        cases = [
            (send, {"to": "a@b", "subject": 5}, "payload.subject", "Expected `str`"),
            (send, {"subject": "x"}, "payload.to", "missing required field"),
            (send, Email("a@b", "s", retries_left="many"), "payload.retries_left",  # type: ignore[arg-type]
             "Expected `int`"),
            (send, None, "payload", "Expected `object`, got `null`"),
            (render, {"number": 1, "lines": ["a", 2]}, "payload.lines[1]", "Expected `str`"),
        ]
        for handle, payload, field, problem in cases:
            with pytest.raises(ValidationError) as err:
                handle.submit(client, payload)
            assert err.value.field == field, err.value
            assert problem in str(err.value) and handle.payload_type.__name__ in str(err.value)
        assert client.recent_jobs().jobs == []
        with pytest.raises(ValidationError, match="payload.to"):
            asyncio.run(_asubmit(redis_url, ns, {"subject": "x"}))
        assert client.recent_jobs().jobs == []


async def _asubmit(redis_url: str, ns: str, payload: Any) -> str:
    async with AsyncClient(redis_url, ns) as aclient:
        return await send.asubmit(aclient, payload)


def test_a_worker_hands_each_typed_handler_its_type_and_plain_ones_their_json(
        redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        ids = [send.submit(client, Email("a@b", "one")),
               asyncio.run(_asubmit(redis_url, ns, {"to": "c@d", "subject": "two"})),
               render.submit(client, Invoice(7, ["x", "y", "z"])),
               echo.submit(client, {"a": [1, 2]})]
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(seen) == 4,
                              queues=("mail", "default")))
        results = [client.result(i, timeout=5) for i in ids]
    assert sorted(seen, key=repr) == sorted(
        [Email("a@b", "one"), Email("c@d", "two"), Invoice(7, ["x", "y", "z"]),
         {"a": [1, 2]}], key=repr)
    assert results == ["a@b", "c@d", 3, {"a": [1, 2]}]


def test_a_typed_payload_submitted_by_name_that_does_not_fit_fails_its_run_naming_the_field(
        redis_url: str, ns: str) -> None:
    """A submit by name skips the handle's check: the worker's decode refuses it."""
    with Client(redis_url, ns) as client:
        job_id = client.submit("invoices.render", {"number": "seven", "lines": []},
                               retry=RetryPolicy(max_attempts=1))
        asyncio.run(run_until(redis_url, ns, registry,
                              lambda: client.slots(job_id)[0].status.value == "dead"))
        error = client.slots(job_id)[0].attempts[0].error or ""
    assert "Expected `int`, got `str` - at `$.number`" in error
    assert seen == []


@pytest.mark.slow  # a child process
def test_a_typed_payload_in_the_process_pool(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        job_id = pool_tasks.typed.submit(client, pool_tasks.Point(3, 4))
        with pytest.raises(ValidationError, match="payload.y"):
            pool_tasks.typed.submit(client, {"x": 1})
        asyncio.run(run_until(redis_url, ns, pool_tasks.registry,
                              lambda: client.slots(job_id)[0].status.value == "succeeded",
                              process_pool=1))
        assert client.result(job_id, timeout=5) == "Point 25"


def test_a_bad_default_or_an_unresolvable_payload_type_is_refused_at_registration() -> None:
    r = Registry()
    with pytest.raises(ValueError, match="task 't.x': priority"):
        r.task("t.x", priority=9)
    with pytest.raises(ValueError, match="task 't.x': retry"):
        r.task("t.x", retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'Later'.*define or import it before the handler"):
        @r.task("t.y")
        def handler(ctx: Context, payload: Later) -> None: ...  # noqa: F821
    assert r.names() == []


def test_the_outbox_form_writes_the_tasks_job_with_its_defaults(redis_url: str, ns: str) -> None:
    schema = f"ob_{ns.replace('-', '_')[-12:].lower()}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        upgrade(admin, schema)
    try:
        with psycopg.connect(POSTGRES_DSN) as conn:
            with pytest.raises(ValidationError, match="payload.subject"):
                send.outbox_submit(conn, {"to": "a@b"}, schema=schema)
            job_id = send.outbox_submit(conn, Email("a@b", "hi"), priority=1, schema=schema)
            conn.commit()
        with Client(redis_url, ns) as client:
            relay = OutboxRelay(client, POSTGRES_DSN, schema=schema)
            try:
                assert relay.run_once() == 1
            finally:
                relay.close()
            job = client.get_job(job_id)
        assert (job.task, job.queue, job.timeout_s, job.priority, job.payload) == \
            ("emails.send", "mail", 30.0, 1, {"to": "a@b", "subject": "hi",
                                              "retries_left": 3})
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_the_testing_mode_runs_typed_handlers_and_applies_the_tasks_defaults() -> None:
    from scheduler.testing import TestScheduler

    with TestScheduler(registry) as tester:
        by_handle = send.submit(tester.client, {"to": "a@b", "subject": "s"})
        by_name = tester.client.submit("emails.send", {"to": "c@d", "subject": "t"})
        assert tester.client.get_job(by_name).queue == "mail"
        ran = tester.drain()
        assert sorted(r.job_id for r in ran) == sorted([by_handle, by_name])
        assert tester.client.result(by_name) == "c@d"
    assert sorted(p.to for p in seen) == ["a@b", "c@d"]
