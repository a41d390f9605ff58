"""The shards' lane indexes (queue_cleaner.py, lua/clean_lanes.lua): a lane that had no
entry for the idle time and holds nothing leaves its shard's index, so `sched status` and the
reclaimer walk the queues in use instead of every queue name a namespace ever saw; a lane
that holds an entry (unread, or pending: a run in flight) never leaves it, and a lane gets
back in with the entry that needs it, whichever transition writes that entry."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from helpers import Shard, make
from scheduler import Client, RetryPolicy
from scheduler.core.keys import DISPATCH_GROUP, Keys, lanes
from scheduler.node.promoter import Promoter
from scheduler.node.queue_cleaner import QueueCleaner
from scheduler.node.reclaimer import Reclaimer
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies

SHARDS = 4
IDLE_S = 60.0


def indexed(r: redis.Redis, ns: str) -> set[str]:
    """Every lane any shard's index names."""
    return {lane.decode() for s in range(SHARDS)
            for lane in r.zrange(Keys(ns).lane_index(s), 0, -1)}


def clean(redis_url: str, ns: str, clock: ManualClock, shards: int = SHARDS) -> int:
    """One cleaner pass over every shard; the lanes it removed."""
    async def once() -> int:
        async with async_redis(redis_url) as conn:
            return await QueueCleaner(conn, Keys(ns), range(shards), clock, idle_s=IDLE_S,
                                      total_shards=shards).run_to_end()
    return asyncio.run(once())


def reclaim(redis_url: str, ns: str, clock: ManualClock) -> tuple[dict[str, int], set[str]]:
    """One reclaim pass over every shard: what it did, and the lanes it walked. Its pending
    entries' idle time is Redis's own: a 1 ms lease makes them all idle enough, and the
    slots' leases (the injected clock's) decide."""
    time.sleep(0.01)

    async def once() -> tuple[dict[str, int], set[str]]:
        conn = async_redis(redis_url)
        reclaimer = Reclaimer(conn, Keys(ns), range(SHARDS), clock, lease_ms=1)
        try:
            return await reclaimer.run_once(), {lane for _, lane in reclaimer.cursors}
        finally:
            await conn.aclose()
    return asyncio.run(once())


def run_to_end(sh: Shard) -> None:
    """Read, claim and complete the shard's one entry, as a worker does (holding a permit,
    should its queue have a queue-wide limit)."""
    [(lane, msg, slot)] = sh.read()
    [grant] = replies.claimed(sh.run(scripts.claim(sh.prefix, sh.clock.now_ms(), "w", 30_000,
                                                   [(lane, msg, slot)], permitted=True)),
                              [(lane, msg, slot)])
    assert isinstance(grant, replies.Grant)
    now = sh.clock.now_ms()
    sh.run(scripts.complete(sh.prefix, now, 1000, "w",
                            [scripts.Succeeded(slot, grant.token, now, now, lane, msg)]))


@pytest.fixture
def client(redis_url: str, ns: str, clock: ManualClock) -> Iterator[Client]:
    with Client(redis_url, ns, shards=SHARDS, clock=clock) as c:
        yield c


def test_idle_lanes_that_hold_nothing_leave_the_index_and_status(
        r: redis.Redis, client: Client, clock: ManualClock, redis_url: str, ns: str) -> None:
    drained = make(r, client, clock, queue="drained")
    run_to_end(drained)
    client.submit("t", queue="unread")  # no worker ever read it: no group
    make(r, client, clock, queue="waiting")  # a group, the entry not delivered
    running = make(r, client, clock, queue="running")
    running.claim(running.read())  # pending: a run in flight
    client.submit("t", queue="urgent", priority=1)  # a lane of its own: "urgent:p1"
    clock.advance(IDLE_S + 1)
    run_to_end(make(r, client, clock, queue="recent"))  # drained, but within the idle time
    assert indexed(r, ns) == {"drained", "unread", "waiting", "running", "urgent:p1", "recent"}

    assert clean(redis_url, ns, clock) == 1
    assert indexed(r, ns) == {"unread", "waiting", "running", "urgent:p1", "recent"}
    assert [q.queue for q in client.status().queues] == ["recent", "running", "unread",
                                                         "urgent", "waiting"]
    # Only the index changed: the drained lane's stream keeps its group for the workers.
    assert r.xinfo_groups(drained.stream)[0]["name"] == DISPATCH_GROUP.encode()
    # What holds something is looked at again only after another idle time, and stays.
    clock.advance(IDLE_S + 1)
    assert clean(redis_url, ns, clock) == 1  # "recent" went idle
    assert indexed(r, ns) == {"unread", "waiting", "running", "urgent:p1"}


def test_a_queue_with_a_limit_stays_listed_while_idle(r: redis.Redis, client: Client,
                                                      clock: ManualClock, redis_url: str,
                                                      ns: str) -> None:
    client.set_queue_limit("mail", concurrency=2)
    run_to_end(make(r, client, clock, queue="mail"))
    clock.advance(IDLE_S + 1)
    clean(redis_url, ns, clock)
    assert indexed(r, ns) == set()
    assert [q.queue for q in client.status().queues] == ["mail"]
    assert [(q.queue, q.depth) for q in client.queues()] == [("mail", 0)]


def _by_submit(r: redis.Redis, client: Client, clock: ManualClock, redis_url: str,
               ns: str) -> None:
    client.submit("t", queue="mail")


def _by_promote(r: redis.Redis, client: Client, clock: ManualClock, redis_url: str,
                ns: str) -> None:
    client.submit("t", queue="mail", delay=30)
    clock.advance(31)

    async def promote() -> None:
        conn = async_redis(redis_url)
        promoter = Promoter(conn, [Keys(ns).prefix(s) for s in range(SHARDS)], clock)
        await promoter.run_once()
        await conn.aclose()
    asyncio.run(promote())


def _by_replay(r: redis.Redis, client: Client, clock: ManualClock, redis_url: str,
               ns: str) -> None:
    sh = make(r, client, clock, queue="other", retry=RetryPolicy(max_attempts=1))
    [(lane, msg, slot)] = sh.read()
    [grant] = replies.claimed(sh.run(scripts.claim(sh.prefix, clock.now_ms(), "w", 30_000,
                                                   [(lane, msg, slot)])), [(lane, msg, slot)])
    assert isinstance(grant, replies.Grant)
    now = clock.now_ms()
    sh.run(scripts.fail(sh.prefix, now, 1000, "w", [scripts.Failed(slot, grant.token, "failed", "no", -1, 0.0,
                                                     now, now)]))
    r.hset(Keys(ns).slot(sh.shard, slot), "queue", "mail")  # its replay goes to "mail"
    r.delete(Keys(ns).lane_index(sh.shard))
    assert client.replay([slot]) == 1


@pytest.mark.parametrize("write", [_by_submit, _by_promote, _by_replay],
                         ids=["submit", "promote", "replay"])
def test_an_entry_written_after_its_lane_left_the_index_indexes_it_again(
        r: redis.Redis, client: Client, clock: ManualClock, redis_url: str, ns: str,
        write: Any) -> None:
    """The same long-lived client, the same queue: nothing is cached on the client's side
    that would skip a lane the cleaner dropped meanwhile."""
    run_to_end(make(r, client, clock, queue="mail"))
    clock.advance(IDLE_S + 1)
    clean(redis_url, ns, clock)
    assert "mail" not in indexed(r, ns)
    write(r, client, clock, redis_url, ns)
    assert "mail" in indexed(r, ns)
    assert [(q.queue, q.depth) for q in client.status().queues if q.queue == "mail"] == [
        ("mail", 1)]
    clock.advance(IDLE_S + 1)
    clean(redis_url, ns, clock)  # it holds an entry: it stays
    assert "mail" in indexed(r, ns)


def test_the_reclaimer_finds_an_expired_lease_in_a_lane_that_went_idle(
        r: redis.Redis, client: Client, clock: ManualClock, redis_url: str, ns: str) -> None:
    sh = make(r, client, clock, queue="mail")
    sh.claim(sh.read(), worker="ghost")  # its worker then vanishes: the entry stays pending
    for q in ("a", "b", "c"):
        run_to_end(make(r, client, clock, queue=q))
    clock.advance(IDLE_S + 1)
    clean(redis_url, ns, clock)
    assert indexed(r, ns) == {"mail"}
    done, walked = reclaim(redis_url, ns, clock)
    assert done["reclaimed"] == 1 and walked == {"mail"}
    assert client.get_slot(sh.slot_id).status.value == "queued"


def test_queue_names_listed_by_older_versions_move_into_the_lane_indexes(
        r: redis.Redis, client: Client, clock: ManualClock, redis_url: str, ns: str) -> None:
    """Such a namespace listed its queues in `<ns>:queues` and indexed no lane: an entry an
    older client wrote must stay where the reclaimer looks."""
    keys = Keys(ns)
    client.create_namespace()
    r.sadd(keys.queues, "gone", "busy", "urgent")
    r.xadd(keys.queue(1, "busy"), {"s": "x:1"})
    r.xadd(keys.queue(2, "urgent", priority=1), {"s": "y:1"})
    clean(redis_url, ns, clock)
    assert not r.exists(keys.queues)
    assert {s: [lane.decode() for lane in r.zrange(keys.lane_index(s), 0, -1)]
            for s in range(SHARDS)} == {0: [], 1: ["busy"], 2: ["urgent:p1"], 3: []}
    assert [q.queue for q in client.status().queues] == ["busy", "urgent"]


def test_a_status_read_and_a_reclaim_pass_walk_only_the_lanes_in_use(private: Any) -> None:
    """1,000 queue names of which 5 hold work: after a cleaning pass, a status read costs Redis
    an XINFO per lane in use (and one per shard for the snapshotter's group), and a reclaim
    pass an XPENDING per lane in use, not per name ever seen (counted on a Redis of the
    test's own: the shared one serves other tests meanwhile)."""
    r = redis.Redis.from_url(private.url)
    clock = ManualClock()
    ns = "walk" + uuid.uuid4().hex[:8]
    names = [f"q{i:04d}" for i in range(1000)]
    with Client(private.url, ns, shards=SHARDS, clock=clock) as client:
        client.submit_many([{"task": "t", "queue": q} for q in names])
        keys = Keys(ns)
        for q in names[5:]:  # drained: read and acked
            for s in range(SHARDS):
                stream = keys.queue(s, q)
                if r.exists(stream):
                    r.xgroup_create(stream, DISPATCH_GROUP, id="0")
                    for _, msgs in r.xreadgroup(DISPATCH_GROUP, "w", {stream: ">"}):
                        r.xack(stream, DISPATCH_GROUP, *[m for m, _ in msgs])
        clock.advance(IDLE_S + 1)
        assert clean(private.url, ns, clock) == 995
        r.config_resetstat()
        status = client.status()
        stats = r.info("commandstats")
        xinfo = stats.get("cmdstat_xinfo", {})
        assert xinfo.get("calls", 0) + xinfo.get("failed_calls", 0) <= 5 + SHARDS
        assert [q.queue for q in status.queues] == names[:5]
        r.config_resetstat()
        done, walked = reclaim(private.url, ns, clock)
        assert walked == set(names[:5])
        assert r.info("commandstats")["cmdstat_xpending"]["calls"] <= 5
    r.close()


def test_every_lane_of_a_queue_is_one_of_its_priorities() -> None:
    assert lanes("mail") == ["mail:p1", "mail:p2", "mail", "mail:p4", "mail:p5"]
