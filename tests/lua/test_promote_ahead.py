"""promote.lua's early dispatch and claim.lua's guard that nothing starts before its time."""

from __future__ import annotations

from datetime import UTC, datetime

import redis

from helpers import W, make
from scheduler import Client, RetryPolicy, SlotStatus
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Code


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_a_slot_due_within_the_horizon_is_dispatched_early_and_not_claimed_before_its_time(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    fire = clock.now_ms() + 1500
    s = make(r, client, clock, at=_at(fire))
    assert s.slot().status is SlotStatus.SCHEDULED
    # Outside the horizon: nothing moves, and the reply says when to come back.
    assert s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100, ahead_ms=1000)) == [
        0, fire - 1000, 0]
    moved, next_ms, _ = s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100,
                                              ahead_ms=2000))
    assert (moved, next_ms) == (1, -1)
    assert s.slot().status is SlotStatus.QUEUED
    [(_, [(msg, fields)])] = r.xreadgroup("workers", W, {s.stream: ">"})
    assert fields == {b"s": s.slot_id.encode(), b"t": b"t", b"p": b'{"n":1}', b"o": b"",
                      b"d": b"", b"f": str(fire).encode()}
    entries = [(s.queue, msg, s.slot_id)]
    # Before its time the claim changes nothing and says until when.
    assert s.claim(entries) == [[Code.EARLY, str(fire).encode()]]
    assert s.slot().status is SlotStatus.QUEUED and s.slot().attempt == 0
    clock.ms = fire - 1
    assert s.claim(entries)[0][0] == Code.EARLY
    clock.ms = fire
    [grant] = s.claim(entries)
    assert grant[:2] == [Code.OK, 1]
    assert r.hget(f"{s.prefix}slot:{s.slot_id}", "claimed_ms") == str(fire).encode()


def test_a_retry_is_dispatched_early_and_held_to_its_backoff(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=3, base_s=2, max_s=60, jitter=0))
    s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "x", -1, 0.1, now,
                                                 now)]))
    assert s.run(scripts.promote(s.prefix, now, 1000, 100, ahead_ms=2000))[0] == 1
    entries = [(s.queue, r.hget(f"{s.prefix}slot:{s.slot_id}", "msg"), s.slot_id)]
    clock.ms = now + 1999
    assert s.claim(entries)[0][0] == Code.EARLY
    clock.ms = now + 2000
    assert s.claim(entries)[0][:2] == [Code.OK, 2]


def test_an_overlap_skip_occurrence_waits_in_due_for_its_time(r: redis.Redis, ns: str) -> None:
    """Its overlap check must see the job as it is at the fire time, so it is not taken early;
    the slots behind it are, and the reply names its time as the next call."""
    p = f"{ns}:{{s00}}:"
    for i, (fire, overlap) in enumerate(((150, "skip"), (160, None), (900, None))):
        fields = {"status": "scheduled", "queue": "default", "job_id": f"j{i}", "fire_ms": fire}
        if overlap:
            fields["overlap"] = overlap
        r.hset(f"{p}slot:j{i}:{fire}", mapping=fields)
        r.zadd(f"{p}due", {f"j{i}:{fire}": fire})
    assert scripts.run_sync(r, [scripts.promote(p, 100, 1000, 10, ahead_ms=100)])[0] == [1, 150, 0]
    assert r.zrange(f"{p}due", 0, -1) == [b"j0:150", b"j2:900"]
    assert r.hget(f"{p}slot:j1:160", "nb") == b"160"
    assert r.hget(f"{p}slot:j0:150", "status") == b"scheduled"
    # At its time it goes like any other, without a not-before mark.
    assert scripts.run_sync(r, [scripts.promote(p, 150, 1000, 10, ahead_ms=100)])[0] == [1, 800, 0]
    assert r.hget(f"{p}slot:j0:150", "status") == b"queued"
    assert r.hget(f"{p}slot:j0:150", "nb") is None


def test_without_a_horizon_promote_takes_only_what_is_due(r: redis.Redis, client: Client,
                                                          clock: ManualClock) -> None:
    fire = clock.now_ms() + 500
    s = make(r, client, clock, at=_at(fire))
    assert s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100)) == [0, fire, 0]
    assert r.hget(f"{s.prefix}slot:{s.slot_id}", "nb") is None
