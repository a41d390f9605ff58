"""The limits as the claim scripts read them (scheduler/core/limits.py): set_queue_limit writes
each copy into the slot of the script that reads it, and claim.lua, take.lua and acquire.lua
apply what they find at the call, with no worker between the call and the claim."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from helpers import LEASE, W, make, running_workers, until
from scheduler import Client, QueueLimit, Registry
from scheduler.core import limits
from scheduler.core.keys import key_shard
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies
from scheduler.scripts.replies import Acquired, Code


def _copies(r: redis.Redis, client: Client, queue: str) -> tuple[Any, list[Any], list[Any]]:
    keys = client.keys
    return (r.hgetall(keys.limit(queue)),
            [r.sismember(keys.limited(s), queue) for s in range(client.shards)],
            [r.hgetall(keys.key_limit(s, queue)) for s in range(client.shards)])


def test_a_limit_is_written_where_every_script_reads_it(r: redis.Redis, client: Client) -> None:
    client.set_queue_limit("q", concurrency=2, rate=2.5, per_key_concurrency=1,
                           per_key_rate="60/m")
    wide, limited, per_key = _copies(r, client, "q")
    assert wide == {b"concurrency": b"2", b"rate": b"2.5"}
    assert limited == [True] * client.shards
    assert per_key == [{b"concurrency": b"1", b"rate": b"1.0"}] * client.shards
    client.set_queue_limit("q", per_key_concurrency=3)  # each part left None is no limit
    wide, limited, per_key = _copies(r, client, "q")
    assert wide == {} and limited == [False] * client.shards
    assert per_key == [{b"concurrency": b"3"}] * client.shards
    client.set_queue_limit("q")
    assert _copies(r, client, "q") == ({}, [False] * client.shards, [{}] * client.shards)
    assert client.queue_limits() == {}


def test_a_claim_without_permits_is_refused_while_its_queue_has_a_queue_wide_limit(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """LIMITED: nothing written, the entry stays with the consumer; with permits, or once the
    limit is cleared, the same entry is claimed. Another queue is not touched by it."""
    s = make(r, client, clock)
    other = make(r, client, clock)
    client.set_queue_limit(s.queue, concurrency=1)
    entries = s.read()
    assert s.claim(entries) == [[Code.LIMITED]]
    assert s.slot().status.value == "queued" and s.slot().attempt == 0
    assert r.xpending(s.stream, "workers")["pending"] == 1
    assert s.claim(entries, worker=W)[0][0] == Code.LIMITED  # sent again: the same
    assert other.claim(other.read())[0][0] == Code.OK
    granted = replies.claim_items(s.run(scripts.claim(s.prefix, clock.now_ms(), W, LEASE,
                                                      entries, permitted=True)))
    assert granted[0][0] == Code.OK and s.slot().attempt == 1

    cleared = make(r, client, clock)
    client.set_queue_limit(cleared.queue, rate=1)
    read = cleared.read()
    assert cleared.claim(read) == [[Code.LIMITED]]
    client.set_queue_limit(cleared.queue)
    assert cleared.claim(read)[0][0] == Code.OK


def test_a_take_reads_the_per_key_limit_and_refuses_without_permits(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    keys = client.keys
    ids = [client.submit("t", queue="kq", concurrency_key="acme") for _ in range(4)]
    prefix = keys.prefix(key_shard("acme", client.shards))

    def take(permitted: bool = False) -> tuple[int, bool]:
        reply = scripts.run_sync(r, [scripts.take(prefix, clock.now_ms(), W, LEASE, "kq", 10,
                                                  permitted=permitted)])[0]
        entries, _, _, limited, _ = replies.taken(reply, "kq")
        return len(entries), limited

    client.set_queue_limit("kq", per_key_concurrency=1)
    assert take() == (1, False)
    assert take() == (0, False)  # the key is at its limit
    client.set_queue_limit("kq", per_key_concurrency=2)  # raised: the next take sees it
    assert take() == (1, False)
    client.set_queue_limit("kq", concurrency=10)  # queue-wide now, no per-key part
    assert take() == (0, True)
    assert take(permitted=True) == (2, False)
    assert [client.slots(i)[0].status.value for i in ids] == ["running"] * 4


def test_acquire_reads_the_limit_at_each_call(r: redis.Redis, client: Client,
                                              clock: ManualClock) -> None:
    keys = client.keys

    def acquire(want: int, holder: str) -> Acquired:
        call = scripts.acquire(keys.permits("q"), keys.bucket("q"), keys.limit("q"),
                               clock.now_ms(), want, LEASE, holder, [])
        return Acquired.decode(scripts.run_sync(r, [call])[0])

    client.set_queue_limit("q", concurrency=1)
    assert acquire(3, "w:1").granted == 1
    client.set_queue_limit("q", concurrency=2)
    assert acquire(3, "w:2").granted == 1  # one held, one more
    client.set_queue_limit("q")
    cleared = acquire(3, "w:3")
    assert cleared.granted == 3 and cleared.members == ["", "", ""]


def test_a_worker_writes_the_copies_of_limits_set_before_the_scripts_read_them(
        r: redis.Redis, client: Client, redis_url: str) -> None:
    """A limit an older version set (the `limits` hash alone): the first worker to start
    writes the scripts' copies, which the next claim reads; complete ones are left alone."""
    client.create_namespace()
    keys = client.keys
    old = QueueLimit(concurrency=2, per_key_concurrency=1)
    r.hset(keys.limits, "old", limits.encode(old))
    client.set_queue_limit("new", rate=5)
    r.hset(keys.limit("new"), "rate", "7.0")  # must stay as it is: the copies are there

    async def main() -> None:
        async with running_workers(redis_url, client.namespace, Registry(), 1,
                                   queues=("old",)) as workers:
            await until("the copies", lambda: _exists(r, keys.limit("old")), timeout=10)
            assert await workers[0].limited.copy_missing(client.queue_limits()) == []

    asyncio.run(main())
    wide, limited, per_key = _copies(r, client, "old")
    assert wide == {b"concurrency": b"2"} and limited == [True] * client.shards
    assert per_key == [{b"concurrency": b"1"}] * client.shards
    assert r.hgetall(keys.limit("new")) == {b"rate": b"7.0"}


async def _exists(r: redis.Redis, key: str) -> bool:
    return bool(r.exists(key))
