"""/metrics after real work: every declared metric is there with sane values."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from scheduler import Client, Context, Registry, Retry, RetryPolicy
from scheduler.core.keys import Keys
from scheduler.node.node import SchedulerNode
from scheduler.observe import metrics
from scheduler.observe.exporter import MetricsServer
from scheduler.observe.metrics import NamespaceCollector, declared_names
from scheduler.worker.worker import Worker, WorkerConfig

OK, BAD, LATER = 300, 4, 3  # LATER: raise Retry on their first attempt, then succeed


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


@pytest.fixture
def server(redis_url: str, ns: str) -> Iterator[MetricsServer]:
    """What `sched dev` serves: this process's metrics and the namespace's gauges."""
    registry = CollectorRegistry()
    for m in metrics.PROCESS_METRICS:
        registry.register(m)
    client = redis.Redis.from_url(redis_url)
    registry.register(NamespaceCollector(client, ns))
    srv = MetricsServer(registry, host="127.0.0.1", port=0).start()
    yield srv
    srv.stop()
    client.close()


def test_metrics_after_real_work(r: redis.Redis, redis_url: str, ns: str,
                                 server: MetricsServer) -> None:
    queue = "q" + uuid.uuid4().hex[:8]  # process counters are global: a fresh label set
    registry = Registry()

    @registry.task("ok")
    async def ok(ctx: Context, payload: Any) -> None:
        pass

    @registry.task("bad")
    async def bad(ctx: Context, payload: Any) -> None:
        raise RuntimeError("always")

    @registry.task("later")
    async def later(ctx: Context, payload: Any) -> None:
        if ctx.attempt == 1:
            raise Retry(after=0.05, reason="not yet")

    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "ok", "queue": queue} for _ in range(OK)]
                           + [{"task": "bad", "queue": queue,
                               "retry": RetryPolicy(max_attempts=2, base_s=0.05, jitter=0)}
                              for _ in range(BAD)]
                           + [{"task": "later", "queue": queue} for _ in range(LATER)])
        before = scrape(server.port)
        assert total(before, "sched_queue_depth", queue=queue) == OK + BAD + LATER
        assert total(before, "sched_workers_alive") == 0
        assert total(before, "sched_exporter_up") == 1
        shards = client.shards

    keys = Keys(ns)
    r.xgroup_create(keys.events(1), "history", id="0", mkstream=True)  # a snapshotter, behind

    def heartbeat_counted() -> bool:
        with Client(redis_url, ns) as client:
            return [(w.succeeded, w.failed) for w in client.workers()] == [(OK + LATER, 2 * BAD)]

    async def work() -> tuple[Samples, Worker]:
        client = redis.asyncio.Redis.from_url(redis_url)
        worker = Worker(client, registry, namespace=ns,
                        config=WorkerConfig(queues=(queue,), block_ms=50, concurrency=50,
                                            lease_s=3))
        node = SchedulerNode(client, namespace=ns, node_id="node-a")
        tasks = [asyncio.create_task(worker.run()), asyncio.create_task(node.run())]
        try:
            deadline = time.monotonic() + 30
            while True:
                samples = await asyncio.to_thread(scrape, server.port)
                settled = (total(samples, "sched_dead_letter_size") == BAD
                           and total(samples, "sched_queue_depth", queue=queue) == 0
                           and total(samples, "sched_queue_pending", queue=queue) == 0
                           and total(samples, "sched_runs_total", queue=queue,
                                     outcome="succeeded") == OK + LATER)
                if settled and await asyncio.to_thread(heartbeat_counted):
                    return samples, worker
                assert time.monotonic() < deadline, "timed out waiting for the drain"
                for t in tasks:
                    if t.done():
                        t.result()
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            node.stop()
            await asyncio.gather(*tasks)
            await client.aclose()

    after, worker = asyncio.run(work())

    present = {name for name, _ in after}
    # No job here has a concurrency key: the per-key series are test_key_status.py's.
    expected = declared_names() - {"sched_key_waiting", "sched_key_running"}
    assert expected <= present, f"missing: {sorted(expected - present)}"

    runs = total(after, "sched_runs_total", queue=queue)
    assert runs == OK + 2 * BAD + 2 * LATER
    assert total(after, "sched_runs_total", queue=queue, outcome="failed") == 2 * BAD
    # A Retry the handler raised is an attempt of its own outcome, not a failure.
    assert total(after, "sched_runs_total", queue=queue, outcome="retried") == LATER
    assert total(after, "sched_start_lag_seconds_count", queue=queue) == runs
    assert total(after, "sched_start_lag_seconds_bucket", queue=queue, le="+Inf") == runs
    assert 0 <= total(after, "sched_start_lag_seconds_sum", queue=queue) < 60 * runs
    assert total(after, "sched_run_duration_seconds_count", queue=queue) == runs
    assert total(after, "sched_retries_total") - total(before, "sched_retries_total") == (
        BAD + LATER)
    assert total(after, "sched_dead_lettered_total") - total(
        before, "sched_dead_lettered_total") == BAD
    assert total(after, "sched_commits_refused_total") == total(before,
                                                                "sched_commits_refused_total")
    assert total(after, "sched_promoted_total") - total(before, "sched_promoted_total") == (
        BAD + LATER)

    assert total(after, "sched_dead_letter_size") == BAD
    assert total(after, "sched_due_slots") == total(after, "sched_due_backlog") == 0
    assert total(after, "sched_shards") == shards
    assert total(after, "sched_workers_alive") == 1
    w = worker.worker_id
    assert total(after, "sched_worker_concurrency", worker=w) == 50
    assert total(after, "sched_worker_inflight", worker=w) == 0
    assert 0 <= total(after, "sched_worker_heartbeat_age_seconds", worker=w) < 3
    assert total(after, "sched_shard_owner", shard="0", owner="node-a") == 1
    assert total(after, "sched_shards_owned") == shards
    assert total(after, "sched_snapshotter_backlog_events", shard="1") > 0
    lag = [v for (n, ls), v in after.items()
           if n == "sched_snapshotter_lag_seconds" and ("shard", "1") in ls]
    assert len(lag) == 1 and 0 <= lag[0] < 60, lag  # present, and the age of a real event
    for name in ("sched_lease_timeouts_total", "sched_reclaims_total",
                 "sched_occurrences_skipped_total", "sched_occurrences_not_backfilled_total"):
        assert (name, frozenset()) in after, name  # declared up front: zero until it counts


def test_healthz_and_an_unreachable_redis(ns: str) -> None:
    registry = CollectorRegistry()
    client = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    registry.register(NamespaceCollector(client, ns))
    srv = MetricsServer(registry, host="127.0.0.1", port=0, healthy=lambda: False).start()
    try:
        assert total(scrape(srv.port), "sched_exporter_up") == 0
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/healthz", timeout=5)
        assert err.value.code == 503
        err.value.close()
    finally:
        srv.stop()
        client.close()


def test_the_exporter_logs_workers_that_join_crash_or_leave(
        caplog: pytest.LogCaptureFixture) -> None:
    from scheduler.observe.status import WorkerStatus

    def worker(worker_id: str, alive: bool) -> WorkerStatus:
        return WorkerStatus(worker_id=worker_id, alive=alive, heartbeat_age_s=0 if alive else 95,
                            host="h", pid=1, queues=["default"], concurrency=1, inflight=0,
                            succeeded=0, failed=0, succeeded_per_s=0, failed_per_s=0,
                            by_queue={})

    collector = NamespaceCollector(redis.Redis(), "logs")
    collector._log_worker_changes([worker("a", True), worker("b", True)])  # first scrape: quiet
    caplog.set_level("INFO", logger="scheduler.observe.metrics")
    collector._log_worker_changes([worker("a", False), worker("c", True)])
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "worker c is alive"),
        ("WARNING", "worker a missed its heartbeats (last seen 95s ago); its runs are reclaimed "
                    "when their leases expire"),
        ("INFO", "worker b left")]
