"""`sched status` and `sched workers`: what a person reads, what a script parses, and the
exit code that says unhealthy."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from scheduler import AsyncClient, Client, Context, Registry, RetryPolicy
from scheduler.cli.main import main
from scheduler.cli.observe import UNHEALTHY
from scheduler.core.keys import DEFAULT_SHARDS, Keys
from scheduler.observe.status import Topology, _Reader, read_status
from scheduler.redis.clock import RedisClock
from scheduler.worker.worker import Worker, WorkerConfig


def sched(capsys: pytest.CaptureFixture[str], redis_url: str, ns: str,
          *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["--redis-url", redis_url, "--namespace", ns, *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_status_without_workers_is_unhealthy(capsys: pytest.CaptureFixture[str],
                                             redis_url: str, ns: str) -> None:
    code, out, _ = sched(capsys, redis_url, ns, "status", "--json")
    assert code == UNHEALTHY
    empty = json.loads(out)
    assert empty["shards"] == 0 and empty["queues"] == [] and not empty["healthy"]

    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "t", "queue": "mail"} for _ in range(7)])
    code, out, _ = sched(capsys, redis_url, ns, "status", "--json")
    status = json.loads(out)
    assert code == UNHEALTHY and status["healthy"] is False
    assert status["problems"] == [
        "no worker is alive: start one with `sched worker --app MODULE:REGISTRY`"]
    [mail] = status["queues"]
    assert (mail["queue"], mail["depth"], mail["pending"]) == ("mail", 7, 0)
    assert status["shards"] == DEFAULT_SHARDS and len(status["shard_details"]) == DEFAULT_SHARDS
    assert status["dead_letter_size"] == 0 and status["workers_alive"] == 0

    code, out, _ = sched(capsys, redis_url, ns, "status")
    assert code == UNHEALTHY
    assert "mail" in out and "UNHEALTHY: no worker is alive" in out


def test_status_and_workers_with_a_live_worker(capsys: pytest.CaptureFixture[str],
                                               redis_url: str, ns: str) -> None:
    registry = Registry()

    @registry.task("boom")
    async def boom(ctx: Context, payload: Any) -> None:
        raise RuntimeError("no")

    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "boom", "retry": RetryPolicy(max_attempts=1)}
                            for _ in range(3)])
        client.submit_many([{"task": "boom", "queue": "unread"}])

    async def main_() -> list[tuple[int, str, str]]:
        conn = redis.asyncio.Redis.from_url(redis_url)
        worker = Worker(conn, registry, namespace=ns, config=WorkerConfig(block_ms=50))
        task = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 20
            while True:
                code, out, err = await asyncio.to_thread(sched, capsys, redis_url, ns,
                                                         "status", "--json", "--max-lag", "3600")
                if json.loads(out)["dead_letter_size"] == 3:
                    break
                assert time.monotonic() < deadline, out
                await asyncio.sleep(0.05)
            results = [(code, out, err)]
            for args in (["status"], ["status", "--json", "--max-lag", "0"],
                         ["workers", "--json"], ["workers"]):
                results.append(await asyncio.to_thread(sched, capsys, redis_url, ns, *args))
            return results
        finally:
            worker.stop()
            await task
            await conn.aclose()

    (code, out, _), (text_code, text, _), (lag_code, lag_out, _), \
        (_, workers_json, _), (_, workers_text, _) = asyncio.run(main_())
    status = json.loads(out)
    assert code == 0 and status["healthy"] and status["problems"] == []
    queues = {q["queue"]: q for q in status["queues"]}
    assert queues["default"]["depth"] == 0 and queues["unread"]["depth"] == 1
    assert status["workers_alive"] == 1 and status["workers"][0]["concurrency"] == 100

    assert text_code == 0 and text.rstrip().endswith("healthy") and "dead letters: 3" in text

    assert lag_code == UNHEALTHY
    assert any(p.startswith("queue unread: the oldest ready job has waited")
               for p in json.loads(lag_out)["problems"])

    [w] = json.loads(workers_json)
    assert w["alive"] and w["queues"] == ["default"] and w["inflight"] == 0
    assert w["worker_id"] in workers_text and "1 alive" in workers_text


def test_the_async_client_reads_the_same_status(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "t", "queue": q} for q in ("a", "b", "b")])
        sync = client.status()

    async def read() -> Any:
        async with AsyncClient(redis_url, ns) as client:
            return await client.status(), await client.workers()

    status, workers = asyncio.run(read())
    assert [(q.queue, q.depth) for q in status.queues] == [("a", 1), ("b", 2)]
    assert [(q.queue, q.depth) for q in sync.queues] == [("a", 1), ("b", 2)]
    assert workers == []


def test_a_lost_script_cache_falls_back_to_loading_the_scripts() -> None:
    topo = Topology(2, ())
    assert _Reader.needs_scripts(topo, [[0], redis.exceptions.NoScriptError("NOSCRIPT"), {}])
    assert not _Reader.needs_scripts(topo, [[0], [0], {}])


def test_a_scrape_is_one_round_trip_while_the_topology_holds(
        r: redis.Redis, redis_url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "t", "queue": q} for q in ("a", "b")])
    round_trips = [0]
    pipeline = r.pipeline

    def counting(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        execute = pipe.execute

        def counted(*a: Any, **k: Any) -> Any:
            round_trips[0] += 1
            return execute(*a, **k)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe

    monkeypatch.setattr(r, "pipeline", counting)
    clock = RedisClock(resync_s=300)
    clock.anchor(r.time())
    first, topo = read_status(r, Keys(ns), clock)
    assert round_trips[0] == 2  # nothing known yet: topology, then details
    second, again = read_status(r, Keys(ns), clock, topo)
    assert round_trips[0] == 3 and again == topo
    assert [(q.queue, q.depth) for q in second.queues] == [("a", 1), ("b", 1)]
    with Client(redis_url, ns) as client:  # a new queue: the shards' stats name it
        client.submit("t", queue="c")
    third, changed = read_status(r, Keys(ns), clock, topo)
    assert round_trips[0] == 4 and changed == topo
    assert [(q.queue, q.depth) for q in third.queues] == [("a", 1), ("b", 1), ("c", 1)]


def test_status_warns_when_a_restart_of_redis_would_lose_acknowledged_jobs(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str) -> None:
    """The shared test Redis has neither AOF nor a replica: a warning, not unhealthy. A
    Redis with the AOF on gets none."""
    from faults.harness import RedisServer

    with Client(redis_url, ns) as client:
        client.submit("t")
    code, out, _ = sched(capsys, redis_url, ns, "status")
    assert "WARNING: Redis has neither AOF nor a replica: acknowledged jobs will be lost" in out
    code, out, _ = sched(capsys, redis_url, ns, "status", "--json")
    doc = json.loads(out)
    assert doc["redis_aof"] is False and doc["redis_replicas"] == 0 and doc["warnings"]
    durable = RedisServer(aof=True).start()
    try:
        with Client(durable.url, ns) as client:
            client.submit("t")
            assert client.status().warnings() == []
            assert client.status().redis_aof is True
    finally:
        durable.stop()
