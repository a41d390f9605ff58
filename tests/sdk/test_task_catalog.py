"""The task catalog: a real worker publishes its tasks' defaults when it starts, and
`Client.tasks()`, `AsyncClient.tasks()` and `sched tasks` list them."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest
import redis

from helpers import run_until, sched
from scheduler import AsyncClient, Client, Context, Registry, RetryPolicy, TaskInfo
from scheduler.core.jobspec import TASK_OPTIONS
from scheduler.core.keys import Keys


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
