"""Finished work leaves Redis by the namespace's retention (node/expirer.py, lua/expire.lua):
by age or by count, whichever comes first; dead letters by their own, longer, bound; with
history, only what the store has; never a cron definition or unfinished work; and a running
node applies a changed setting without a restart."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from prometheus_client import CollectorRegistry

from helpers import Shard, W, http_get, make, running, sched, sched_process, serve_console
from scheduler import Client, RetryPolicy, SlotStatus
from scheduler.core.errors import JobNotFound, ResultExpired
from scheduler.core.keys import HISTORY_GROUP, Keys
from scheduler.node.expirer import INTERVAL_S, Expirer
from scheduler.observe.metrics import NamespaceCollector
from scheduler.observe.records import RETENTION_GRACE_S, RETENTION_SLACK
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Code, Expired

SHARDS = 4


def expire(redis_url: str, ns: str, clock: ManualClock) -> list[Expired]:
    """One expirer pass over every shard; each shard's reply."""
    async def once() -> list[Expired]:
        async with async_redis(redis_url) as conn:
            expirer = Expirer(conn, Keys(ns), range(SHARDS), clock, total_shards=SHARDS)
            await expirer.run_once()
            return expirer.last
    return asyncio.run(once())


def finish(s: Shard) -> None:
    s.claim(s.read())
    now = s.clock.now_ms()
    assert s.run(scripts.complete(s.prefix, now, 1000, W, [scripts.Succeeded(s.slot_id, 1, now, now)])) == [Code.OK]


def bury(s: Shard) -> None:
    """The slot's one attempt fails: it ends dead, in the dead-letter set."""
    s.claim(s.read())
    now = s.clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "no", -1, 0, now,
                                                 now)]))
    assert s.slot().status is SlotStatus.DEAD


def in_redis(r: redis.Redis, s: Shard) -> bool:
    return bool(r.exists(s.keys.slot(s.shard, s.slot_id)))


def test_finished_work_leaves_after_its_retention_and_nothing_else_does(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    client.set_retention("60s", dead_retention="1h")
    done = make(r, client, clock)
    finish(done)
    queued = make(r, client, clock)
    claimed = make(r, client, clock)
    claimed.claim(claimed.read())
    later = client.submit("t", {}, delay=7200)
    nightly = client.submit("t", {}, cron="0 3 * * *")
    dead = make(r, client, clock, retry=RetryPolicy(max_attempts=1))
    bury(dead)
    assert sum(e.slots for e in expire(redis_url, ns, clock)) == 0
    assert client.result(done.job_id, timeout=0) is None  # within the window: readable

    clock.advance(61)
    replies = expire(redis_url, ns, clock)
    assert sum(e.slots for e in replies) == 1 and sum(e.jobs for e in replies) == 1
    assert not in_redis(r, done) and not r.exists(done.keys.job(done.shard, done.job_id))
    assert all(in_redis(r, s) for s in (queued, claimed, dead))
    assert client.get_job(later).cron is None and client.get_job(nightly).cron == "0 3 * * *"
    assert {client.slots(j)[0].status for j in (later,)} == {SlotStatus.SCHEDULED}
    with pytest.raises(ResultExpired, match="expired under the namespace retention"):
        client.result(done.job_id, timeout=0)
    with pytest.raises(ResultExpired):  # the slot's id tells as much
        client.result(done.slot_id, timeout=0)

    # The dead letter waits for its own bound, then leaves the dead-letter set and Redis.
    clock.advance(3600)
    replies = expire(redis_url, ns, clock)
    assert sum(e.dead for e in replies) == 1 and not in_redis(r, dead)
    assert client.dead_letters() == []
    assert all(in_redis(r, s) for s in (queued, claimed))


def test_a_job_id_of_the_callers_own_is_not_found_rather_than_guessed(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """An id the caller chose carries no time: after removal it is simply not found."""
    client.set_retention(1)
    job_id = client.submit_many([{"task": "t", "payload": 1}], ids=["order-17"])[0]
    s = Shard(r, client, clock, job_id)
    finish(s)
    clock.advance(2)
    expire(redis_url, ns, clock)
    with pytest.raises(JobNotFound) as caught:
        client.result(job_id, timeout=0)
    assert type(caught.value) is JobNotFound


def test_the_count_bound_comes_first_when_it_is_reached(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """Successes (the `done` list) and other ends (the `finished` set) are one count, and
    the oldest of either leaves first: cancelled slots first, then successes, so a shard
    whose newest is a success holds older cancelled ones to remove before it."""
    client.set_retention("1h", retain_max=SHARDS)  # one finished slot per shard
    jobs = []
    for i in range(40):
        s = make(r, client, clock)
        if i < 20:
            client.cancel(s.job_id)
        else:
            finish(s)
        jobs.append(s)
        clock.advance(0.01)
    newest = {s.shard: s for s in jobs}
    cancelled = {s.shard for s in jobs[:20]}
    # A shard whose newest is a success after cancelled slots: an expirer that drained the
    # `done` list first would keep its newest cancelled slot instead.
    assert any(shard in cancelled and s in jobs[20:] for shard, s in newest.items())
    replies = expire(redis_url, ns, clock)
    assert [e.finished for e in replies] == [1 if any(s.shard == i for s in jobs) else 0
                                             for i in range(SHARDS)]
    assert {s.slot_id for s in jobs if in_redis(r, s)} == {s.slot_id for s in newest.values()}


def test_with_history_only_what_the_store_has_leaves(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    """The snapshotter's group on the events streams means the namespace keeps history: a
    finished slot leaves only once it is in `retain` (written after the store's commit), a
    dead letter only once the group has read past its death."""
    client.set_retention(10, dead_retention=20)
    keys = Keys(ns)
    for shard in range(SHARDS):
        r.xgroup_create(keys.events(shard), HISTORY_GROUP, id="0", mkstream=True)
    done = make(r, client, clock)
    finish(done)
    dead = make(r, client, clock, retry=RetryPolicy(max_attempts=1))
    bury(dead)
    clock.advance(30)
    replies = expire(redis_url, ns, clock)
    assert sum(e.held for e in replies) == 1 and sum(e.slots + e.dead for e in replies) == 0
    assert in_redis(r, done) and in_redis(r, dead)
    assert "1 finished slot(s) past the retention wait for the history store" in caplog.text

    r.zadd(keys.retain(done.shard), {done.slot_id: clock.now_ms() + 3_600_000})
    assert sum(e.slots for e in expire(redis_url, ns, clock)) == 1
    assert not in_redis(r, done) and not r.zscore(keys.retain(done.shard), done.slot_id)
    assert in_redis(r, dead)

    time.sleep(0.002)  # an events id above the dead letter's
    r.xadd(keys.events(dead.shard), {"type": "probe"})
    r.xgroup_setid(keys.events(dead.shard), HISTORY_GROUP, id="$")
    clock.advance(2)  # past the second of margin
    assert sum(e.dead for e in expire(redis_url, ns, clock)) == 1
    assert not in_redis(r, dead)


def test_a_slot_that_ran_again_is_never_removed(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """A replayed dead letter is queued again: its old `finished` entry only goes."""
    client.set_retention(1, dead_retention=1)
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=1))
    bury(s)
    assert client.replay([s.slot_id]) == 1
    clock.advance(10)
    expire(redis_url, ns, clock)
    assert s.slot().status is SlotStatus.QUEUED
    assert r.zcard(s.keys.finished(s.shard)) == 0


@pytest.mark.slow
def test_a_changed_setting_reaches_a_running_node(
        r: redis.Redis, redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    """`sched scheduler` and `sched worker` started with the defaults (an hour): a job runs
    and stays; the setting goes down to a second and the same node removes it."""
    with Client(redis_url, ns) as client:
        client.create_namespace()
        node = sched_process(redis_url, ns, app_env, "scheduler")
        worker = sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry")
        with running(node, worker):
            job = client.submit("test.effect", {"effects": f"{ns}:effects"})
            assert client.result(job, timeout=60) is None
            time.sleep(INTERVAL_S * 2)  # passes of the node at the default: it stays
            assert client.get_job(job)
            client.set_retention(1)
            deadline = time.monotonic() + 1 + INTERVAL_S * 20
            while True:
                try:
                    client.get_job(job)
                except JobNotFound:
                    break
                assert time.monotonic() < deadline, "the running node kept the old setting"
                time.sleep(0.05)
            with pytest.raises(ResultExpired):
                client.result(job, timeout=0)


def test_status_and_a_metric_say_when_finished_work_piles_up(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock,
        capsys: pytest.CaptureFixture[str]) -> None:
    """No node applies the retention: past it (and its slack), `sched status` and
    `sched_retention_behind` say so; once the expirer ran, nothing does."""
    client.set_retention(60)
    s = make(r, client, clock)
    finish(s)
    assert client.status().retention_behind() is None
    assert client.status().finished_kept == 1
    clock.advance(60 * RETENTION_SLACK + RETENTION_GRACE_S + 1)
    status = client.status()
    assert status.finished_oldest_age_s is not None and status.finished_oldest_age_s > 60
    assert any("past the retention" in w for w in status.warnings())
    # The CLI and the exporter read Redis's time: the test clock's is long past.
    _, out, _ = sched(capsys, redis_url, ns, "status")
    assert "finished slot(s) kept in Redis" in out
    assert "finished:     1 kept in Redis, the oldest finished " in out
    assert "(retention 60s, at most 500,000)" in out
    registry = CollectorRegistry()
    plain = redis.Redis.from_url(redis_url)
    registry.register(NamespaceCollector(plain, ns))
    assert registry.get_sample_value("sched_retention_behind") == 1
    assert registry.get_sample_value("sched_finished_kept", {"shard": str(s.shard)}) == 1

    expire(redis_url, ns, clock)
    assert client.status().retention_behind() is None and client.status().finished_kept == 0
    assert registry.get_sample_value("sched_retention_behind") == 0
    plain.close()


def test_the_sweeper_indexes_a_finished_slot_the_index_lacks(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """A slot that ended before transitions indexed it (or by one that failed to) is found
    by the sweeper's walk, so retention removes it; a dead letter stays out of the index,
    and so does a success the `done` list still holds."""
    client.set_retention(60)
    s = make(r, client, clock)
    finish(s)
    cancelled = make(r, client, clock)
    client.cancel(cancelled.job_id)
    dead = make(r, client, clock, retry=RetryPolicy(max_attempts=1))
    bury(dead)
    listed = make(r, client, clock)
    clock.advance(0.01)
    finish(listed)
    finished_ms = int(r.hget(s.keys.slot(s.shard, s.slot_id), "finished_ms"))
    cancelled_ms = r.zscore(cancelled.keys.finished(cancelled.shard), cancelled.slot_id)
    r.lrem(s.keys.done(s.shard), 0, f"{finished_ms}:{s.slot_id}")
    r.zrem(cancelled.keys.finished(cancelled.shard), cancelled.slot_id)
    r.zrem(dead.keys.finished(dead.shard), dead.slot_id)
    everyone = (s, cancelled, dead, listed)
    for shard in {x.shard for x in everyone}:
        ids = [x.slot_id.encode() for x in everyone if x.shard == shard]
        scripts.run_sync(r, [scripts.sweep(s.keys.prefix(shard), clock.now_ms(), 1000, ids)])
    assert r.zscore(s.keys.finished(s.shard), s.slot_id) == finished_ms
    assert r.zscore(cancelled.keys.finished(cancelled.shard), cancelled.slot_id) == cancelled_ms
    assert r.zscore(dead.keys.finished(dead.shard), dead.slot_id) is None
    assert r.zscore(listed.keys.finished(listed.shard), listed.slot_id) is None
    clock.advance(61)
    expire(redis_url, ns, clock)
    assert not any(in_redis(r, x) for x in (s, cancelled, listed)) and in_redis(r, dead)


def test_dedupe_keys_after_the_job_left(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """A dedupe key without a window submits a new job once the first has left Redis; a
    windowed one, within its window, still answers with the first job's id."""
    client.set_retention(60)
    first = Shard(r, client, clock, client.submit("t", {}, queue="dd", dedupe_key="order-1"))
    windowed = Shard(r, client, clock, client.submit("t", {}, queue="dw", dedupe_key="order-2",
                                                     dedupe_ttl=3600))
    finish(first)
    finish(windowed)
    clock.advance(61)
    expire(redis_url, ns, clock)
    again = client.submit("t", {}, queue="dd", dedupe_key="order-1")
    assert again == first.job_id and client.slots(again)[0].status is SlotStatus.QUEUED
    repeat = client.submit("t", {}, queue="dw", dedupe_key="order-2", dedupe_ttl=3600)
    assert repeat == windowed.job_id
    with pytest.raises(ResultExpired):
        client.result(repeat, timeout=0)


def test_without_history_the_events_stream_keeps_the_window_only(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """Nothing reads events past the window without a snapshotter: they are trimmed (whole
    stream nodes); with the snapshotter's group, trim_history.lua alone trims them."""
    client.set_retention(60)
    s = make(r, client, clock)
    events = s.keys.events((s.shard + 1) % SHARDS)  # a shard with no event yet
    assert not r.exists(events)
    for ms in range(1, 1001):  # ten stream nodes' worth, long before the window
        r.xadd(events, {"type": "probe"}, id=f"{ms}-0")
    before = r.xlen(events)
    expire(redis_url, ns, clock)
    assert r.xlen(events) <= before - 900
    r.xgroup_create(events, HISTORY_GROUP, id="0")
    for ms in range(1001, 2001):
        r.xadd(events, {"type": "probe"}, id=f"{ms}-0")
    before = r.xlen(events)
    expire(redis_url, ns, clock)
    assert r.xlen(events) == before


def test_a_one_off_job_stays_while_a_triggered_run_of_it_does(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """`sched jobs trigger` adds a run beside a one-off job's own: the job's hash stays while
    either slot is in Redis, and leaves with the last."""
    client.set_retention(60)
    s = make(r, client, clock)
    finish(s)
    extra = client.trigger(s.job_id)
    clock.advance(61)
    expire(redis_url, ns, clock)
    assert not in_redis(r, s) and client.get_job(s.job_id)
    assert client.get_slot(extra).status is SlotStatus.QUEUED
    [(_, mid, slot)] = s.read()
    assert slot == extra
    s.claim([(s.queue, mid, slot)])
    now = clock.now_ms()
    s.run(scripts.complete(s.prefix, now, 1000, W, [scripts.Succeeded(extra, 1, now, now)]))
    clock.advance(61)
    replies = expire(redis_url, ns, clock)
    assert sum(e.jobs for e in replies) == 1
    with pytest.raises(JobNotFound):
        client.get_job(s.job_id)


@pytest.mark.slow
def test_the_console_overview_says_when_finished_work_piles_up(
        r: redis.Redis, redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    """`sched web` reads Redis's time: a slot finished at the test clock's is long past the
    retention, and no node applies it."""
    client.set_retention(60)
    finish(make(r, client, clock))
    console, base = serve_console(redis_url, ns)
    with running(console):
        code, page = http_get(f"{base}/")
    assert code == 200 and "past the retention" in page
