"""A handler's return value, kept with its slot for the caller: Client.result waits for it,
or says how the slot ended instead."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from helpers import make_dead, run_until, sched
from scheduler import Client, Context, Registry, ResultTimeout, RunFailed, ValidationError


def test_a_handlers_return_value_is_the_result(redis_url: str, ns: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    registry = Registry()

    @registry.task("sum")
    async def add(ctx: Context, payload: Any) -> Any:
        return {"sum": sum(payload), "slot": ctx.slot_id}

    @registry.task("sync")
    def sync(ctx: Context, payload: Any) -> Any:
        return [payload, payload]

    @registry.task("nothing")
    async def nothing(ctx: Context, payload: Any) -> None:
        pass

    with Client(redis_url, ns) as client:
        job = client.submit("sum", [1, 2, 3])
        other = client.submit("sync", "x")
        none = client.submit("nothing")
        got: dict[str, Any] = {}
        waiter = threading.Thread(target=lambda: got.update(v=client.result(job, timeout=30)))
        waiter.start()  # waits before the worker runs it
        time.sleep(0.2)
        asyncio.run(run_until(redis_url, ns, registry, lambda: "v" in got))
        waiter.join()
        [slot] = client.slots(job)
        assert got["v"] == {"sum": 6, "slot": slot.slot_id} == slot.result
        assert client.result(slot.slot_id) == got["v"]  # by slot id too
        assert client.result(other, timeout=5) == ["x", "x"]
        assert client.result(none, timeout=5) is None
    code, out, _ = sched(capsys, redis_url, ns, "runs", job)
    assert code == 0 and 'result {"sum":6' in out


def test_a_failed_run_raises_with_its_status_and_error(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        [job] = make_dead(client, redis_url, ns, error="the disk is full")
        with pytest.raises(RunFailed) as info:
            client.result(job, timeout=5)
        assert info.value.status == "dead" and "the disk is full" in (info.value.error or "")
        waiting = client.submit("t", delay=3600)
        t0 = time.monotonic()
        with pytest.raises(ResultTimeout, match="still scheduled"):
            client.result(waiting, timeout=0.3)
        assert 0.25 < time.monotonic() - t0 < 2
        cron = client.submit("t", cron="* * * * *")
        with pytest.raises(ValidationError, match="recurring"):
            client.result(cron)


def test_a_result_that_cannot_be_kept_leaves_the_run_succeeded(redis_url: str,
                                                               ns: str) -> None:
    registry = Registry()

    @registry.task("odd")
    async def odd(ctx: Context, payload: Any) -> Any:
        return {1, 2}  # a set: JSON has none

    with Client(redis_url, ns) as client:
        job = client.submit("odd")
        asyncio.run(run_until(redis_url, ns, registry, lambda: client.slots(job)[0].status.value
                              == "succeeded"))
        assert client.result(job, timeout=5) is None


def test_a_result_outlives_the_slot_in_the_history_store(redis_url: str, ns: str, r: Any,
                                                         tmp_path: Any) -> None:
    from helpers import drain
    from scheduler.core.keys import Keys, shard_of
    from scheduler.history.snapshotter import SnapshotterConfig

    registry = Registry()

    @registry.task("answer")
    async def answer(ctx: Context, payload: Any) -> Any:
        return 42

    store = f"sqlite://{tmp_path / 'h.sqlite3'}"
    with Client(redis_url, ns) as client:
        job = client.submit("answer")
        asyncio.run(run_until(redis_url, ns, registry, lambda: client.slots(job)[0].status.value
                              == "succeeded"))
        slot = client.slots(job)[0].slot_id
        shards = client.shards
    asyncio.run(drain(redis_url, ns, store, config=SnapshotterConfig(settle_s=0, defer_s=0,
                                                                     retention_s=None)))
    r.delete(Keys(ns).slot(shard_of(job, shards), slot))  # as retention would
    with Client(redis_url, ns, history=store) as client:
        assert client.result(slot, timeout=5) == 42


def test_a_result_outlives_its_job_in_the_history_store(redis_url: str, ns: str, r: Any,
                                                        tmp_path: Any) -> None:
    """The namespace's retention removed the slot and its job from Redis once history had
    them: result() by the job's id reads the store; without a store it says the result
    expired."""
    from helpers import drain
    from scheduler.core.errors import ResultExpired
    from scheduler.core.keys import Keys, shard_of
    from scheduler.history.snapshotter import SnapshotterConfig
    from scheduler.node.expirer import INTERVAL_S, Expirer
    from scheduler.redis.clients import async_redis
    from scheduler.redis.clock import RedisClock

    registry = Registry()

    @registry.task("answer")
    async def answer(ctx: Context, payload: Any) -> Any:
        return 42

    store = f"sqlite://{tmp_path / 'h.sqlite3'}"
    with Client(redis_url, ns) as client:
        job = client.submit("answer")
        asyncio.run(run_until(redis_url, ns, registry, lambda: client.slots(job)[0].status.value
                              == "succeeded"))
        client.set_retention(1)
        shards = client.shards
    asyncio.run(drain(redis_url, ns, store, config=SnapshotterConfig(settle_s=0, defer_s=0,
                                                                     retention_s=0)))
    job_key = Keys(ns).job(shard_of(job, shards), job)

    async def expire() -> None:
        async with async_redis(redis_url) as conn:
            expirer = Expirer(conn, Keys(ns), range(shards), RedisClock(), total_shards=shards)
            deadline = time.monotonic() + 1 + 10 * INTERVAL_S
            while r.exists(job_key):
                assert time.monotonic() < deadline, "the expirer never removed the job"
                await expirer.run_once()
                await asyncio.sleep(INTERVAL_S / 10)
    asyncio.run(expire())
    with Client(redis_url, ns, history=store) as client:
        assert client.result(job, timeout=5) == 42
    with Client(redis_url, ns) as client, pytest.raises(ResultExpired):
        client.result(job, timeout=0)
