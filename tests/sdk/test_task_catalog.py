"""The task catalog: a real worker publishes its tasks' defaults when it starts, and
`Client.tasks()`, `AsyncClient.tasks()` and `sched tasks` list them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import redis

from helpers import outbox_schema, run_until, sched
from scheduler import AsyncClient, Client, Context, Registry, RetryPolicy, TaskInfo
from scheduler.core.jobspec import TASK_OPTIONS
from scheduler.core.keys import Keys
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import RedisClock
from scheduler.worker.config import WorkerConfig
from scheduler.worker.worker import Worker


class Order(msgspec.Struct):
    number: int


registry = Registry()


@registry.task("emails.send", queue="mail", timeout=30, priority=2,
               retry=RetryPolicy(max_attempts=7), delivery="at_most_once")
async def send(ctx: Context, payload: Order) -> None:
    pass


@registry.task("reports.build")
def build(ctx: Context, payload: dict[str, int]) -> None:
    pass


def test_the_records_option_fields_are_the_task_options() -> None:
    assert [f for f in TaskInfo.__struct_fields__ if f in TASK_OPTIONS] == list(TASK_OPTIONS)


def test_a_worker_publishes_its_tasks_when_it_starts_and_clients_list_them(
        redis_url: str, ns: str, r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    with Client(redis_url, ns) as client:
        assert client.tasks() == []
        client.create_namespace()
        worker = asyncio.run(run_until(redis_url, ns, registry,
                                       lambda: r.exists(Keys(ns).tasks) == 1))
        found = client.tasks()
        now = client.now_ms()
    assert [t.task for t in found] == ["emails.send", "reports.build"]
    mail, plain = found
    assert (mail.queue, mail.timeout, mail.priority, mail.retry, mail.delivery, mail.pool) == \
        ("mail", 30.0, 2, RetryPolicy(max_attempts=7), "at_most_once", "thread")
    assert mail.payload_type == f"{__name__}.Order"
    assert mail.worker == worker.worker_id and 0 < now - mail.seen_ms < 60_000
    assert (plain.queue, plain.timeout, plain.retry, plain.payload_type) == \
        (None, None, None, None)

    async def listed() -> list[TaskInfo]:
        async with AsyncClient(redis_url, ns) as aclient:
            return await aclient.tasks()

    assert asyncio.run(listed()) == found
    code, out, _ = sched(capsys, redis_url, ns, "tasks", "--json")
    assert code == 0 and [t["task"] for t in json.loads(out)] == ["emails.send",
                                                                   "reports.build"]
    assert json.loads(out)[0]["retry"]["max_attempts"] == 7
    code, out, _ = sched(capsys, redis_url, ns, "tasks")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["TASK", "QUEUE", "TIMEOUT", "ATTEMPTS"]
    assert lines[1].split()[:8] == ["emails.send", "mail", "30.0", "7", "2", "at_most_once",
                                    f"{__name__}.Order", "thread"]
    assert lines[2].split()[:8] == ["reports.build", "-", "-", "-", "-", "-", "-", "thread"]


def test_an_entry_that_is_not_one_is_left_out(redis_url: str, ns: str, r: redis.Redis) -> None:
    r.hset(Keys(ns).tasks, mapping={"x": b"not json", "y": b'{"task": "y", "priority": "2"}',
                                    "z": b'{"task": "z", "queue": "q"}'})
    with Client(redis_url, ns) as client:
        assert [(t.task, t.queue) for t in client.tasks()] == [("z", "q")]


def _published(redis_url: str, ns: str, r: redis.Redis) -> None:
    with Client(redis_url, ns) as client:
        client.create_namespace()
    asyncio.run(run_until(redis_url, ns, registry, lambda: r.exists(Keys(ns).tasks) == 1))


def test_a_submit_by_name_takes_the_catalogs_defaults_and_its_own_options_win(
        redis_url: str, ns: str, r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    _published(redis_url, ns, r)
    with Client(redis_url, ns) as client:
        plain = client.submit("emails.send", {"number": 1})
        mine = client.submit("emails.send", {"number": 2}, queue="default", timeout=5,
                             priority=5, retry=RetryPolicy(max_attempts=1),
                             delivery="at_least_once")
        [batch] = client.submit_many([{"task": "emails.send", "payload": {"number": 3}}])
        other = client.submit("reports.build")  # declares no default
        named = client.schedule("nightly", "emails.send", cron="0 3 * * *")
        code, out, _ = sched(capsys, redis_url, ns, "submit", "emails.send")
        by_cli = out.strip()
        jobs = {name: client.get_job(job_id) for name, job_id in [
            ("plain", plain), ("mine", mine), ("batch", batch), ("other", other),
            ("named", named), ("cli", by_cli)]}
    assert code == 0

    def options(name: str) -> tuple[object, ...]:
        job = jobs[name]
        return (job.queue, job.timeout_s, job.priority, job.retry.max_attempts,
                job.delivery.value)

    catalog = ("mail", 30.0, 2, 7, "at_most_once")
    for name in ("plain", "batch", "named", "cli"):
        assert options(name) == catalog, name
    assert options("mine") == ("default", 5.0, 5, 1, "at_least_once")
    assert options("other") == ("default", None, 3, 3, "at_least_once")


def test_a_clients_copy_of_the_catalog_follows_its_clock_resync_with_no_round_trip_of_its_own(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    """A client reads the catalog in ready()'s round trip, which re-syncs its clock: a
    catalog that changes reaches it within the re-sync interval."""
    with Client(redis_url, ns, clock=RedisClock(resync_s=0.2)) as client:
        before = client.submit("emails.send", {"number": 1})
        assert client.get_job(before).queue == "default"
        asyncio.run(run_until(redis_url, ns, registry,
                              lambda: r.exists(Keys(ns).tasks) == 1))
        time.sleep(0.25)
        after = client.submit("emails.send", {"number": 2})
        assert client.get_job(after).queue == "mail"
        sent: list[object] = []
        perform = client._perform

        def counted(request: object) -> object:
            sent.append(request)
            return perform(request)  # type: ignore[arg-type]

        client._perform = counted  # type: ignore[method-assign]
        client.submit("emails.send", {"number": 3})  # the clock is fresh: one request
        assert len(sent) == 1, sent


def test_the_outbox_relay_applies_the_catalog_to_rows_that_leave_an_option_out(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    import psycopg

    from conftest import POSTGRES_DSN
    from scheduler import outbox
    from scheduler.outbox.relay import OutboxRelay

    _published(redis_url, ns, r)
    with outbox_schema(POSTGRES_DSN, ns) as schema:
        with psycopg.connect(POSTGRES_DSN) as conn:
            left_out = outbox.submit(conn, "emails.send", {"number": 1}, schema=schema)
            said = outbox.submit(conn, "emails.send", {"number": 2}, queue="default",
                                 schema=schema)
            conn.commit()
        with Client(redis_url, ns) as client:
            relay = OutboxRelay(client, POSTGRES_DSN, schema=schema)
            try:
                assert relay.run_once() == 2
            finally:
                relay.close()
            assert (client.get_job(left_out).queue, client.get_job(left_out).timeout_s) == \
                ("mail", 30.0)
            assert (client.get_job(said).queue, client.get_job(said).timeout_s) == \
                ("default", 30.0)


# --- who serves each task, and two versions at once ------------------------------------------

def _registry(queue: str) -> Registry:
    """The code of one version of the app: `emails.send` with its queue as the version's."""
    versioned = Registry()

    @versioned.task("emails.send", queue=queue, timeout=30)
    def send(ctx: Context, payload: dict[str, int]) -> None:
        pass

    return versioned


async def _start(redis_url: str, ns: str, code: Registry, **config: object
                 ) -> tuple[Worker, asyncio.Task[None], Any]:
    """A worker of `code` running until stopped (_stop), once it has published its tasks."""
    connection = async_redis(redis_url)
    config.setdefault("block_ms", 50)
    config.setdefault("lease_s", 1.5)  # a heartbeat every half second
    worker = Worker(connection, code, namespace=ns,
                    config=WorkerConfig(**config))  # type: ignore[arg-type]
    running = asyncio.create_task(worker.run())
    raw = ""
    deadline = time.monotonic() + 30
    while worker.worker_id not in raw:
        assert time.monotonic() < deadline and not running.done(), "the worker did not start"
        await asyncio.sleep(0.02)
        raw = str(await connection.hget(Keys(ns).tasks, "emails.send") or b"")
    return worker, running, connection


async def _stop(started: tuple[Worker, asyncio.Task[None], Any]) -> None:
    worker, running, connection = started
    worker.stop()
    await running
    await connection.aclose()


async def _tasks_until(client: AsyncClient, what: str,
                       done: Callable[[TaskInfo], bool]) -> TaskInfo:
    deadline = time.monotonic() + 30
    while True:
        [info] = [t for t in await client.tasks() if t.task == "emails.send"]
        if done(info):
            return info
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {info}"
        await asyncio.sleep(0.05)


def test_the_catalog_lists_the_live_workers_serving_each_task_and_its_rates(
        redis_url: str, ns: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Workers serving a task come from the live workers' heartbeats: a worker that stops
    (or dies: its heartbeat ages out) serves nothing, though the entry stays."""

    async def scenario() -> tuple[TaskInfo, TaskInfo, str]:
        async with AsyncClient(redis_url, ns) as client:
            await client.create_namespace()
            started = await _start(redis_url, ns, registry, queues=("mail",))
            try:
                await client.submit_many([{"task": "emails.send", "payload": {"number": i}}
                                          for i in range(200)])
                busy = await _tasks_until(client, "a rate", lambda t: t.succeeded_per_s > 0)
                idle_worker = started[0].worker_id
            finally:
                await _stop(started)
            after = await _tasks_until(client, "no worker", lambda t: not t.workers)
            return busy, after, idle_worker

    busy, after, worker_id = asyncio.run(scenario())
    assert busy.workers == [worker_id] and busy.versions == 1
    assert busy.succeeded_per_s > 0 and busy.failed_per_s == 0
    assert after.queue == "mail" and after.workers == [] and after.versions == 0
    code, out, _ = sched(capsys, redis_url, ns, "tasks", "--json")
    assert code == 0 and json.loads(out)[0]["workers"] == []
    code, out, _ = sched(capsys, redis_url, ns, "tasks")
    header = out.splitlines()[0].split()
    assert code == 0 and header[-4:] == ["WORKERS", "VERSIONS", "OK/S", "FAILED/S"]


def test_a_worker_heartbeat_that_aged_out_serves_nothing(redis_url: str, ns: str,
                                                         r: redis.Redis) -> None:
    """A worker killed without leaving keeps its hash until it expires: its last heartbeat
    says whether it is alive, not the hash being there."""
    with Client(redis_url, ns) as client:
        client.create_namespace()
        asyncio.run(run_until(redis_url, ns, registry, lambda: r.exists(Keys(ns).tasks) == 1))
        now = client.now_ms()
        served = b'{"emails.send": "v1"}'
        r.zadd(Keys(ns).workers, {"alive-1": now, "dead-1": now - 60_000, "waiting-1": now})
        r.hset(Keys(ns).worker("alive-1"), mapping={"seen_ms": now, "lease_ms": 30_000,
                                                   "tasks": served, "state": "running"})
        r.hset(Keys(ns).worker("dead-1"), mapping={"seen_ms": now - 60_000,
                                                  "lease_ms": 30_000, "tasks": served})
        r.hset(Keys(ns).worker("waiting-1"), mapping={"seen_ms": now, "lease_ms": 30_000,
                                                     "tasks": served, "state": "waiting"})
        r.hset(Keys(ns).worker("garbled-1"), mapping={"seen_ms": "x", "tasks": "{"})
        r.zadd(Keys(ns).workers, {"garbled-1": now})
        mail = {t.task: t for t in client.tasks()}["emails.send"]
    assert (mail.workers, mail.versions) == (["alive-1"], 1)


def test_two_versions_at_once_the_latest_worker_start_wins(redis_url: str, ns: str) -> None:
    """A rolling deploy: v1's workers run, v2's start. Each start overwrites the task's entry,
    so a submit by name takes the latest start's defaults; while both run the catalog lists
    both workers and 2 versions. A v1 worker that starts again (a restart during the deploy)
    puts v1's defaults back until the next v2 start."""
    v1, v2 = _registry("mail-v1"), _registry("mail-v2")

    async def submitted_queue(client: AsyncClient) -> str:
        job_id = await client.submit("emails.send", {"number": 1})
        return (await client.get_job(job_id)).queue

    async def scenario() -> list[tuple[str, TaskInfo]]:
        seen: list[tuple[str, TaskInfo]] = []
        # A clock that re-syncs at once: each submit sees the catalog as it is now.
        async with AsyncClient(redis_url, ns, clock=RedisClock(resync_s=0)) as client:
            await client.create_namespace()
            old = await _start(redis_url, ns, v1)
            seen.append((await submitted_queue(client),
                         await _tasks_until(client, "v1", lambda t: len(t.workers) == 1)))
            new = await _start(redis_url, ns, v2)
            seen.append((await submitted_queue(client),
                         await _tasks_until(client, "both", lambda t: len(t.workers) == 2)))
            restarted = await _start(redis_url, ns, v1)
            seen.append((await submitted_queue(client),
                         await _tasks_until(client, "three", lambda t: len(t.workers) == 3)))
            for started in (old, restarted):
                await _stop(started)
            seen.append((await submitted_queue(client),
                         await _tasks_until(client, "v2 alone", lambda t: len(t.workers) == 1)))
            await _stop(new)
        return seen

    (q1, only_v1), (q2, both), (q3, again), (q4, v2_alone) = asyncio.run(scenario())
    assert (q1, only_v1.queue, only_v1.versions) == ("mail-v1", "mail-v1", 1)
    assert (q2, both.queue, both.versions) == ("mail-v2", "mail-v2", 2)
    assert (q3, again.queue, again.versions) == ("mail-v1", "mail-v1", 2)
    # The entry is the latest start's even once that worker stopped: v1's, until v2 starts.
    assert (q4, v2_alone.queue, v2_alone.versions) == ("mail-v1", "mail-v1", 1)
