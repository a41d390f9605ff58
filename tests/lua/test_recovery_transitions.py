"""reclaim, cancel, replay, purge and once on a seeded shard, with an injected clock."""

from __future__ import annotations

import json

import pytest
import redis

from helpers import LEASE, Shard, W, make
from scheduler import Client, RetryPolicy, SlotStatus
from scheduler.core import events
from scheduler.core.keys import DISPATCH_GROUP, shard_of
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Code


def reclaim(s: Shard, min_idle: int = 0) -> list[int]:
    """One reclaim pass. min_idle 0: the stream's idle clock is real time, the test's clock is
    injected; the slot's lease_until (injected time) decides what has expired."""
    reply = s.run(scripts.reclaim(s.prefix, s.clock.now_ms(), 1000, 100, min_idle,
                                  [(s.queue, "-")]))
    return [int(x) for x in reply[:4]]


def test_an_expired_lease_is_reclaimed_and_the_old_commit_refused(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.claim(s.read())
    assert r.zcard(s.keys.leases(s.shard)) == 0  # its pending entry shows the lease
    clock.advance(LEASE / 1000 - 1)
    assert reclaim(s) == [0, 0, 0, 0]  # not expired yet
    clock.advance(2)
    assert reclaim(s) == [1, 0, 0, 0]
    slot = s.slot()
    assert slot.status is SlotStatus.QUEUED and slot.failures == 1
    assert slot.attempts[0].outcome == "lost" and "stopped heartbeating" in (slot.attempts[0].error or "")
    assert r.zcard(s.keys.leases(s.shard)) == 0
    [reply] = s.claim(s.read(consumer="w2"), worker="w2")
    assert reply[:2] == [Code.OK, 2]
    now = clock.now_ms()
    assert s.run(scripts.complete(s.prefix, now, 1000, W, [scripts.Succeeded(s.slot_id, 1, now, now)])) == [Code.STALE]
    assert s.run(scripts.complete(s.prefix, now, 1000, "w2", [scripts.Succeeded(s.slot_id, 2, now, now)])) == [1]
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0
    assert "refused" in [kind for kind, _ in s.events()]


def committed(s: Shard, worker: str, items: list[tuple[str, bytes, str, int]]) -> list[int]:
    """complete.lua's codes for (lane, msg_id, slot_id, token) items, each presented with
    the entry it was claimed from, as a worker presents them."""
    now = s.clock.now_ms()
    return [int(c) for c in s.run(scripts.complete(
        s.prefix, now, 1000, worker, [scripts.Succeeded(slot, token, now, now, lane, msg)
                                      for lane, msg, slot, token in items]))]


def test_a_commit_fenced_by_its_pending_entry(r: redis.Redis, client: Client,
                                              clock: ManualClock) -> None:
    """A claimed entry still pending commits its slot (complete.lua reads no hash for it) and
    is acked; sent again, it is answered "already" from the slot, and another worker's
    commit of it is refused."""
    s = make(r, client, clock)
    [(lane, msg, slot)] = s.read()
    s.claim([(lane, msg, slot)])
    assert committed(s, W, [(lane, msg, slot, 1)]) == [Code.OK]
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0
    assert s.slot().status is SlotStatus.SUCCEEDED
    assert committed(s, W, [(lane, msg, slot, 1)]) == [Code.REPEAT]
    assert committed(s, "other", [(lane, msg, slot, 1)]) == [Code.STALE]
    kinds = [kind for kind, _ in s.events()]
    assert kinds.count("succeeded") == 1 and kinds.count("refused") == 1


def test_an_entry_a_reclaim_acked_fences_out_the_old_commit(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """Two slots of one lane claimed by one worker; one's lease runs out and the reclaimer
    acks its entry and dispatches it again. The worker's late commit of both, each with its
    entry, finds the lane's entries not all pending: each slot is checked, the reclaimed one
    refused (it runs again elsewhere), the other committed."""
    ids = client.submit_many([{"task": "t", "queue": "fenced"} for _ in range(5)])
    by_shard: dict[int, list[str]] = {}
    for job_id in ids:
        by_shard.setdefault(shard_of(job_id, client.shards), []).append(job_id)
    first, second = next(jobs for jobs in by_shard.values() if len(jobs) >= 2)[:2]
    s = Shard(r, client, clock, first)
    entries = {slot: (lane, msg, slot) for lane, msg, slot in s.read()}
    late, live = entries[client.slots(first)[0].slot_id], entries[client.slots(second)[0].slot_id]
    s.claim([late])
    clock.advance(LEASE / 1000 / 2)
    s.claim([live])
    clock.advance(LEASE / 1000 / 2 + 1)
    # The first lease only (the shard's other entries, read and never claimed, are
    # dispatched again too).
    assert reclaim(s)[0] == 1
    assert committed(s, W, [(*late, 1), (*live, 1)]) == [Code.STALE, Code.OK]
    assert client.get_slot(late[2]).status is SlotStatus.QUEUED
    assert client.get_slot(live[2]).status is SlotStatus.SUCCEEDED
    pending = {p["message_id"] for p in r.xpending_range(s.stream, DISPATCH_GROUP, "-", "+", 10)}
    assert not pending & {late[1], live[1]}


def test_a_succeeded_entry_names_its_slots_alone_when_they_share_an_attempt(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The hot path's compact records: slot ids, with their one attempt number in the entry's
    `attempt`; a batch of several attempt numbers has a record {slot, attempt} each."""
    ids = client.submit_many([{"task": "t", "queue": "compact"} for _ in range(13)])
    by_shard: dict[int, list[str]] = {}
    for job_id in ids:
        by_shard.setdefault(shard_of(job_id, client.shards), []).append(job_id)
    jobs = next(jobs for jobs in by_shard.values() if len(jobs) >= 4)
    s = Shard(r, client, clock, jobs[0])
    entries = {slot: (lane, msg, slot) for lane, msg, slot in s.read()}
    first, second, third, fourth = (entries[client.slots(j)[0].slot_id] for j in jobs[:4])
    s.claim([first, second, third])
    assert committed(s, W, [(*first, 1), (*second, 1)]) == [Code.OK, Code.OK]
    clock.advance(LEASE / 1000 + 1)
    # The third's attempt 1 is lost, and it and the fourth (read, never claimed) are
    # dispatched again under new entries.
    assert reclaim(s)[0] == 1
    anew = {slot: (lane, msg, slot) for lane, msg, slot in s.read(consumer="w2")}
    third, fourth = anew[third[2]], anew[fourth[2]]
    s.claim([third, fourth], worker="w2")
    assert committed(s, "w2", [(*third, 2), (*fourth, 1)]) == [Code.OK, Code.OK]
    raw = [f for _, f in r.xrange(s.keys.events(s.shard)) if f[b"type"] == b"succeeded"]
    assert [(f[b"attempt"], json.loads(f[b"data"])) for f in raw] == [
        (b"1", [first[2], second[2]]),
        (b"", [{"slot": third[2], "attempt": 2}, {"slot": fourth[2], "attempt": 1}])]
    assert events.records(raw[0]) == [{"slot": first[2], "attempt": 1},
                                      {"slot": second[2], "attempt": 1}]


def test_heartbeats_keep_a_lease_from_being_reclaimed(r: redis.Redis, client: Client,
                                                      clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.claim(s.read())
    for _ in range(5):
        clock.advance(LEASE / 1000 / 2)
        assert s.run(scripts.heartbeat(s.prefix, clock.now_ms(), LEASE, W, [(s.slot_id, 1)])) == [1]
        assert reclaim(s) == [0, 0, 0, 0]
    assert s.slot().status is SlotStatus.RUNNING


def test_at_most_once_slots_with_no_pending_entry_end_lost(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, delivery="at_most_once")
    s.claim(s.read())
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0
    assert r.zscore(s.keys.leases(s.shard), s.slot_id) == clock.now_ms() + LEASE
    clock.advance(LEASE / 1000 / 2)
    assert s.run(scripts.heartbeat(s.prefix, clock.now_ms(), LEASE, W, [(s.slot_id, 1)])) == [1]
    assert r.zscore(s.keys.leases(s.shard), s.slot_id) == clock.now_ms() + LEASE
    clock.advance(LEASE / 1000 + 1)
    assert reclaim(s) == [0, 1, 0, 0]
    assert s.slot().status is SlotStatus.LOST
    assert r.xlen(s.stream) == 1 and not s.read()  # never dispatched again


def test_a_job_that_keeps_losing_its_worker_ends_dead(r: redis.Redis, client: Client,
                                                      clock: ManualClock) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=2))
    for expected in ([1, 0, 0, 0], [0, 0, 1, 0]):
        s.claim(s.read())
        clock.advance(LEASE / 1000 + 1)
        assert reclaim(s) == expected
    assert s.slot().status is SlotStatus.DEAD
    assert r.zscore(s.keys.dlq(s.shard), s.slot_id) is not None


def test_entries_read_but_never_claimed_are_dispatched_again(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    [(_, msg, _)] = s.read()  # the worker dies here, before claim
    assert reclaim(s, min_idle=0) == [0, 0, 0, 1]
    [(_, new_msg, slot_id)] = s.read(consumer="w2")
    assert new_msg != msg and slot_id == s.slot_id
    assert s.claim([(s.queue, new_msg, slot_id)], worker="w2")[0][0] == Code.OK
    assert s.claim([(s.queue, msg, slot_id)]) == [[Code.STALE]]  # the old entry is stale


def test_cancel_each_state(r: redis.Redis, client: Client, clock: ManualClock) -> None:
    queued = make(r, client, clock)
    running = make(r, client, clock)
    running.claim(running.read())
    done = make(r, client, clock)
    [reply] = done.claim(done.read())
    now = clock.now_ms()
    done.run(scripts.complete(done.prefix, now, 1000, W, [scripts.Succeeded(done.slot_id, 1, now, now)]))

    def cancel(s: Shard) -> int:
        return int(s.run(scripts.cancel(s.prefix, now, 1000, "operator", [s.slot_id]))[0])

    assert cancel(queued) == Code.CANCELLED
    assert queued.slot().status is SlotStatus.CANCELLED
    assert queued.claim(queued.read()) == [[Code.STALE]]  # its entry, read later, is dropped as stale
    assert cancel(running) == Code.CANCEL_REQUESTED
    assert running.run(scripts.heartbeat(running.prefix, now, LEASE, W, [(running.slot_id, 1)])) == [Code.CANCEL_REQUESTED]
    assert cancel(done) == Code.TERMINAL
    assert done.slot().status is SlotStatus.SUCCEEDED


def test_a_cancelled_running_slot_whose_worker_died_ends_cancelled(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.claim(s.read())
    s.run(scripts.cancel(s.prefix, clock.now_ms(), 1000, "operator", [s.slot_id]))
    clock.advance(LEASE / 1000 + 1)
    reclaim(s)
    assert s.slot().status is SlotStatus.CANCELLED


def test_replay_is_a_new_attempt_of_the_same_slot_and_purge_keeps_history(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=1))
    s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "boom", -1, 0, now, now)]))
    assert s.slot().status is SlotStatus.DEAD
    assert s.run(scripts.replay(s.prefix, now, 1000, [s.slot_id, "nope:1"])) == [Code.OK, Code.MISSING]
    assert s.run(scripts.replay(s.prefix, now, 1000, [s.slot_id])) == [Code.MISSING]  # not dead any more
    slot = s.slot()
    assert slot.status is SlotStatus.QUEUED and slot.failures == 0
    [reply] = s.claim(s.read())
    assert reply[:2] == [Code.OK, 2]
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 2, "failed", "again", -1, 0, now, now)]))
    assert s.run(scripts.purge(s.prefix, now, 1000, [s.slot_id])) == [1]
    assert r.zcard(s.keys.dlq(s.shard)) == 0
    slot = s.slot()
    assert slot.status is SlotStatus.DEAD and [a.error for a in slot.attempts] == ["boom", "again"]
    assert len(r.keys(f"{s.keys.ns}:*slot:*")) == 1  # never a second slot


def test_once_records_a_named_effect_once_per_slot(r: redis.Redis, client: Client,
                                                   clock: ManualClock) -> None:
    s = make(r, client, clock, delivery="exactly_once")
    s.claim(s.read())
    once = [s.run(scripts.once(s.prefix, s.slot_id, 1, "charge")) for _ in range(2)]
    assert once == [Code.OK, Code.REPEAT]  # the worker says no to a repeat
    assert s.run(scripts.once(s.prefix, s.slot_id, 1, "email")) == Code.OK
    clock.advance(LEASE / 1000 + 1)
    reclaim(s)
    assert s.run(scripts.once(s.prefix, s.slot_id, 1, "other")) == Code.STALE  # lease lost
    s.claim(s.read(consumer="w2"), worker="w2")
    assert s.run(scripts.once(s.prefix, s.slot_id, 2, "charge")) == Code.DONE_BEFORE  # done by attempt 1


def test_reclaim_tolerates_a_queue_without_a_consumer_group(r: redis.Redis, client: Client,
                                                            clock: ManualClock) -> None:
    client.submit("t", queue="nobody-reads-this")  # the stream exists, its group does not
    prefix = client.keys.prefix(0)
    reply = scripts.run_sync(r, [scripts.reclaim(prefix, clock.now_ms(), 1000, 10, 0, [
        ("nobody-reads-this", "-"), ("never-used", "-")])])[0]
    assert [int(x) for x in reply[:4]] == [0, 0, 0, 0]


def test_the_reclaimer_forgets_workers_silent_for_many_leases(
        r: redis.Redis, redis_url: str, ns: str, clock: ManualClock) -> None:
    import asyncio

    import redis.asyncio

    from scheduler.core.keys import Keys
    from scheduler.node.reclaimer import WORKER_FORGET_LEASES, Reclaimer

    keys = Keys(ns)
    now = clock.now_ms()
    r.zadd(keys.workers, {"gone": now - WORKER_FORGET_LEASES * LEASE - 1, "alive": now - 1000})

    async def once() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await Reclaimer(client, keys, [0], clock, lease_ms=LEASE).run_once()
        await client.aclose()

    asyncio.run(once())
    assert r.zrange(keys.workers, 0, -1) == [b"alive"]


def test_reclaim_pages_through_many_idle_entries(r: redis.Redis, client: Client,
                                                 clock: ManualClock) -> None:
    client.submit_many([{"task": "t", "queue": "paged"} for _ in range(5)])
    counts, cursors = [], {}
    prefixes = {client.keys.prefix(s) for s in range(client.shards)}
    for prefix in prefixes:  # read every entry without claiming (workers died)
        stream = prefix + "q:paged"
        if r.exists(stream):
            r.xgroup_create(stream, DISPATCH_GROUP, id="0")
            r.xreadgroup(DISPATCH_GROUP, W, {stream: ">"}, count=100)
    for _ in range(4):
        total = 0
        for prefix in prefixes:
            reply = scripts.run_sync(r, [scripts.reclaim(
                prefix, clock.now_ms(), 1000, 2, 0, [("paged", cursors.get(prefix, "-"))])])[0]
            total += int(reply[3])
            cursors[prefix] = reply[4].decode() if isinstance(reply[4], bytes) else reply[4]
        counts.append(total)
    assert sum(counts) == 5 and counts[-1] == 0
    assert all(c == "-" for c in cursors.values())


@pytest.mark.parametrize("priority", [1, 3, 5])
def test_cancelling_or_deleting_a_read_entry_acks_it_on_its_priority_lane(
        r: redis.Redis, client: Client, clock: ManualClock, priority: int) -> None:
    """A queued slot a worker has read sits pending on its priority's own stream (q:<queue>
    for 3, q:<queue>:pN otherwise): cancel.lua and delete_job.lua ack it there, so it is not
    left pending for the reclaimer."""
    for end in ("cancel", "delete"):
        s = make(r, client, clock, priority=priority)
        s.stream = client.keys.queue(s.shard, s.queue, priority)
        if priority != 3:
            r.xgroup_create(s.stream, DISPATCH_GROUP, id="0", mkstream=True)
        assert [slot for _, _, slot in s.read()] == [s.slot_id]
        now = clock.now_ms()
        if end == "cancel":
            s.run(scripts.cancel(s.prefix, now, 1000, "operator", [s.slot_id]))
        else:
            s.run(scripts.delete_job(s.prefix, now, 1000, s.job_id, "operator"))
        assert s.slot().status is SlotStatus.CANCELLED
        assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0, end
