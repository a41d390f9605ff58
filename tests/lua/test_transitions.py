"""Each Lua transition on a seeded shard: seed with the SDK, run one script, assert the keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from conftest import is_cluster_url
from helpers import LEASE, Shard, W, make
from scheduler import Client, RetryPolicy, SlotStatus
from scheduler.core import events
from scheduler.core.keys import DISPATCH_GROUP, Keys, shard_of
from scheduler.redis import cluster
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies
from scheduler.scripts.replies import Code


def test_submit_writes_job_slot_and_stream_entry(r: redis.Redis, client: Client,
                                                 clock: ManualClock) -> None:
    s = make(r, client, clock)
    slot = s.slot()
    assert slot.status is SlotStatus.QUEUED and slot.attempt == 0
    assert slot.fire_ms == clock.now_ms()
    assert r.xlen(s.stream) == 1
    assert s.events()[0][0] == "submitted"


def test_a_submitted_entry_names_slots_by_id_and_the_rest_as_objects(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A job with a slot is its slot id alone in the `submitted` entry (the hot path's form,
    events.py); a cron job ({job}) or an instant already past ({job, slot, late_ms}) makes
    the entry's records objects."""
    keys = Keys(client.namespace)

    def submitted(job_id: str) -> tuple[Any, list[dict[str, Any]]]:
        shard = shard_of(job_id, client.shards)
        [fields] = [f for _, f in r.xrange(keys.events(shard))
                    if f[b"type"] == b"submitted" and job_id.encode() in f[b"data"]][-1:]
        return json.loads(fields[b"data"]), events.records(fields)

    plain = client.submit("t", None, queue="forms")
    slot = client.slots(plain)[0].slot_id
    assert submitted(plain) == ([slot], [{"slot": slot}])
    recurring = client.submit("t", None, queue="forms", cron="* * * * *")
    assert submitted(recurring)[0] == [{"job": recurring}]
    past = client.submit("t", None, queue="forms",
                         at=datetime.fromtimestamp((clock.now_ms() - 3000) / 1000, UTC))
    raw, _ = submitted(past)
    assert raw == [{"job": past, "slot": client.slots(past)[0].slot_id, "late_ms": 3000}]


def test_claim_then_complete(r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    [reply] = s.claim(s.read())
    assert reply[0] == Code.OK and reply[1] == 1  # attempt 1 is the token
    assert reply[2] == b"t" and json.loads(reply[3]) == {"n": 1}
    slot = s.slot()
    assert slot.status is SlotStatus.RUNNING and slot.lease_until_ms == clock.now_ms() + LEASE
    clock.advance(1)
    assert s.run(scripts.complete(s.prefix, clock.now_ms(), 1000, W,
                                  [scripts.Succeeded(s.slot_id, 1, clock.now_ms() - 5, clock.now_ms())])) == [Code.OK]
    slot = s.slot()
    assert slot.status is SlotStatus.SUCCEEDED
    assert [a.outcome for a in slot.attempts] == ["succeeded"]
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0
    # The claim writes no event (a run outliving its first heartbeat gets one from it).
    assert [e[0] for e in s.events()] == ["submitted", "succeeded"]
    assert s.events()[1][1] == [{"slot": s.slot_id, "attempt": 1}]


def test_a_commit_with_a_stale_token_is_refused_and_recorded(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.claim(s.read())
    now = clock.now_ms()
    assert s.run(scripts.complete(s.prefix, now, 1000, W, [scripts.Succeeded(s.slot_id, 7, now, now)])) == [Code.STALE]
    assert s.run(scripts.fail(s.prefix, now, 1000, W,
                              [scripts.Failed(s.slot_id, 7, "failed", "x", -1, 0.5, now, now)])) == [Code.STALE]
    assert s.slot().status is SlotStatus.RUNNING
    refused = [data for kind, data in s.events() if kind == "refused"]
    assert refused[0][0]["token"] == 7 and refused[0][0]["current_token"] == 1


def test_a_second_success_for_the_same_slot_is_refused(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """Sent again by the worker that committed it (its first reply was lost), a commit is
    answered "already" and changes nothing; from any other worker it is refused."""
    s = make(r, client, clock)
    s.claim(s.read())
    now = clock.now_ms()
    item = [scripts.Succeeded(s.slot_id, 1, now, now)]
    assert s.run(scripts.complete(s.prefix, now, 1000, W, item)) == [Code.OK]
    assert s.run(scripts.complete(s.prefix, now, 1000, W, item)) == [Code.REPEAT]
    assert s.run(scripts.complete(s.prefix, now, 1000, "other", item)) == [
        Code.STALE]
    assert len(s.slot().attempts) == 1
    kinds = [kind for kind, _ in s.events()]
    assert kinds.count("succeeded") == 1 and kinds.count("refused") == 1


def test_a_repeated_failure_is_answered_already_and_a_late_one_refused(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=3, base_s=2, max_s=60, jitter=0))
    s.claim(s.read())
    now = clock.now_ms()
    item = [scripts.Failed(s.slot_id, 1, "failed", "boom", -1, 0.3, now, now)]
    assert s.run(scripts.fail(s.prefix, now, 1000, W, item)) == [Code.RETRY]
    assert s.run(scripts.fail(s.prefix, now, 1000, W, item)) == [Code.REPEAT]
    timed_out = [scripts.Failed(s.slot_id, 1, "timed_out", "late", -1, 0.3, now, now)]
    assert s.run(scripts.fail(s.prefix, now, 1000, W, timed_out)) == [Code.STALE]
    assert s.slot().failures == 1


def test_a_claim_sent_again_by_its_worker_is_granted_again(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A claim whose reply was lost is sent again: the same worker gets the same attempt
    back (fresh lease), any other consumer is told the slot is held."""
    s = make(r, client, clock)
    entries = s.read()
    first = s.claim(entries)
    clock.advance(5)
    again = s.claim(entries)
    assert first[0][:2] == again[0][:2] == [Code.OK, 1]
    assert s.slot().lease_until_ms == clock.now_ms() + LEASE
    assert s.claim(entries, worker="worker-2") == [[Code.HELD]]


def test_a_claim_sent_again_after_its_lease_ran_out_is_not_granted(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """Past its lease the worker gave the run up (its watchdog stopped it, maybe after the
    handler began): the same attempt granted again would start twice, so the entry is left
    for the reclaimer, which ends the attempt and dispatches the slot anew."""
    s = make(r, client, clock)
    entries = s.read()
    s.claim(entries)
    clock.advance(LEASE / 1000 + 0.001)
    assert s.claim(entries) == [[Code.HELD]]
    assert s.slot().attempt == 1


def test_fail_schedules_a_retry_with_backoff_then_promote_dispatches_it(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=3, base_s=2, max_s=60, jitter=0))
    s.claim(s.read())
    now = clock.now_ms()
    assert s.run(scripts.fail(s.prefix, now, 1000, W,
                              [scripts.Failed(s.slot_id, 1, "failed", "boom", -1, 0.3, now, now)])) == [Code.RETRY]
    slot = s.slot()
    assert slot.status is SlotStatus.SCHEDULED and slot.available_ms == now + 2000
    assert r.zscore(s.keys.due(s.shard), s.slot_id) == now + 2000
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0  # the old entry was acked
    clock.advance(1.999)
    assert s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100)) == [0, now + 2000, 0]
    clock.advance(0.001)
    assert s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100)) == [1, -1, 0]
    assert s.slot().status is SlotStatus.QUEUED
    assert s.events()[-1] == ("queued", [{"slot": s.slot_id}])
    [(_, last)] = r.xrevrange(s.keys.events(s.shard), count=1)
    assert json.loads(last[b"data"]) == [s.slot_id]  # the slot id alone (events.py)
    [reply] = s.claim(s.read())
    assert reply[:2] == [Code.OK, 2]  # attempt 2, a new token


def test_failures_past_max_attempts_go_to_the_dead_letter_set(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=2, base_s=0, jitter=0))
    for attempt, expected in ((1, Code.RETRY), (2, Code.DEAD)):
        [reply] = s.claim(s.read())
        now = clock.now_ms()
        assert s.run(scripts.fail(s.prefix, now, 1000, W, [
            scripts.Failed(s.slot_id, reply[1], "failed", f"boom {attempt}", -1, 0.0, now, now)])) == [expected]
        s.run(scripts.promote(s.prefix, now, 1000, 100))
    slot = s.slot()
    assert slot.status is SlotStatus.DEAD and slot.failures == 2
    assert [a.error for a in slot.attempts] == ["boom 1", "boom 2"]
    assert r.zscore(s.keys.dlq(s.shard), s.slot_id) is not None
    assert "dead" in [kind for kind, _ in s.events()]


def test_explicit_retry_delay_and_handler_cancel(r: redis.Redis, client: Client,
                                                 clock: ManualClock) -> None:
    s = make(r, client, clock)
    [reply] = s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "later", 500, 0, now,
                                                 now)]))
    assert s.slot().available_ms == now + 500
    clock.advance(1)
    s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100))
    [reply] = s.claim(s.read())
    assert s.run(scripts.fail(s.prefix, now, 1000, W, [
        scripts.Failed(s.slot_id, reply[1], "cancelled", "no longer needed", -1, 0, now, now)])) == [Code.CANCELLED]
    assert s.slot().status is SlotStatus.CANCELLED


def test_at_most_once_is_acked_at_claim(r: redis.Redis, client: Client,
                                        clock: ManualClock) -> None:
    s = make(r, client, clock, delivery="at_most_once")
    s.claim(s.read())
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0
    assert s.slot().status is SlotStatus.RUNNING


@pytest.mark.parametrize("outcome", ["failed", "timed_out", "retried"])
def test_an_at_most_once_failure_is_final_whatever_attempts_are_left(
        r: redis.Redis, client: Client, clock: ManualClock, outcome: str) -> None:
    """An at_most_once handler that failed may have had its effect: a second start could
    repeat it, so its first failure (a Retry raised included) ends the slot dead, with
    attempts its policy still allows; the same job at_least_once retries."""
    policy = RetryPolicy(max_attempts=5, base_s=0, jitter=0)
    for delivery, expected in (("at_most_once", Code.DEAD), ("at_least_once", Code.RETRY)):
        s = make(r, client, clock, retry=policy, delivery=delivery)
        [reply] = s.claim(s.read())
        now = clock.now_ms()
        assert s.run(scripts.fail(s.prefix, now, 1000, W, [
            scripts.Failed(s.slot_id, reply[1], outcome, "boom", -1, 0.0, now, now)])) == [expected]
        s.run(scripts.promote(s.prefix, now, 1000, 100))
        slot = s.slot()
        if expected is Code.DEAD:
            assert slot.status is SlotStatus.DEAD and slot.attempt == 1 and slot.failures == 1
            assert r.zscore(s.keys.dlq(s.shard), s.slot_id) is not None
            assert s.read() == []  # nothing to claim: it never starts again
        else:
            assert slot.status is SlotStatus.QUEUED


def test_stale_entries_are_dropped_and_held_ones_left(r: redis.Redis, client: Client,
                                                      clock: ManualClock) -> None:
    s = make(r, client, clock)
    entries = s.read()
    s.claim(entries)
    assert s.claim(entries, worker="other") == [[Code.HELD]]  # running under this entry: leave it
    assert r.xlen(s.stream) == 1
    bogus = r.xadd(s.stream, {"s": s.slot_id})
    assert s.claim([(s.queue, bogus, s.slot_id)]) == [[Code.STALE]]
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 1  # the duplicate was acked
    ghost = r.xadd(s.stream, {"s": "nope:1"})
    assert s.claim([(s.queue, ghost, "nope:1")]) == [[Code.STALE]]


def test_release_redispatches_without_counting_a_failure(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.claim(s.read())
    now = clock.now_ms()
    assert s.run(scripts.release(s.prefix, now, 1000, W, [scripts.Released(s.slot_id, 1, now)])) == [Code.OK]
    slot = s.slot()
    assert slot.status is SlotStatus.QUEUED and slot.failures == 0
    assert slot.attempts[0].outcome == "released"
    [reply] = s.claim(s.read(consumer="w2"), worker="w2")
    assert reply[:2] == [Code.OK, 2]
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 1


def test_heartbeat_extends_the_lease_and_reports_lost_ones(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.claim(s.read())
    clock.advance(10)
    reply = s.run(scripts.heartbeat(s.prefix, clock.now_ms(), LEASE, W,
                                    [(s.slot_id, 1), (s.slot_id, 9)]))
    assert reply == [Code.OK, Code.STALE]
    assert s.slot().lease_until_ms == clock.now_ms() + LEASE


def test_a_runs_first_heartbeat_announces_it_once(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The claim writes no event; the first heartbeat that extends a run's lease (new) tells
    history it runs, a later one (not new) and a refused one (stale token) say nothing."""
    s = make(r, client, clock)
    s.claim(s.read())
    assert [kind for kind, _ in s.events()] == ["submitted"]
    clock.advance(10)
    assert s.run(scripts.heartbeat(s.prefix, clock.now_ms(), LEASE, W,
                                   [(s.slot_id, 1, True), (s.slot_id, 9, True)])) == [
        Code.OK, Code.STALE]
    assert s.events()[1:] == [("claimed", [{"slot": s.slot_id, "attempt": 1}])]
    assert s.run(scripts.heartbeat(s.prefix, clock.now_ms(), LEASE, W,
                                   [(s.slot_id, 1, False)])) == [Code.OK]
    assert len(s.events()) == 2


def test_promote_skips_slots_that_are_no_longer_scheduled(
        r: redis.Redis, client: Client, clock: ManualClock, ns: str) -> None:
    k = Keys(ns)
    prefix = k.prefix(0)
    r.zadd(k.due(0), {"gone:1": clock.now_ms()})
    assert scripts.run_sync(r, [scripts.promote(prefix, clock.now_ms(), 1000, 10)])[0] == [0, -1, 0]
    assert r.zcard(k.due(0)) == 0


def test_scripts_reload_after_the_script_cache_is_flushed(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    r.script_flush()
    assert s.claim(s.read())[0][0] == Code.OK


def test_a_reload_sends_the_pipeline_tail_again_after_the_calls_that_ran_again(
        flushable: tuple[Any, Client, str], clock: ManualClock, redis_url: str) -> None:
    """A WAIT in a claim's tail must follow the claims it vouches for: when NOSCRIPT makes
    the calls go again in a second pipeline, the tail goes with them, and both pipelines'
    tail replies come back (the first one's covered no write). On a Redis of the test's own:
    on the shared one, the other test process can load the script between the flush and the
    call, and no NOSCRIPT comes."""
    import asyncio

    r, client, url = flushable
    s = make(r, client, clock)
    entries = s.read()
    r.script_flush()

    async def go() -> tuple[list[object], list[list[object]]]:
        conn = async_redis(url)
        try:
            call = scripts.claim(s.prefix, clock.now_ms(), W, LEASE, entries)

            def tail(pipe: object) -> int:
                cluster.each_node(pipe, "WAIT", 0, 10)  # once per node on a cluster
                return 1
            return await scripts.run_async_then(conn, [call], tail)
        finally:
            await conn.aclose()

    answers, tails = asyncio.run(go())
    assert answers[0][0] == Code.OK
    assert len(tails) == 2  # the first pipeline's and the second's
    replicas = 1 if is_cluster_url(redis_url) else 0  # each master has one
    for t in tails:
        assert [n <= replicas for n in replies.wait_replies(t[0], replicas == 1)] == [True]


def test_claim_trims_the_acked_head_of_the_stream(r: redis.Redis, redis_url: str,
                                                   ns: str, clock: ManualClock) -> None:
    with Client(redis_url, ns, shards=1, clock=clock) as client:
        ids = client.submit_many([{"task": "t"} for _ in range(450)])
        s = Shard(r, client, clock, ids[0])
        reply = r.xreadgroup(DISPATCH_GROUP, W, {s.stream: ">"}, count=400)
        entries = [("default", mid, f[b"s"].decode()) for _, msgs in reply for mid, f in msgs]
        claimed = s.claim(entries)
        now = clock.now_ms()
        s.run(scripts.complete(s.prefix, now, 1000, W,
                               [scripts.Succeeded(e[2], c[1], now, now) for e, c in zip(entries, claimed, strict=True)]))
        assert r.xlen(s.stream) == 450
        s.claim(s.read())  # the next claim trims whole stream nodes of acked entries
        assert r.xlen(s.stream) <= 150
        assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 10
        pending_ids = {e[1] for e in s.read()} | {
            p["message_id"] for p in r.xpending_range(s.stream, DISPATCH_GROUP, "-", "+", 100)}
        assert all(r.xrange(s.stream, m, m) for m in pending_ids)


def test_missing_job_fields_mean_the_documented_defaults(r: redis.Redis, client: Client,
                                                        clock: ManualClock) -> None:
    s = make(r, client, clock)
    assert set(r.hkeys(s.keys.job(s.shard, s.job_id))) == {
        b"task", b"queue", b"fire_ms", b"created_ms", b"payload"}
    assert client.get_job(s.job_id).retry == RetryPolicy()
    s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "x", -1, 0, now, now)]))
    assert s.slot().available_ms == now + int(RetryPolicy().base_s * 1000)


def test_expire_removes_due_finished_slots_with_their_indexes(r: redis.Redis, ns: str) -> None:
    p = f"{ns}:{{s00}}:"
    now = 1_000_000
    done = {"status": "succeeded", "finished_ms": now - 5000}
    r.hset(f"{p}job:once", mapping={"fire_ms": 1})  # immediate: no kind field, not indexed
    r.hset(f"{p}slot:once:1", mapping={**done, "job_id": "once"})
    r.hset(f"{p}job:later", mapping={"fire_ms": 2, "kind": "delayed"})
    r.hset(f"{p}slot:later:2", mapping={**done, "job_id": "later"})
    r.zadd(f"{p}jobs", {"later": 1, "nightly": 1})
    r.hset(f"{p}job:nightly", mapping={"fire_ms": 3, "kind": "cron"})
    r.hset(f"{p}slot:nightly:60", mapping={**done, "job_id": "nightly"})
    r.zadd(f"{p}runs:nightly", {"nightly:60": 60, "nightly:120": 120})
    r.hset(f"{p}slot:fresh:4", mapping={"status": "succeeded", "finished_ms": now - 10,
                                        "job_id": "fresh"})
    r.hset(f"{p}slot:replayed:5", mapping={"status": "queued", "job_id": "replayed"})
    r.zadd(f"{p}retain", {"once:1": 1, "later:2": 2, "nightly:60": 3, "fresh:4": 4,
                          "replayed:5": 5, "future:6": now + 1})
    slots, jobs, head = scripts.run_sync(r, [scripts.retire(p, now, 1000, 100)])[0]
    assert (slots, jobs) == (3, 2)
    assert not r.exists(f"{p}slot:once:1", f"{p}job:once", f"{p}slot:later:2", f"{p}job:later",
                        f"{p}slot:nightly:60")
    assert r.exists(f"{p}job:nightly") and r.exists(f"{p}slot:fresh:4", f"{p}slot:replayed:5") == 2
    assert r.zrange(f"{p}jobs", 0, -1) == [b"nightly"]
    assert r.zrange(f"{p}runs:nightly", 0, -1) == [b"nightly:120"]
    # The recently finished slot is re-scored for later; the replayed one leaves `retain`.
    assert r.zrange(f"{p}retain", 0, -1, withscores=True) == [(b"future:6", now + 1),
                                                             (b"fresh:4", now - 10 + 1000)]
    assert head == now + 1


def test_promote_takes_the_earliest_due_slots_up_to_its_limit(r: redis.Redis, ns: str) -> None:
    p = f"{ns}:{{s00}}:"
    for i, fire in enumerate((10, 20, 30, 500, 600)):
        r.hset(f"{p}slot:j{i}:{fire}", mapping={"status": "scheduled", "queue": "default",
                                                "job_id": f"j{i}", "fire_ms": fire})
        r.zadd(f"{p}due", {f"j{i}:{fire}": fire})
    moved, next_due, skipped = scripts.run_sync(r, [scripts.promote(p, 100, 1000, 2)])[0]
    assert (moved, next_due, skipped) == (2, 30, 0)
    assert r.zrange(f"{p}due", 0, -1) == [b"j2:30", b"j3:500", b"j4:600"]
    assert [r.hget(f"{p}slot:j{i}:{f}", "status") for i, f in ((0, 10), (1, 20), (2, 30))] == [
        b"queued", b"queued", b"scheduled"]
    assert r.xlen(f"{p}q:default") == 2


def test_a_heartbeat_after_a_run_was_committed_reports_nothing_lost(
        r: redis.Redis, redis_url: str, client: Client, clock: ManualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    """The run was in flight when the heartbeat listed it, then finished and was committed
    before the heartbeat reached Redis: no lease was lost, and none is reported."""
    import asyncio

    from scheduler.worker.heartbeat import Heartbeat
    from scheduler.worker.inflight import Run

    s = make(r, client, clock)
    [claimed] = s.claim(s.read())
    now = clock.now_ms()
    assert s.run(scripts.complete(s.prefix, now, 1000, W, [scripts.Succeeded(s.slot_id, 1, now, now)])) == [Code.OK]

    class Ended(dict):  # type: ignore[type-arg]
        """Listed by the heartbeat, then ended (removed) before its reply came back."""

        def get(self, key: object, default: object = None) -> None:
            return None

    async def beat() -> Run:
        conn = async_redis(redis_url)
        [grant] = replies.claimed(claimed, [(s.queue, b"", s.slot_id)])
        assert grant is not None
        run = Run(s.shard, s.slot_id, grant, deadline=0)
        run.handler = asyncio.create_task(asyncio.sleep(10))
        try:
            await Heartbeat(conn, s.keys, clock, W, LEASE, 10, ["q"],
                            Ended({s.slot_id: run})).run_once()
            assert run.stop_reason is None
            # Now one that is still going: really lost.
            await Heartbeat(conn, s.keys, clock, W, LEASE, 10, ["q"],
                            {s.slot_id: run}).run_once()
            return run
        finally:
            run.handler.cancel()
            await conn.aclose()

    with caplog.at_level("WARNING", logger="scheduler.worker.heartbeat"):
        run = asyncio.run(beat())
    assert run.stop_reason == "lost"
    assert [m for m in caplog.messages if "lost" in m] == [
        "1 lease(s) lost (the slots were reclaimed or finished elsewhere); stopping those runs"]
