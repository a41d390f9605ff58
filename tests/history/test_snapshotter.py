"""The snapshotter and retention in-process, against both stores: what reaches the store,
replay after a crash between commit and ack, trimming, and retention in Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.asyncio

from helpers import drain, pending, run_until, statuses
from scheduler import Client, Context, Registry, RetryPolicy, SlotStatus
from scheduler.core.keys import Keys
from scheduler.history.retention import Retention, RetentionConfig
from scheduler.history.snapshotter import Snapshotter, SnapshotterConfig
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock, RedisClock
from scheduler.scripts import calls as scripts


def _registry() -> Registry:
    registry = Registry()

    @registry.task("ok")
    async def ok(ctx: Context, payload: Any) -> None:
        pass

    @registry.task("bad")
    async def bad(ctx: Context, payload: Any) -> None:
        raise RuntimeError(f"boom {ctx.attempt}")

    return registry


def _run_jobs(redis_url: str, ns: str, ok: int, bad: int) -> tuple[list[str], list[str]]:
    with Client(redis_url, ns, shards=2) as client:
        ok_ids = client.submit_many([{"task": "ok", "payload": i} for i in range(ok)])
        bad_ids = client.submit_many([{"task": "bad", "retry": RetryPolicy(
            max_attempts=2, base_s=0, max_s=0)} for _ in range(bad)])
        ids = ok_ids + bad_ids

        def done() -> bool:
            return sum(statuses(client, ids).get(s, 0) for s in ("succeeded", "dead")) == len(ids)

        asyncio.run(run_until(redis_url, ns, _registry(), done, node=True))
    return ok_ids, bad_ids


def test_every_slot_and_attempt_reaches_the_store(redis_url: str, ns: str, r: redis.Redis,
                                                  store_dsn: str) -> None:
    ok_ids, bad_ids = _run_jobs(redis_url, ns, 40, 5)
    asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(retention_s=None)))
    assert pending(r, ns) == 0
    with Client(redis_url, ns, history=store_dsn) as client:
        slots = {s.job_id: s for s in client.history(limit=1000)}
        assert set(slots) == set(ok_ids + bad_ids)
        assert {slots[j].status for j in ok_ids} == {SlotStatus.SUCCEEDED}
        dead = slots[bad_ids[0]]
        assert dead.status is SlotStatus.DEAD
        assert [(a.number, a.outcome and a.outcome.value) for a in dead.attempts] == [
            (1, "failed"), (2, "failed")]
        assert "boom 2" in (dead.attempts[-1].error or "")
        assert [s.job_id for s in client.history(status="dead", limit=10)] != []
        assert client.runs(ok_ids[0])[0].attempts[0].worker


def test_events_a_finished_slots_read_already_covers_cost_nothing(
        redis_url: str, ns: str, r: redis.Redis, store_dsn: str) -> None:
    """Jobs that ran to the end before the snapshotter reached their `submitted` event: that
    first read finds them finished, so their `succeeded` events are skipped (a run this short
    has no `claimed` event: heartbeat.lua writes it)."""
    ok_ids, _ = _run_jobs(redis_url, ns, 60, 0)
    snap = asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(
        retention_s=None, read_count=1, defer_s=0)))  # one events entry per shard per batch
    assert snap.skipped >= 60  # one succeeded record per job at least
    assert snap.rows == 2 * 60  # job and slot rows, each written once (one attempt: no row)
    with Client(redis_url, ns, history=store_dsn) as client:
        slots = client.history(limit=1000)
    assert {s.job_id for s in slots} == set(ok_ids)
    assert {s.status for s in slots} == {SlotStatus.SUCCEEDED}
    assert all(len(s.attempts) == 1 and s.attempts[0].finished_ms for s in slots)


def test_an_event_right_after_a_read_brings_the_slots_new_state(
        redis_url: str, ns: str, r: redis.Redis, store_dsn: str) -> None:
    """Only the events a read already covers are skipped (version at or below the read's).
    The events stream's ids are moved a minute ahead (XSETID), so every event here falls
    within one millisecond of stream time of the read: a snapshotter that took a read to
    cover the next second's events too would keep each slot's first state, however fast or
    slow the machine."""
    with Client(redis_url, ns, shards=1) as client:
        first = client.submit("ok", delay=600)
        r.execute_command("XSETID", Keys(ns).events(0), f"{int(time.time() * 1000) + 60_000}-0")
        ids = client.submit_many([{"task": "ok", "delay": 600} for _ in range(5)])
        cancelled: list[dict[str, str]] = []

        def cancel_after_the_first_commit(snap: Snapshotter) -> None:
            after = snap._after_commit

            async def then_cancel(*args: Any) -> None:
                await after(*args)
                if not cancelled:
                    cancelled.append(await asyncio.to_thread(client.cancel, ids))

            snap._after_commit = then_cancel  # type: ignore[method-assign]

        snap = asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(
            retention_s=None, defer_s=0), hook=cancel_after_the_first_commit))
    assert cancelled and snap.skipped == 0
    with Client(redis_url, ns, history=store_dsn) as client:
        assert {s.job_id: s.status for s in client.history(limit=100)} == {
            first: SlotStatus.SCHEDULED, **dict.fromkeys(ids, SlotStatus.CANCELLED)}


def test_an_overlap_skip_jobs_active_run_reaches_the_store(
        redis_url: str, ns: str, r: redis.Redis, store_dsn: str) -> None:
    """promote.lua names an overlap="skip" job's run in flight in the job's hash (`active`)
    and its `queued` record names the job, so the job is read again. Here the job is read
    before the promotion (its slots materialized and written first) and nothing else names
    it after: the store must still end as Redis holds it, or `sched recover` restores a job
    that does not know its run and starts the next occurrence beside it."""
    from scheduler.history.store import open_store
    from scheduler.node.materializer import Materializer
    from scheduler.node.promoter import Promoter

    clock = ManualClock(1_700_000_000_000)
    config = SnapshotterConfig(retention_s=None, defer_s=0)
    prefixes = [Keys(ns).prefix(0)]

    async def one_pass(service: type[Materializer] | type[Promoter]) -> None:
        conn = async_redis(redis_url)
        await service(conn, prefixes, clock).run_once()
        await conn.aclose()

    with Client(redis_url, ns, shards=1, clock=clock) as client:
        job_id = client.submit("ok", cron="* * * * * *", overlap="skip")
        asyncio.run(one_pass(Materializer))
        asyncio.run(drain(redis_url, ns, store_dsn, config=config))
        clock.advance(1)
        asyncio.run(one_pass(Promoter))
    active = r.hget(Keys(ns).job(0, job_id), "active")
    assert active
    asyncio.run(drain(redis_url, ns, store_dsn, config=config))
    store = open_store(store_dsn)
    try:
        assert dict(store.job_definitions(ns))[job_id].get("active") == active.decode()
    finally:
        store.close()


def test_a_crash_between_commit_and_ack_replays_to_the_same_rows(
        redis_url: str, ns: str, r: redis.Redis, store_dsn: str) -> None:
    _run_jobs(redis_url, ns, 30, 3)

    def crash_after_commit(snap: Snapshotter) -> None:
        async def boom(*args: Any) -> None:
            raise ConnectionError("killed after commit, before ack")
        snap._after_commit = boom  # type: ignore[method-assign]

    with pytest.raises(ConnectionError):
        asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(
            retention_s=None, consumer="a", defer_s=0), hook=crash_after_commit))
    with Client(redis_url, ns, history=store_dsn) as client:
        first = sorted((s.slot_id, s.status, len(s.attempts)) for s in client.history(limit=999))
    assert first and pending(r, ns) > 0
    # A second snapshotter takes over the first one's pending entries (claim_idle tiny).
    asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(
        retention_s=None, consumer="b", claim_idle_s=0.001)))
    asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(
        retention_s=None, consumer="b", claim_idle_s=0.001)))
    with Client(redis_url, ns, history=store_dsn) as client:
        again = sorted((s.slot_id, s.status, len(s.attempts)) for s in client.history(limit=999))
    assert pending(r, ns) == 0
    assert len(again) == 33 and set(first) <= set(again)  # nothing lost, nothing duplicated
    # The dead consumer, its entries taken over, has left the group.
    for shard in range(2):
        names = {c["name"] for c in r.xinfo_consumers(f"{ns}:{{s{shard:02d}}}:events", "history")}
        assert names <= {b"b"}


def test_trim_history_drops_only_what_every_group_acked(redis_url: str, ns: str,
                                                        r: redis.Redis, tmp_path: Any) -> None:
    _run_jobs(redis_url, ns, 20, 0)
    stream = f"{ns}:{{s00}}:events"
    r.xgroup_create(stream, "other", id="0")
    r.xreadgroup("other", "x", {stream: ">"}, count=3)  # another reader lags: 3 read, unacked
    asyncio.run(drain(redis_url, ns, f"sqlite://{tmp_path / 'h.db'}",
                      config=SnapshotterConfig(retention_s=None)))
    first_other = r.xrange(stream, count=1)[0][0]
    scripts.run_sync(r, [scripts.trim_history(f"{ns}:{{s00}}:", exact=True)])
    assert r.xrange(stream, count=1)[0][0] == first_other  # the lagging group keeps its entries
    r.xgroup_destroy(stream, "other")
    scripts.run_sync(r, [scripts.trim_history(f"{ns}:{{s00}}:", exact=True)])
    assert r.xlen(stream) <= 1


def test_finished_slots_leave_redis_after_retention_and_stay_in_history(
        redis_url: str, ns: str, r: redis.Redis, store_dsn: str) -> None:
    ok_ids, bad_ids = _run_jobs(redis_url, ns, 10, 2)
    asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(retention_s=1)))
    now = int(time.time() * 1000)

    async def expire(at_ms: int) -> Retention:
        client = async_redis(redis_url)
        ret = Retention(client, namespace=ns, clock=ManualClock(at_ms),
                        config=RetentionConfig(retention_s=1))
        await ret.run_once()
        await client.aclose()
        return ret

    assert asyncio.run(expire(now - 60_000)).deleted_slots == 0  # not yet due
    ret = asyncio.run(expire(now + 60_000))
    assert ret.deleted_slots == 10 and ret.deleted_jobs == 10  # dead slots stay in the DLQ
    with Client(redis_url, ns, history=store_dsn) as client:
        [slot] = client.runs(ok_ids[0])  # from history now
        assert slot.status is SlotStatus.SUCCEEDED
        assert client.get_slot(client.slots(bad_ids[0])[0].slot_id).status is SlotStatus.DEAD
        client.purge(None)
    asyncio.run(drain(redis_url, ns, store_dsn, config=SnapshotterConfig(retention_s=1)))
    assert asyncio.run(expire(now + 60_000)).deleted_slots == 2
    left = {k.decode() for k in r.scan_iter(match=f"{ns}:*:slot:*", count=10_000)}
    assert left == set()


def test_batches_keep_near_batch_records_whatever_the_entries_hold(
        redis_url: str, ns: str, store_dsn: str) -> None:
    """An events entry holds one Lua call's records (1 to thousands): the entries read per
    shard adapt so that a batch stays near batch_records."""
    with Client(redis_url, ns, shards=1) as client:
        for _ in range(100):
            client.submit_many([{"task": "ok"}] * 10)  # 100 entries of 10 records
    sizes: list[int] = []

    def count_batches(snap: Snapshotter) -> None:
        write = snap.store.write

        def counted(batch: Any) -> None:
            sizes.append(len(batch.slots) + len(batch.new_slots))
            write(batch)
        snap.store.write = counted  # type: ignore[method-assign]

    snap = asyncio.run(drain(redis_url, ns, store_dsn, hook=count_batches, config=SnapshotterConfig(
        retention_s=None, read_count=64, batch_records=40)))
    assert sum(sizes) == 1000 and snap.rows == 2000
    assert max(sizes) <= 80 and len(sizes) >= 1000 // 80


def test_only_slots_created_in_the_batch_take_the_insert_path(
        redis_url: str, ns: str, pg_dsn: str) -> None:
    """A slot whose `submitted` event came in an earlier batch is upserted even when the
    snapshotter has forgotten it (seen_capacity 0): no unique-violation rollbacks."""
    from scheduler.history.store import open_store

    setup = open_store(pg_dsn)
    setup.upgrade()
    setup.close()
    _run_jobs(redis_url, ns, 30, 3)
    stores: list[Any] = []
    snap = asyncio.run(drain(redis_url, ns, pg_dsn, hook=lambda s: stores.append(s.store),
                             config=SnapshotterConfig(retention_s=None, read_count=1,
                                                      seen_capacity=0)))
    assert stores[0].conflicts == 0 and snap.skipped == 0
    with Client(redis_url, ns, history=pg_dsn) as client:
        slots = client.history(limit=100)
    assert len(slots) == 33 and {s.status for s in slots} == {SlotStatus.SUCCEEDED,
                                                               SlotStatus.DEAD}


def _held_back_run(redis_url: str, ns: str, pg_dsn: str, ids: list[str],
                   before_drain: Any = None) -> tuple[Snapshotter, list[Any], list[Any]]:
    """A snapshotter holding back slots due within a minute drains the events twice: first
    (after `before_drain()`, when given), then once every one of `ids` has succeeded; the
    history after each drain."""
    from scheduler.history.store import open_store

    async def scenario(client: Client) -> tuple[Snapshotter, list[Any], list[Any]]:
        conn = async_redis(redis_url)
        snap = Snapshotter(conn, open_store(pg_dsn), namespace=ns, config=SnapshotterConfig(
            retention_s=None, defer_s=60, settle_s=0))

        async def drain_events() -> list[Any]:
            while await snap.run_once():
                pass
            await snap.settle()
            return client.history(limit=100)

        try:
            if before_drain is not None:
                await before_drain(conn, client)
            before = await drain_events()
            await run_until(redis_url, ns, _registry(), lambda: all(
                client.slots(j)[0].status is SlotStatus.SUCCEEDED for j in ids), node=True)
            return snap, before, await drain_events()
        finally:
            await conn.aclose()
            snap.store.close()

    with Client(redis_url, ns, history=pg_dsn) as client:
        return asyncio.run(scenario(client))


def _upgraded(pg_dsn: str) -> None:
    from scheduler.history.store import open_store

    setup = open_store(pg_dsn)
    setup.upgrade()
    setup.close()


def test_slots_due_soon_are_held_back_and_written_once_in_their_later_state(
        redis_url: str, ns: str, pg_dsn: str) -> None:
    _upgraded(pg_dsn)
    with Client(redis_url, ns, shards=2) as client:
        soon = client.submit_many([{"task": "ok"} for _ in range(10)])
        later = client.submit("ok", delay=600)  # not due within defer_s: written at once
    snap, before, after = _held_back_run(redis_url, ns, pg_dsn, soon)
    # Held back while queued: only the far-off slot was written in the first pass.
    assert [s.job_id for s in before] == [later] and snap.deferred == 10
    # Their `claimed`/`succeeded` events brought them back, still new: one insert each, in
    # their final state, and no rollback.
    assert {s.job_id: s.status for s in after} == {
        **{j: SlotStatus.SUCCEEDED for j in soon}, later: SlotStatus.SCHEDULED}
    assert snap.store.conflicts == 0 and snap.rows == 11 + 11  # jobs, slots (one attempt each)


def test_a_held_back_slot_promoted_ahead_of_its_time_is_still_written_once(
        redis_url: str, ns: str, pg_dsn: str) -> None:
    """A delayed slot due within defer_s is promoted up to 3 s early (promote.lua, "Early"):
    its `queued` event must leave it held, not write it queued and then again when it runs."""
    from scheduler.node.node import SchedulerNode

    _upgraded(pg_dsn)
    with Client(redis_url, ns, shards=2) as client:
        soon = client.submit_many([{"task": "ok", "delay": 2} for _ in range(6)])

    async def promote(conn: redis.asyncio.Redis, client: Client) -> None:
        node = SchedulerNode(conn, namespace=ns)
        task = asyncio.create_task(node.run())
        deadline = time.monotonic() + 10
        while not all(client.slots(j)[0].status is SlotStatus.QUEUED for j in soon):
            assert not task.done() and time.monotonic() < deadline, "not promoted"
            await asyncio.sleep(0.01)
        node.stop()
        await task

    snap, before, after = _held_back_run(redis_url, ns, pg_dsn, soon, promote)
    assert before == [] and snap.deferred == 6 and snap.intake.reheld == 6
    assert {s.job_id: s.status for s in after} == {j: SlotStatus.SUCCEEDED for j in soon}
    assert snap.store.conflicts == 0 and snap.rows == 6 + 6  # jobs, then each slot once


class _SkippingClock(RedisClock):
    """Redis time, moved on by `skip` with no wait: the snapshotter's deadlines pass."""

    skipped_s = 0.0

    def skip(self, seconds: float) -> None:
        self.skipped_s += seconds

    def now_ms(self) -> int:
        return super().now_ms() + int(self.skipped_s * 1000)

    def monotonic(self) -> float:
        return super().monotonic() + self.skipped_s


def test_a_held_back_slot_promoted_early_and_never_claimed_is_written_at_its_deadline(
        redis_url: str, ns: str, pg_dsn: str) -> None:
    """The promotion renews the hold; it must not drop the slot: with no worker to claim
    it, the deadline alone brings it, queued."""
    from scheduler.history.store import open_store
    from scheduler.node.node import SchedulerNode

    _upgraded(pg_dsn)
    with Client(redis_url, ns, shards=2) as client:
        ids = client.submit_many([{"task": "ok", "delay": 2} for _ in range(4)])

    clock = _SkippingClock()

    async def scenario(client: Client) -> tuple[Snapshotter, list[Any]]:
        conn = async_redis(redis_url)
        snap = Snapshotter(conn, open_store(pg_dsn), namespace=ns, config=SnapshotterConfig(
            retention_s=None, defer_s=3, settle_s=0), clock=clock)
        node = SchedulerNode(conn, namespace=ns)
        task = asyncio.create_task(node.run())
        try:
            deadline = time.monotonic() + 10
            while not all(client.slots(j)[0].status is SlotStatus.QUEUED for j in ids):
                assert not task.done() and time.monotonic() < deadline, "not promoted"
                await asyncio.sleep(0.01)
            while await snap.run_once():
                pass
            await snap.settle()
            clock.skip(3.2)  # past every held slot's deadline
            await snap.run_once()
            await snap.settle()
            return snap, client.history(limit=100)
        finally:
            node.stop()
            await task
            await conn.aclose()
            snap.store.close()

    with Client(redis_url, ns, history=pg_dsn) as client:
        snap, written = asyncio.run(scenario(client))
    assert snap.intake.reheld == 4
    assert {s.job_id: s.status for s in written} == {j: SlotStatus.QUEUED for j in ids}


def test_held_back_slots_are_written_at_their_deadline_and_on_flush(
        redis_url: str, ns: str, store_dsn: str) -> None:
    with Client(redis_url, ns, shards=2) as client:
        first = client.submit_many([{"task": "ok"} for _ in range(3)])

    async def scenario() -> list[int]:
        conn = async_redis(redis_url)
        from scheduler.history.store import open_store

        snap = Snapshotter(conn, open_store(store_dsn), namespace=ns, config=SnapshotterConfig(
            retention_s=None, defer_s=0.3, settle_s=0))
        counts = []
        try:
            with Client(redis_url, ns, history=store_dsn) as c:
                while await snap.run_once():
                    pass
                await snap.settle()
                counts.append(len(c.history(limit=100)))  # all three held back
                await asyncio.sleep(0.4)
                await snap.run_once()  # no new events: the deadline alone brings them
                await snap.settle()
                counts.append(len(c.history(limit=100)))
                c.submit_many([{"task": "ok"} for _ in range(2)])
                await snap.run_once()
                await snap.settle()
                counts.append(len(c.history(limit=100)))  # the two new ones wait
                assert await snap.flush() == 2
                counts.append(len(c.history(limit=100)))
        finally:
            await conn.aclose()
            snap.store.close()
        return counts

    assert first and asyncio.run(scenario()) == [0, 3, 3, 5]


def test_past_the_bound_slots_are_written_at_once(redis_url: str, ns: str, store_dsn: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.history import intake as snapshot_intake

    monkeypatch.setattr(snapshot_intake, "DEFER_MAX", 3)
    with Client(redis_url, ns, shards=2) as client:
        client.submit_many([{"task": "ok"} for _ in range(10)])
    snap = asyncio.run(drain(redis_url, ns, store_dsn,
                             config=SnapshotterConfig(retention_s=None, defer_s=60)))
    assert snap.deferred == 3  # the other 7 were written at once
    with Client(redis_url, ns, history=store_dsn) as client:
        assert len(client.history(limit=100)) == 10  # drain's flush wrote the 3



def test_a_dead_snapshotters_pending_events_are_taken_over_in_a_few_claims(
        redis_url: str, ns: str, r: redis.Redis, store_dsn: str) -> None:
    """A snapshotter SIGKILLed with 40 events entries per shard read and not acked: the next
    one takes them all over within a few claims (one every claim_idle_s / 2), not one entry
    per shard per claim (30 s apart by default), which left history minutes behind."""
    from scheduler.core.keys import HISTORY_GROUP, Keys
    from scheduler.history import reads as hash_read
    from scheduler.history.store import open_store

    with Client(redis_url, ns, shards=2) as client:
        for i in range(80):  # one `submitted` entry each
            client.submit("ok", i)
    events = [Keys(ns).events(s) for s in range(2)]
    for stream in events:
        r.xgroup_create(stream, HISTORY_GROUP, id="0")
        r.xreadgroup(HISTORY_GROUP, "killed", {stream: ">"}, count=1000)
    held = pending(r, ns)
    assert held == 80
    time.sleep(0.3)  # idle past claim_idle_s

    async def take_over() -> int:
        client = async_redis(redis_url)
        snap = Snapshotter(client, open_store(store_dsn), namespace=ns, config=SnapshotterConfig(
            retention_s=None, consumer="next", claim_idle_s=0.2, defer_s=0))
        hash_read.start(client)
        passes, deadline = 0, time.monotonic() + 1.5  # ~15 claims at most
        try:
            while pending(r, ns) and time.monotonic() < deadline:
                await snap.run_once()
                await snap.settle()
                passes += 1
                await asyncio.sleep(0.02)
        finally:
            await hash_read.stop(client)
            await client.aclose()
            snap.store.close()
        return passes

    passes = asyncio.run(take_over())
    assert pending(r, ns) == 0, f"{pending(r, ns)} of {held} still pending after {passes} passes"
