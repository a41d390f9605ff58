"""One creation policy for a namespace (scheduler/core/namespace.py): writers create it, every other
process waits for it, and an explicit shard count that differs from the stored one is refused
with both counts named."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
import redis
import redis.asyncio

from helpers import statuses
from scheduler import AsyncClient, Client, Context, Registry
from scheduler.core import namespace
from scheduler.core.errors import ConfigError, NamespaceError
from scheduler.core.keys import DISPATCH_GROUP, Keys
from scheduler.node.node import SchedulerNode
from scheduler.worker.worker import Worker, WorkerConfig


def test_parse_names_both_counts_and_tells_a_missing_namespace_apart() -> None:
    assert namespace.parse("n", [b"8", b"100"]) == namespace.Meta(8, 100)
    assert namespace.parse("n", [b"8", None], requested=8) == namespace.Meta(8, None)
    with pytest.raises(namespace.NamespaceMissing, match="'n' does not exist in Redis yet"):
        namespace.parse("n", [None, None])
    with pytest.raises(NamespaceError, match="has 8 shards in Redis, not the 16 asked for"):
        namespace.parse("n", [b"8", b"100"], requested=16)
    for bad in (0, 1025, 2.0, True):
        with pytest.raises(ConfigError, match="between 1 and 1024"):
            namespace.check_shards(bad)  # type: ignore[arg-type]


def test_group_errors_other_than_busygroup_are_raised() -> None:
    namespace.check_groups([True, redis.exceptions.ResponseError("BUSYGROUP exists")])
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        namespace.check_groups([redis.exceptions.ResponseError("WRONGTYPE nope")])


def test_a_worker_and_a_node_started_first_wait_for_the_first_submit(
        redis_url: str, ns: str, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    """Before, a worker started before the first submit created the namespace with 8 shards,
    and the user's `Client(shards=16)` was then refused."""
    registry = Registry()
    ran: Counter[str] = Counter()

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran[ctx.slot_id] += 1

    async def scenario() -> list[str]:
        conn = redis.asyncio.Redis.from_url(redis_url)
        worker = Worker(conn, registry, namespace=ns, config=WorkerConfig(block_ms=50))
        node = SchedulerNode(conn, namespace=ns)
        tasks = [asyncio.create_task(worker.run()), asyncio.create_task(node.run())]
        await asyncio.sleep(0.6)  # several setup tries, backing off from 50 ms
        assert not any(t.done() for t in tasks)
        assert r.hget(Keys(ns).meta, "shards") is None  # neither created it
        with Client(redis_url, ns, shards=16) as client:
            ids = client.submit_many([{"task": "t", "delay": 0.2 * (i % 2)} for i in range(20)])
            # A slot is committed after its handler returns: wait for the statuses, not the runs.
            for _ in range(200):
                if statuses(client, ids) == {"succeeded": 20}:
                    break
                await asyncio.sleep(0.05)
            assert client.shards == 16 and statuses(client, ids) == {"succeeded": 20}
        assert worker.shards == 16
        worker.stop()
        node.stop()
        await asyncio.gather(*tasks)
        await conn.aclose()
        return ids

    with caplog.at_level("INFO"):
        asyncio.run(scenario())
    assert set(ran.values()) == {1}
    # waiting is said once, as information: not a failure, no traceback, no "works again"
    waiting = [rec for rec in caplog.records if "does not exist in Redis yet" in rec.getMessage()]
    assert waiting and all(rec.levelname == "INFO" and rec.exc_info is None for rec in waiting)
    assert len([rec for rec in waiting if rec.name == "scheduler.worker.worker"]) == 1
    assert not [m for m in caplog.messages if "works again" in m]
    # the worker made the consumer group of every shard's stream it reads
    assert all(r.xinfo_groups(Keys(ns).queue(s, "default"))[0]["name"].decode() == DISPATCH_GROUP
               for s in range(16))


def test_a_worker_stopped_while_it_waits_for_the_namespace_returns(redis_url: str,
                                                                  ns: str) -> None:
    async def scenario() -> None:
        conn = redis.asyncio.Redis.from_url(redis_url)
        worker = Worker(conn, Registry(), namespace=ns)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        worker.stop()
        await asyncio.wait_for(task, 5)
        await conn.aclose()

    asyncio.run(scenario())


def test_the_first_writer_wins_and_later_clients_adopt_its_count_and_limit(
        redis_url: str, ns: str) -> None:
    with Client(redis_url, ns, shards=5, max_payload_bytes=1000) as first:
        first.submit("t")
    with Client(redis_url, ns, max_payload_bytes=5000) as later:
        assert later.shards == 5
        with pytest.raises(Exception, match="1000"):
            later.submit("t", "x" * 2000)
    with pytest.raises(NamespaceError, match="has 5 shards in Redis, not the 6 asked for"):
        Client(redis_url, ns, shards=6).submit("t")


def test_create_namespace_fixes_the_count_before_any_job(redis_url: str, ns: str,
                                                         r: redis.Redis) -> None:
    with Client(redis_url, ns, shards=12) as client:
        assert client.create_namespace() == 12
        assert client.create_namespace() == 12  # again: nothing changes
    assert r.hget(Keys(ns).meta, "shards") == b"12" and not r.exists(Keys(ns).job(0, "x"))
    with Client(redis_url, ns) as other:
        assert other.create_namespace() == 12
    with pytest.raises(NamespaceError, match="has 12 shards in Redis, not the 4 asked for"):
        Client(redis_url, ns, shards=4).create_namespace()

    async def adopt() -> int:
        async with AsyncClient(redis_url, ns) as client:
            return await client.create_namespace()
    assert asyncio.run(adopt()) == 12


def test_create_namespace_fixes_the_payload_limit_too(redis_url: str, ns: str,
                                                      r: redis.Redis) -> None:
    with Client(redis_url, ns, shards=3) as client:
        assert client.create_namespace(max_payload_bytes=5000) == 3
        assert client.max_payload_bytes == 5000
        assert client.create_namespace(max_payload_bytes=5000) == 3  # the same: fine
    assert {r.hget(Keys(ns).config(s), "max_payload_bytes") for s in range(3)} == {b"5000"}
    with Client(redis_url, ns) as other:
        assert other.create_namespace() == 3 and other.max_payload_bytes == 5000
        with pytest.raises(NamespaceError, match="payload limit of 5,000 bytes in Redis, not "
                                                 "the 6,000 asked for"):
            other.create_namespace(max_payload_bytes=6000)
    for bad in (0, -1, 2**40, 1.5, True):
        with pytest.raises(ConfigError, match="max_payload_bytes must be an integer"):
            Client(redis_url, ns).create_namespace(max_payload_bytes=bad)  # type: ignore[arg-type]


def test_waiting_processes_register_without_creating_the_namespace_and_leave_when_stopped(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    async def scenario() -> None:
        conn = redis.asyncio.Redis.from_url(redis_url)
        worker = Worker(conn, Registry(), namespace=ns, worker_id="w-waits")
        node = SchedulerNode(conn, namespace=ns, node_id="n-waits")
        tasks = [asyncio.create_task(worker.run()), asyncio.create_task(node.run())]
        for _ in range(100):
            if r.zscore(Keys(ns).workers, "w-waits") and r.zscore(Keys(ns).schedulers,
                                                                  "n-waits"):
                break
            await asyncio.sleep(0.05)
        with Client(redis_url, ns) as client:
            status = client.status()
            assert (status.shards, status.workers_waiting, status.nodes_waiting) == (0, 1, 1)
            assert [(w.worker_id, w.waiting, w.alive) for w in client.workers()] == [
                ("w-waits", True, True)]
            assert status.not_created() == (
                "namespace not created yet: 1 worker and 1 node are waiting (its first "
                "submit, or `sched namespace create`, creates it)")
        assert r.hget(Keys(ns).meta, "shards") is None
        worker.stop()
        node.stop()
        await asyncio.gather(*tasks)
        await conn.aclose()

    asyncio.run(scenario())
    assert not r.exists(Keys(ns).workers) and not r.exists(Keys(ns).schedulers)
    assert not r.exists(Keys(ns).worker("w-waits"))
