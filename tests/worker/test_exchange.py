"""The worker's exchange with Redis: the outcomes waiting to be committed ride ahead of the
claims in the same round trip, and each part's replies go back to its owner."""

from __future__ import annotations

import asyncio

import redis

from helpers import LEASE, W, make
from scheduler import Client, SlotStatus
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies
from scheduler.worker.committer import Committer
from scheduler.worker.config import WorkerConfig
from scheduler.worker.exchange import Exchange


def test_commits_go_ahead_of_the_claims_of_their_round_trip(
        r: redis.Redis, redis_url: str, client: Client, clock: ManualClock) -> None:
    """A run's success and a claim of its own entry in one round trip (a read that brought
    the entry again, as a recovery read does): the commit lands first, so the claim finds
    the slot ended and grants nothing. Were the claim first, claim.lua would grant the
    worker its own running slot again (as the repeat of a claim whose reply was lost), and
    the handler, whose run has ended, would run a second time."""
    shard = make(r, client, clock)
    entries = shard.read()
    [(code, token, *_)] = shard.claim(entries)
    assert int(token) == 1, code

    async def scenario() -> tuple[list[object], Committer]:
        conn = async_redis(redis_url)
        committer = Committer(client.keys, clock, W, 1000)
        exchange = Exchange(conn, committer, WorkerConfig())
        committer.add_succeeded(shard.shard, scripts.Succeeded(shard.slot_id, 1, 1, 2))
        answers, unconfirmed = await exchange.send([scripts.claim(
            shard.prefix, clock.now_ms(), W, LEASE, entries)])
        await conn.aclose()
        assert unconfirmed is None
        return replies.claimed(answers[0], entries), committer

    [grant], committer = asyncio.run(scenario())
    assert grant is None
    assert (committer.committed, committer.refused, len(committer)) == (1, 0, 0)
    assert committer.slots() == set()
    assert shard.slot().status is SlotStatus.SUCCEEDED


def test_a_round_trip_with_nothing_to_commit_carries_the_claims_alone(
        r: redis.Redis, redis_url: str, client: Client, clock: ManualClock) -> None:
    shard = make(r, client, clock)
    entries = shard.read()

    async def scenario() -> list[object]:
        conn = async_redis(redis_url)
        exchange = Exchange(conn, Committer(client.keys, clock, W, 1000), WorkerConfig())
        answers, _ = await exchange.send([scripts.claim(
            shard.prefix, clock.now_ms(), W, LEASE, entries)])
        await conn.aclose()
        return replies.claimed(answers[0], entries)

    [grant] = asyncio.run(scenario())
    assert grant is not None and grant.token == 1
    assert shard.slot().status is SlotStatus.RUNNING
