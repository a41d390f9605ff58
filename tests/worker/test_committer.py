"""The worker's committer on its own: outcomes of several shards in one round trip, kept
through a Redis that does not answer, still known while their round trip is in flight, a
poison outcome dropped alone, a repeat answered "already"."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import is_cluster_url
from helpers import Shard, W, make, statuses
from scheduler import Client, Context, Registry, SlotStatus
from scheduler.redis.clients import async_redis, process_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.worker.committer import Committer
from scheduler.worker.config import WorkerConfig
from scheduler.worker.exchange import Exchange
from scheduler.worker.worker import Worker


def _claimed(r: redis.Redis, client: Client, clock: ManualClock, n: int) -> list[tuple[Shard, int]]:
    """n slots claimed by W, each with its fencing token."""
    out = []
    for _ in range(n):
        shard = make(r, client, clock)
        [reply] = shard.claim(shard.read())
        out.append((shard, int(reply[1])))
    return out


def _exchange(conn: Any, client: Client, clock: ManualClock) -> Exchange:
    """A committer, and the round trips that carry its outcomes (no claims, no reads)."""
    return Exchange(conn, Committer(client.keys, clock, W, 1000), WorkerConfig())


def test_outcomes_of_every_shard_go_in_one_round_trip_and_a_repeat_is_harmless(
        r: redis.Redis, redis_url: str, client: Client, clock: ManualClock) -> None:
    runs = _claimed(r, client, clock, 12)
    assert len({s.shard for s, _ in runs}) > 1

    async def scenario() -> tuple[int, int]:
        conn = async_redis(redis_url)
        exchange = _exchange(conn, client, clock)
        committer = exchange.committer
        for shard, token in runs:
            committer.add_succeeded(shard.shard, scripts.Succeeded(shard.slot_id, token, 1, 2))
        took = await exchange.commit()
        for shard, token in runs[:3]:  # sent again (a reply lost): "already", not refused
            committer.add_succeeded(shard.shard, scripts.Succeeded(shard.slot_id, token, 1, 2))
        again = await exchange.commit()
        await conn.aclose()
        assert committer.refused == 0 and len(committer) == 0
        return took, again

    assert asyncio.run(scenario()) == (12, 3)
    assert {s.slot().status for s, _ in runs} == {SlotStatus.SUCCEEDED}


def test_outcomes_wait_through_a_redis_that_does_not_answer(
        r: redis.Redis, redis_url: str, client: Client, clock: ManualClock) -> None:
    runs = _claimed(r, client, clock, 4)

    async def scenario() -> None:
        dead = process_redis("redis://127.0.0.1:1/0", 3.0)  # nothing listens there
        exchange = _exchange(dead, client, clock)
        committer = exchange.committer
        for shard, token in runs:
            committer.add_succeeded(shard.shard, scripts.Succeeded(shard.slot_id, token, 1, 2))
        for _ in range(3):
            try:
                await exchange.commit()
                raise AssertionError("a round trip to nowhere succeeded")
            except redis.exceptions.ConnectionError:
                pass
            assert len(committer) == 4 and committer.slots() == {s.slot_id for s, _ in runs}
        await dead.aclose()
        exchange.redis = live = async_redis(redis_url)
        assert await exchange.commit() == 4 and len(committer) == 0
        await live.aclose()

    asyncio.run(scenario())
    assert {s.slot().status for s, _ in runs} == {SlotStatus.SUCCEEDED}


def test_outcomes_in_flight_are_still_this_workers(r: redis.Redis, client: Client,
                                                   clock: ManualClock) -> None:
    """While a round trip is on its way, its outcomes are neither pending nor committed:
    `slots()` must still name them, or a recovery read meanwhile (Reader.recover) takes
    their entries back, and claim.lua grants this worker its own running slot again: the
    handler would run a second time."""
    runs = _claimed(r, client, clock, 3)

    async def scenario() -> tuple[set[str], set[str]]:
        with socket.socket() as silent:  # accepts the connection, never answers
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            conn = process_redis(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", 3.0)
            exchange = _exchange(conn, client, clock)
            committer = exchange.committer
            for shard, token in runs:
                committer.add_succeeded(shard.shard, scripts.Succeeded(shard.slot_id, token, 1, 2))
            flight = asyncio.create_task(exchange.commit())
            await asyncio.sleep(0.2)
            assert not flight.done()
            in_flight = committer.slots()
            with pytest.raises(redis.exceptions.TimeoutError):
                await flight
            await conn.aclose()
        return in_flight, committer.slots()

    in_flight, kept = asyncio.run(scenario())
    assert in_flight == kept == {s.slot_id for s, _ in runs}


def test_a_poison_outcome_is_dropped_alone(r: redis.Redis, redis_url: str, client: Client,
                                           clock: ManualClock) -> None:
    good = _claimed(r, client, clock, 5)
    [(bad, token)] = _claimed(r, client, clock, 1)

    async def scenario() -> Committer:
        conn = async_redis(redis_url)
        exchange = _exchange(conn, client, clock)
        committer = exchange.committer
        for shard, t in good:
            committer.add_succeeded(shard.shard, scripts.Succeeded(shard.slot_id, t, 1, 2))
        # one its call cannot even be built for, one Redis cannot be sent (a lone surrogate)
        committer.add_succeeded(bad.shard, scripts.Succeeded(bad.slot_id, token, "not-a-time", 2))  # type: ignore[arg-type]
        committer.add_succeeded(bad.shard, scripts.Succeeded(bad.slot_id + "\udcff", token, 1, 2))
        for _ in range(3):
            try:
                await exchange.commit()
            except redis.exceptions.ResponseError:
                pass
        await conn.aclose()
        return committer

    committer = asyncio.run(scenario())
    assert committer.dropped == 2 and len(committer) == 0
    assert {s.slot().status for s, _ in good} == {SlotStatus.SUCCEEDED}
    assert bad.slot().status is SlotStatus.RUNNING  # left to its lease, like a crashed worker



def test_outcomes_that_ride_a_claim_are_committed_or_kept(
        r: redis.Redis, redis_url: str, client: Client, clock: ManualClock) -> None:
    """board() hands the pending outcomes to a claim's round trip; they stay this worker's
    (slots()) until land(). Replies are tallied as the committer's own; a round trip that
    failed, or was cancelled, gives them back to be sent again, and wakes the committer."""
    runs = _claimed(r, client, clock, 6)
    ids = {s.slot_id for s, _ in runs}

    async def scenario() -> None:
        conn = async_redis(redis_url)
        exchange = _exchange(conn, client, clock)
        committer = exchange.committer
        assert committer.board() is None  # nothing pending: the claim goes alone
        for shard, token in runs:
            committer.add_succeeded(shard.shard, scripts.Succeeded(shard.slot_id, token, 1, 2))
        for failure in (redis.exceptions.ConnectionError("cut"), asyncio.CancelledError()):
            boarding = committer.board()
            assert boarding is not None and len(committer) == 0 and committer.slots() == ids
            committer.wake.clear()
            committer.land(boarding, failure)
            assert len(committer) == 6 and committer.slots() == ids and committer.wake.is_set()
        boarding = committer.board()
        assert boarding is not None
        replies = await scripts.run_async(conn, boarding.calls)
        committer.land(boarding, replies)
        assert committer.committed == 6 and len(committer) == 0 and committer.slots() == set()
        await conn.aclose()

    asyncio.run(scenario())
    assert {s.slot().status for s, _ in runs} == {SlotStatus.SUCCEEDED}


def test_a_worker_commits_in_its_claims_round_trips(redis_url: str, client: Client,
                                                    ns: str) -> None:
    """Burning down with instant handlers, most outcomes go in the next claim's round trip
    (the committer's own round trips carry the rest), and every slot ends succeeded: nothing
    that rode a claim was lost."""
    registry = Registry()

    @registry.task("noop")
    async def noop(ctx: Context, payload: Any) -> None:
        pass

    ids = client.submit_many([{"task": "noop"} for _ in range(600)])

    async def scenario() -> tuple[int, int]:
        conn = async_redis(redis_url)
        worker = Worker(conn, registry, namespace=ns, config=WorkerConfig(concurrency=50))
        own, sent_alone = worker.exchange.commit, [0]

        async def counted() -> int:
            sent_alone[0] += len(worker.committer)
            return await own()

        worker.exchange.commit = counted  # type: ignore[method-assign]
        task = asyncio.create_task(worker.run())
        try:
            while worker.committer.committed < len(ids):
                assert not task.done()
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            await task
            await conn.aclose()
        return worker.committer.committed, sent_alone[0]

    committed, sent_alone = asyncio.run(scenario())
    # A cluster's reader reads each shard in a round trip of its own (no prefetch in the
    # claim's): fewer claims find outcomes waiting.
    most = 0.9 if is_cluster_url(redis_url) else 0.5
    assert committed == len(ids) and sent_alone < len(ids) * most, (committed, sent_alone)
    assert statuses(client, ids) == {"succeeded": len(ids)}
