"""Redis loses everything (the test's private namespace is deleted, key by key) with jobs of
every kind in flight; `sched recover` rebuilds it from Postgres: every unfinished slot ends
terminal, nothing that had succeeded runs again, at_most_once slots are never re-run, and
recurring jobs get their watermark back.

A recurring job's watermark restoration is tested at the Redis-key level, from job and slot
rows written straight into the store; tests/node/test_materializer.py checks that such a
watermark (last fire + 1 ms) resumes at the next real occurrence."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
import redis

from helpers import drain, run_until, sched
from scheduler import Client, Context, Registry, RetryPolicy, SlotStatus
from scheduler.core.errors import ValidationError
from scheduler.core.keys import DISPATCH_GROUP, Keys, shard_of
from scheduler.history.snapshotter import SnapshotterConfig
from scheduler.history.store import Batch, job_row, open_store, slot_rows
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies

LEASE_MS = 600_000


def drop_ns(r: redis.Redis, ns: str) -> None:
    for key in list(r.scan_iter(match=f"{ns}:*", count=1000)):
        r.delete(key)


def _registry(effects: Counter[str], payloads: dict[str, Any] | None = None) -> Registry:
    registry = Registry()
    for name in ("a", "b", "c", "d", "e", "k"):
        @registry.task(name)
        async def handler(ctx: Context, payload: Any) -> None:
            effects[ctx.slot_id] += 1
            if payloads is not None:
                payloads[ctx.slot_id] = payload
    return registry


def _claim(r: redis.Redis, client: Client, job_ids: list[str], queue: str,
           outcome: str | None = None) -> None:
    """Claim the jobs' slots as worker `ghost` (which then vanishes), or fail them at once
    with a short retry when `outcome` is given."""
    now_s, now_us = r.time()
    now = now_s * 1000 + now_us // 1000
    for shard in {shard_of(j, client.shards) for j in job_ids}:
        stream = client.keys.queue(shard, queue)
        r.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
        read = r.xreadgroup(DISPATCH_GROUP, "ghost", {stream: ">"}, count=100)
        entries = [(queue, mid, f[b"s"].decode()) for _, msgs in read for mid, f in msgs]
        prefix = client.keys.prefix(shard)
        reply = scripts.run_sync(r, [scripts.claim(prefix, now, "ghost", LEASE_MS,
                                                   entries)])[0]
        if outcome:
            grants = replies.claimed(reply, entries)
            items = [scripts.Failed(slot, grant.token, outcome, "try later", 300, 0.0, now, now)
                     for (_, _, slot), grant in zip(entries, grants, strict=True)
                     if isinstance(grant, replies.Grant)]
            assert items, "nothing was claimed to fail"
            scripts.run_sync(r, [scripts.fail(prefix, now, 1000, "ghost", items)])


def test_recover_after_redis_loses_everything(redis_url: str, ns: str, r: redis.Redis,
                                              pg_dsn: str, capsys: Any) -> None:
    assert sched(capsys, redis_url, ns, "db", "upgrade", "--postgres-dsn", pg_dsn)[0] == 0
    effects: Counter[str] = Counter()
    with Client(redis_url, ns, shards=4) as client:
        done = client.submit_many([{"task": "a", "queue": "qa"} for _ in range(10)])
        asyncio.run(run_until(redis_url, ns, _registry(effects),
                              lambda: len(effects) == 10, queues=("qa",)))
        queued = client.submit_many([{"task": "b", "queue": "qb", "payload": {"i": i}}
                                     for i in range(10)])
        running = client.submit_many([{"task": "c", "queue": "qc"} for _ in range(3)])
        at_most_once = client.submit_many([{"task": "d", "queue": "qd",
                                            "delivery": "at_most_once"} for _ in range(3)])
        retrying = client.submit_many([{"task": "e", "queue": "qe", "retry": RetryPolicy(
            max_attempts=3)} for _ in range(3)])
        # queued in their keys' queues (no stream entry): restored into them, and their keys
        # into the ring
        keyed = client.submit_many([{"task": "k", "queue": "qk", "concurrency_key": f"t{i % 2}"}
                                    for i in range(4)])
        _claim(r, client, running, "qc")
        _claim(r, client, at_most_once, "qd")
        _claim(r, client, retrying, "qe", outcome="failed")
        assert {client.slots(j)[0].status for j in retrying} == {SlotStatus.SCHEDULED}
        must_run = {client.slots(j)[0].slot_id for j in queued + running + retrying + keyed}
    ran_before = Counter(effects)
    asyncio.run(drain(redis_url, ns, pg_dsn, config=SnapshotterConfig(retention_s=None)))

    drop_ns(r, ns)  # Redis lost everything this namespace had
    assert not list(r.scan_iter(match=f"{ns}:*", count=10_000))
    code, out, err = sched(capsys, redis_url, ns, "recover", "--postgres-dsn", pg_dsn)
    assert code == 0, err
    assert "23 jobs" in out and "3 slots scheduled, 17 dispatched, 3 ended" in out
    keys = Keys(ns)
    home = {f"t{i}": keys.key_queue(shard_of(keyed[i], 4), "qk", f"t{i}") for i in range(2)}
    assert sum(r.zcard(q) for q in home.values()) == 4  # in their keys' queues again
    code, out, _ = sched(capsys, redis_url, ns, "recover", "--postgres-dsn", pg_dsn, "--json")
    assert code == 0 and json.loads(out)["slots_dispatched"] == 0  # safe to run twice

    unfinished = queued + running + at_most_once + retrying + keyed
    with Client(redis_url, ns, history=pg_dsn) as client:
        def all_terminal() -> bool:
            return all(client.slots(j)[0].status.value in ("succeeded", "lost")
                       for j in unfinished)

        payloads: dict[str, Any] = {}
        asyncio.run(run_until(redis_url, ns, _registry(effects, payloads), all_terminal,
                              node=True, queues=("qa", "qb", "qc", "qd", "qe", "qk"),
                              timeout=60))
        # A restored slot has no copy of its job's definition: claim read the job hash.
        assert sorted(payloads[client.slots(j)[0].slot_id]["i"] for j in queued) == list(
            range(10))
        for j in at_most_once:
            slot = client.slots(j)[0]
            assert slot.status is SlotStatus.LOST and slot.attempts[-1].outcome == "lost"
        for j in running:
            slot = client.slots(j)[0]
            assert [a.outcome for a in slot.attempts] == ["lost", "succeeded"]
        # The finished jobs live on in history, and nothing that had succeeded ran again.
        assert {s.status for j in done for s in client.runs(j)} == {SlotStatus.SUCCEEDED}
    again = effects - ran_before
    assert set(again) == must_run and set(again.values()) == {1}


@pytest.mark.parametrize("last_fire_ms", [None, 1_700_000_060_000])
def test_recover_restores_a_recurring_jobs_watermark(redis_url: str, ns: str, r: redis.Redis,
                                                     pg_dsn: str, capsys: Any,
                                                     last_fire_ms: int | None) -> None:
    created = 1_700_000_000_000
    store = open_store(pg_dsn)
    store.upgrade()
    store.put_namespace(ns, 4, created)
    raw = {"task": "report", "queue": "default", "kind": "cron", "created_ms": str(created),
           "fire_ms": str(created), "cron": "*/1 * * * *", "catchup": "all"}
    batch = Batch(jobs=[job_row(ns, "nightly", raw)], slots=[], attempts=[])
    if last_fire_ms:
        row, _ = slot_rows(ns, f"nightly:{last_fire_ms}", {
            "job_id": "nightly", "fire_ms": str(last_fire_ms), "status": "succeeded",
            "attempt": "1", "finished_ms": "1"}, 1)
        batch.slots.append(row)
    store.write(batch)
    store.close()
    assert sched(capsys, redis_url, ns, "recover", "--postgres-dsn", pg_dsn)[0] == 0
    shard = shard_of("nightly", 4)
    score = r.zscore(f"{ns}:{{s{shard:02d}}}:cron", "nightly")
    assert score == (last_fire_ms + 1 if last_fire_ms else created)
    assert r.hget(f"{ns}:{{s{shard:02d}}}:job:nightly", "cron") == b"*/1 * * * *"
    r.zadd(f"{ns}:{{s{shard:02d}}}:cron", {"nightly": 42})  # the job moved on since
    assert sched(capsys, redis_url, ns, "recover", "--postgres-dsn", pg_dsn)[0] == 0
    assert r.zscore(f"{ns}:{{s{shard:02d}}}:cron", "nightly") == 42  # never moved back


def test_recover_without_history_is_one_clear_error(redis_url: str, ns: str,
                                                    capsys: Any) -> None:
    code, _, err = sched(capsys, redis_url, ns, "recover", "--postgres-dsn",
                         "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")
    assert code == 1 and err.startswith("error: cannot reach Postgres") and "\n" == err[-1]
    assert err.count("\n") == 1


@pytest.mark.slow
def test_recover_resumes_a_cron_job_and_backfills_the_outage(
        redis_url: str, ns: str, r: redis.Redis, pg_dsn: str, capsys: Any) -> None:
    """A real every-second cron job runs, its history is snapshotted, Redis loses the
    namespace for a few seconds, `sched recover` puts the job back: the series continues from
    the last known occurrence with the outage backfilled (catchup all), nothing runs twice."""
    import time

    assert sched(capsys, redis_url, ns, "db", "upgrade", "--postgres-dsn", pg_dsn)[0] == 0
    ran: Counter[int] = Counter()
    registry = Registry()

    @registry.task("tick")
    async def tick(ctx: Context, payload: Any) -> None:
        ran[ctx.fire_ms] += 1

    with Client(redis_url, ns, shards=4) as client:
        job_id = client.submit("tick", cron="* * * * * *")
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(ran) >= 3, node=True,
                              timeout=30))
    asyncio.run(drain(redis_url, ns, pg_dsn, config=SnapshotterConfig(retention_s=None)))
    known = max(ran)
    drop_ns(r, ns)
    time.sleep(2.5)  # occurrences fall due while Redis has nothing
    code, _, err = sched(capsys, redis_url, ns, "recover", "--postgres-dsn", pg_dsn)
    assert code == 0, err
    resumed_at = max(ran)
    asyncio.run(run_until(redis_url, ns, registry, lambda: max(ran) >= resumed_at + 5000,
                          node=True, timeout=30))
    fires = sorted(ran)
    assert set(ran.values()) == {1}, "no occurrence ran twice"
    assert fires == list(range(fires[0], fires[-1] + 1000, 1000)), "no gap, outage backfilled"
    assert known in fires and fires[-1] > known + 3000
    with Client(redis_url, ns) as client:
        assert client.get_job(job_id).cron == "* * * * * *"


def test_recover_keeps_the_namespaces_payload_limit(redis_url: str, ns: str, r: redis.Redis,
                                                    pg_dsn: str, capsys: Any) -> None:
    """The snapshotter records the namespace's settings; `sched recover` creates it again
    with them, not with the default limit."""
    assert sched(capsys, redis_url, ns, "db", "upgrade", "--postgres-dsn", pg_dsn)[0] == 0
    with Client(redis_url, ns, shards=3, max_payload_bytes=2000) as client:
        client.submit("a", "x" * 1000, delay=3600)
    asyncio.run(drain(redis_url, ns, pg_dsn, config=SnapshotterConfig(retention_s=None)))
    drop_ns(r, ns)
    code, out, err = sched(capsys, redis_url, ns, "recover", "--postgres-dsn", pg_dsn)
    assert code == 0, err
    assert r.hget(Keys(ns).meta, "max_payload_bytes") == b"2000"
    assert "(3 shards, payloads up to 2,000 bytes)" in out
    with Client(redis_url, ns) as client:
        assert client.shards == 3
        with pytest.raises(ValidationError, match="2000"):
            client.submit("a", "x" * 3000)
        client.submit("a", "x" * 1000)
    # ...and so does the scripts' own copy, whoever calls them.
    keys = Keys(ns)
    assert {r.hget(keys.config(s), "max_payload_bytes") for s in range(3)} == {b"2000"}
