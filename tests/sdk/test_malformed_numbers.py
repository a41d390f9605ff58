"""A number in a slot or job hash that is not a whole number in range (a script once stored a
retry 1e14 s ahead as "1e+17"; a hand edit may store anything) marks that record unreadable,
naming the field: the listings, pages and reads that meet it go on, and the snapshotter
copies it. And the scripts store every number they compute as whole-number text, past 1e14
(where cjson turns to exponent text) and past 1e17 (where Redis does)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
import redis

from helpers import Shard, W, drain, make, run_until, sched
from scheduler import Client, Registry, Retry, RetryPolicy, SlotStatus
from scheduler.core.models import LATEST_MS, MAX_SECONDS
from scheduler.history.snapshotter import SnapshotterConfig
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts

# What fail.lua stored before it formatted its numbers for Retry(after=1e15), text int() refuses, a number past
# every datetime, a field no script writes.
MALFORMED = ["1.0000017e+18", str(LATEST_MS + 1), "9" * 30, "soon"]
FIELDS = ["available_ms", "fire_ms", "failures", "attempt", "a:1"]


def _retrying(r: redis.Redis, client: Client, clock: ManualClock) -> Shard:
    """A slot whose first attempt failed: scheduled again, its attempt archived in `a:1`."""
    s = make(r, client, clock)
    s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "boom", 1000, 0, now,
                                                 now)]))
    return s


def _spoil(r: redis.Redis, s: Shard, field: str, value: str) -> None:
    if field == "a:1":  # the archived attempt's JSON with the number in it
        value = '{"number":1,"claimed_ms":' + value + ',"outcome":"failed"}'
    r.hset(s.prefix + "slot:" + s.slot_id, field, value)


@pytest.mark.parametrize(("field", "value"), [
    (f, v) for f in FIELDS for v in MALFORMED if f not in ("failures", "attempt") or not v.isdigit()])
def test_a_malformed_number_marks_the_slot_and_fails_no_read(
        r: redis.Redis, client: Client, clock: ManualClock, capsys: pytest.CaptureFixture[str],
        redis_url: str, ns: str, field: str, value: str) -> None:
    bad, good = _retrying(r, client, clock), _retrying(r, client, clock)
    _spoil(r, bad, field, value)

    [slot] = client.slots(bad.job_id)
    assert slot.unreadable and field in slot.unreadable
    assert client.get_slot(bad.slot_id).unreadable == slot.unreadable
    assert client.runs(bad.job_id)[0].unreadable == slot.unreadable
    assert client.get_slot(good.slot_id).unreadable is None
    for retrying in (False, True):
        listed = {s.slot_id: s for s in client.scheduled(retrying=retrying).slots}
        assert listed[good.slot_id].unreadable is None
        if field not in ("failures", "a:1") or not retrying:  # those may leave it unlisted
            assert listed[bad.slot_id].unreadable
        listed = {s.slot_id for s in client.scheduled(bad.queue, retrying=retrying).slots}
        assert good.slot_id not in listed  # another queue's: the read got through
    code, out, err = sched(capsys, redis_url, ns, "runs", bad.job_id)
    assert (code, err) == (0, "")
    assert "scheduled (unreadable)" in out


@pytest.mark.parametrize("value", MALFORMED)
def test_a_malformed_number_marks_the_job_and_fails_no_read(
        r: redis.Redis, client: Client, clock: ManualClock, capsys: pytest.CaptureFixture[str],
        redis_url: str, ns: str, value: str) -> None:
    job_id = client.submit("t", {}, delay=60)
    other = client.submit("t", {}, delay=60)
    s = Shard(r, client, clock, job_id)
    r.hset(s.prefix + "job:" + job_id, mapping={"created_ms": value, "max_attempts": value})
    job = client.get_job(job_id)
    assert job.unreadable and "created_ms" in job.unreadable
    listed = {j.job_id: j for j in client.list_jobs()}
    assert listed[job_id].unreadable and listed[other].unreadable is None
    code, out, err = sched(capsys, redis_url, ns, "jobs", "show", job_id)
    assert (code, err) == (0, "")


@pytest.mark.parametrize("value", MALFORMED[:2])
def test_the_snapshotter_copies_a_slot_with_a_malformed_number(
        r: redis.Redis, client: Client, clock: ManualClock, redis_url: str, ns: str,
        store_dsn: str, value: str) -> None:
    bad, good = _retrying(r, client, clock), _retrying(r, client, clock)
    _spoil(r, bad, "available_ms", value)
    asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(retention_s=None)))
    with Client(redis_url, ns, history=store_dsn) as history:
        kept = {s.slot_id: s for j in (bad.job_id, good.job_id)
                for s in history.history(job_id=j)}
    assert set(kept) == {bad.slot_id, good.slot_id}
    assert kept[bad.slot_id].unreadable and "available_ms" in kept[bad.slot_id].unreadable
    assert kept[good.slot_id].unreadable is None


WHOLE = re.compile(rb"-?[0-9]+")


def _numbers(r: redis.Redis, key: str) -> dict[bytes, bytes]:
    """The hash's fields that hold a time or a count, and every number in its attempts."""
    out = {}
    for field, value in r.hgetall(key).items():
        if field.endswith((b"_ms", b"_until")) or field in (b"attempt", b"failures"):
            out[field] = value
        elif field.startswith(b"a:"):
            for name, number in re.findall(rb'"(\w+)":(-?[0-9][^,}]*)', value):
                out[field + b"." + name] = number
    return out


def test_the_scripts_store_whole_numbers_past_1e14(r: redis.Redis, redis_url: str,
                                                   ns: str) -> None:
    """With now past 1e14 ms (the year 5138), where cjson's "%.14g" turns to exponent text:
    the times of an archived attempt, a retry, a heartbeat's lease are whole numbers."""
    clock = ManualClock(LATEST_MS - 2 * MAX_SECONDS * 1000 + 123)
    with Client(redis_url, ns, shards=4, clock=clock) as client:
        s = make(r, client, clock)
        s.claim(s.read())
        now = clock.now_ms()
        s.run(scripts.heartbeat(s.prefix, now, 987_654_321, W, [(s.slot_id, 1, True)]))
        s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "boom",
                                                     MAX_SECONDS * 1000 - 7, 0, now, now)]))
        numbers = _numbers(r, s.prefix + "slot:" + s.slot_id)
        assert numbers[b"available_ms"] == str(now + MAX_SECONDS * 1000 - 7).encode()
        assert all(WHOLE.fullmatch(v) for v in numbers.values()), numbers
        [(_, due)] = r.zrange(s.prefix + "due", 0, -1, withscores=True)
        assert int(due) == now + MAX_SECONDS * 1000 - 7
        assert client.slots(s.job_id)[0].unreadable is None


def test_the_scripts_store_whole_numbers_past_1e17(r: redis.Redis, client: Client,
                                                   clock: ManualClock) -> None:
    """Redis prints a Lua number given to a command with 17 digits: 1e17 and up (a retry
    1e14 s ahead, as a worker sent one before Retry(after=) was cut to a year, or a lease
    as long) turn to exponent text there. The scripts write whole-number text whatever
    they are given; a reader marks such a time, past the year 9999, unreadable."""
    s = make(r, client, clock)
    s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.heartbeat(s.prefix, now, 10**17, W, [(s.slot_id, 1)]))
    assert r.hget(s.prefix + "slot:" + s.slot_id, "lease_until") == str(now + 10**17).encode()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "boom", 10**18, 0,
                                                 now, now)]))
    numbers = _numbers(r, s.prefix + "slot:" + s.slot_id)
    assert numbers[b"available_ms"] == str(now + 10**18).encode()
    assert all(WHOLE.fullmatch(v) for v in numbers.values()), numbers
    assert "available_ms" in (client.slots(s.job_id)[0].unreadable or "")


def test_a_retry_after_past_a_year_waits_a_year(redis_url: str, ns: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A handler passing on an upstream's Retry-After of 1e15 s: the attempt fails as asked
    and the retry waits the longest delay, with a log line; the slot reads as any other."""
    registry = Registry()

    @registry.task("t.upstream")
    async def upstream(ctx: Any, payload: Any) -> None:
        raise Retry(after=1e15, reason="upstream said wait")

    with Client(redis_url, ns) as client:
        job_id = client.submit("t.upstream")
        before = client.now_ms()
        asyncio.run(run_until(redis_url, ns, registry,
                              lambda: client.slots(job_id)[0].failures == 1))
        after = client.now_ms()
        [slot] = client.slots(job_id)
    assert slot.status is SlotStatus.SCHEDULED and slot.unreadable is None
    assert slot.available_ms is not None
    assert before + MAX_SECONDS * 1000 <= slot.available_ms <= after + MAX_SECONDS * 1000
    assert slot.attempts[-1].error == "upstream said wait"
    assert "Retry(after=1e+15) is past the longest delay, a year" in caplog.text


@pytest.mark.parametrize("field", ["lease_until", "claimed_ms", "attempt"])
def test_a_running_or_queued_slot_with_a_malformed_number_is_listed_unreadable(
        r: redis.Redis, client: Client, clock: ManualClock, capsys: pytest.CaptureFixture[str],
        redis_url: str, ns: str, field: str) -> None:
    running, queued = make(r, client, clock), make(r, client, clock)
    running.claim(running.read())
    for s in (running, queued):
        r.hset(s.prefix + "slot:" + s.slot_id, field, "1.0000017e+18")
    [listed] = [s for s in client.running(running.queue).slots]
    assert listed.slot_id == running.slot_id and field in (listed.unreadable or "")
    [waiting] = client.queued(queued.queue).slots  # a lease of no attempt is not read
    assert waiting.slot_id == queued.slot_id
    assert (field in (waiting.unreadable or "")) is (field == "attempt")
    assert client.status().shards == client.shards
    code, out, err = sched(capsys, redis_url, ns, "jobs", "show", running.job_id)
    assert (code, err) == (0, "") and "running (unreadable)" in out


def test_a_dead_letter_with_a_malformed_number_is_listed_unreadable(
        r: redis.Redis, client: Client, clock: ManualClock, capsys: pytest.CaptureFixture[str],
        redis_url: str, ns: str) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=1))
    s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "boom", -1, 0, now,
                                                 now)]))
    r.hset(s.prefix + "slot:" + s.slot_id, "finished_ms", "1.0000017e+18")
    [dead] = client.dead_letters()
    assert dead.slot.slot_id == s.slot_id and dead.slot.status is SlotStatus.DEAD
    code, out, err = sched(capsys, redis_url, ns, "dlq", "list")
    assert (code, err) == (0, "") and s.slot_id in out
