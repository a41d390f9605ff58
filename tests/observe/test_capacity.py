"""How many workers the load calls for (scheduler/observe/capacity.py): the rule on records, then a
known situation read from Redis (queued jobs, two heartbeating workers whose runs take 2 s)
as `sched status` text and JSON and as the exporter's gauges, and the KEDA example that
scales on them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import yaml

from helpers import sched
from scheduler import Client, Context, Registry
from scheduler.core.errors import ConfigError
from scheduler.core.keys import Keys
from scheduler.observe.capacity import ScalingTarget, plan
from scheduler.observe.metrics import NamespaceCollector, RunMetrics, declared_names
from scheduler.observe.status import QueueStatus, WorkerStatus
from scheduler.redis.clock import ManualClock
from scheduler.scripts.replies import Grant
from scheduler.worker.heartbeat import Heartbeat
from scheduler.worker.inflight import Run
from scheduler.worker.worker import Worker, WorkerConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def queue(depth: int = 0, inflight: int = 0, per_s: float = 0.0, run_s: float = 0.0,
          name: str = "q") -> QueueStatus:
    return QueueStatus(queue=name, depth=depth, pending=inflight, oldest_ready_age_s=0.0,
                       succeeded_per_s=per_s, failed_per_s=0.0, inflight=inflight,
                       mean_run_s=run_s)


def worker(concurrency: int = 10, alive: bool = True, most: int = 0) -> WorkerStatus:
    return WorkerStatus(worker_id="w", alive=alive, heartbeat_age_s=0, host="h", pid=1,
                        queues=["q"], concurrency=concurrency, inflight=0, succeeded=0,
                        failed=0, succeeded_per_s=0, failed_per_s=0, by_queue={},
                        max_concurrency=most)


@pytest.mark.parametrize("queues, workers, wanted, slots", [
    ([], [], 0, 0.0),  # nothing to do: no worker
    ([queue()], [worker()], 0, 0.0),  # idle: scale to zero if the autoscaler allows
    ([queue(depth=12)], [], 1, 12.0),  # no worker, no run time yet: one worker's worth
    ([queue(depth=500)], [], 1, 100.0),  # ... at most (DEFAULT_CONCURRENCY)
    ([queue(inflight=8, per_s=4, run_s=2)], [worker()], 1, 10.0),  # steady 8 busy / 0.8
    ([queue(inflight=16, per_s=8, run_s=2)], [worker()] * 2, 2, 20.0),
    ([queue(depth=300, inflight=20, per_s=10, run_s=2)], [worker()] * 2, 5, 45.0),
    ([queue(depth=30, inflight=30, run_s=0)], [worker(), worker()], 5, 47.5),  # long runs
    ([queue(inflight=80, per_s=1, run_s=1)], [worker(40, most=50)] * 2, 2, 100.0),  # at MAX
    ([queue(per_s=0.01, run_s=0.05)], [worker()], 1, 0.0),  # a trickle still wants one
    ([queue(depth=40, per_s=10, run_s=1, name="a"),  # 10 / 0.8 + 40 x 1 s / 30 s
      queue(inflight=40, per_s=40, run_s=1, name="b")],  # + 40 / 0.8
     [worker(), worker(alive=False)], 7, 63.83),  # over the one live worker's 10
])
def test_the_rule(queues: list[QueueStatus], workers: list[WorkerStatus], wanted: int,
                  slots: float) -> None:
    s = plan(queues, workers)
    assert (s.wanted, s.slots_wanted) == (wanted, slots), s
    assert s.change == wanted - sum(w.alive for w in workers)
    assert s.wanted * s.slots_per_worker >= sum(q.inflight for q in queues)  # never below


def test_the_targets_move_it_and_bad_ones_are_refused() -> None:
    q = [queue(depth=300, inflight=20, per_s=10, run_s=2)]
    assert plan(q, [worker()] * 2, ScalingTarget(target_lag_s=60)).wanted == 4  # 25 + 10
    assert plan(q, [worker()] * 2, ScalingTarget(utilisation=1.0)).wanted == 4  # 20 + 20
    assert plan(q, [worker()] * 2, ScalingTarget(slots_per_worker=45)).wanted == 1
    for bad in ({"target_lag_s": 0}, {"utilisation": 0}, {"utilisation": 1.5},
                {"slots_per_worker": 0}):
        with pytest.raises(ConfigError):
            ScalingTarget(**bad)


def _situation(r: redis.Redis, client: Client, redis_url: str, ns: str,
               clock: ManualClock) -> None:
    """300 jobs queued in `mail`; two workers of 10 slots, each with 10 runs of `mail` in
    flight and 5 runs ended in the last second that took 2 s each, as the real heartbeat
    reports them. The test clock is set to Redis's, so that the CLI and the exporter, which
    read Redis TIME, see the workers alive."""
    seconds, micros = r.time()
    clock.ms = seconds * 1000 + micros // 1000
    client.submit_many([{"task": "t", "queue": "mail"} for _ in range(300)])

    async def beat() -> None:
        conn = redis.asyncio.Redis.from_url(redis_url)
        try:
            for n in range(2):
                running = {}
                for i in range(10):
                    run = Run(0, f"job{n}-{i}:1", Grant(1, "t", None, 0, "at_least_once", 0), 0)
                    run.metrics = RunMetrics("mail", "t")
                    running[run.slot_id] = run
                tallies = [(0, 0, 0, 0)]
                beat = Heartbeat(conn, Keys(ns), clock, f"w{n}", 30_000, 10, ["mail"],
                                 running, lambda t=tallies: {"mail": t[0]})
                await beat.run_once()
                clock.advance(1)
                tallies[0] = (5, 0, 5, 10_000)
                await beat.run_once()
                clock.advance(-1)
        finally:
            await conn.aclose()
    asyncio.run(beat())
    clock.advance(1)


def test_status_and_gauges_for_a_known_situation(r: redis.Redis, client: Client,
                                                  redis_url: str, ns: str,
                                                  clock: ManualClock) -> None:
    _situation(r, client, redis_url, ns, clock)

    s = client.status()
    [mail] = s.queues
    assert (mail.depth, mail.inflight, mail.succeeded_per_s, mail.mean_run_s) == (300, 20,
                                                                                   10.0, 2.0)
    assert s.scaling is not None
    assert (s.scaling.running, s.scaling.wanted, s.scaling.change) == (2, 5, 3)
    assert s.scaling.by_queue == {"mail": 45.0}  # 20 busy / 0.8 + 300 x 2 s / 30 s

    collector = NamespaceCollector(r, ns)
    gauges = {(m.name, tuple(sm.labels.values())): sm.value for m in collector.collect()
              for sm in m.samples}
    assert gauges[("sched_workers_wanted", ())] == 5
    assert gauges[("sched_queue_slots_wanted", ("mail",))] == 45.0
    relaxed = NamespaceCollector(r, ns, ScalingTarget(target_lag_s=60))
    assert [sm.value for m in relaxed.collect() if m.name == "sched_workers_wanted"
            for sm in m.samples] == [4]


def test_sched_status_shows_running_and_wanted(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, client: Client, redis_url: str,
        ns: str, clock: ManualClock) -> None:
    _situation(r, client, redis_url, ns, clock)
    code, out, _ = sched(capsys, redis_url, ns, "status", "--max-lag", "3600")
    assert code == 0, out
    assert "workers: 2 alive; the load calls for 5 workers at 10 run slots each: add 3" in out
    code, out, _ = sched(capsys, redis_url, ns, "status", "--json", "--target-lag", "60")
    scaling = json.loads(out)["scaling"]
    assert (scaling["running"], scaling["wanted"], scaling["change"]) == (2, 4, 2)
    assert scaling["by_queue"] == {"mail": 35.0} and scaling["target_lag_s"] == 60
    code, _, err = sched(capsys, redis_url, ns, "status", "--target-utilisation", "0")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_sched_status_of_an_idle_app_says_it_is_idle(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str) -> None:
    """A worker that ran a few jobs and now waits: its last heartbeat still reports their
    rate, which the rule counts as a trickle of load; the line says idle all the same."""
    registry = Registry()

    @registry.task("quick")
    async def quick(ctx: Context, payload: Any) -> None:
        pass

    async def go() -> str:
        conn = redis.asyncio.Redis.from_url(redis_url)
        worker = Worker(conn, registry, namespace=ns, config=WorkerConfig(block_ms=50,
                                                                          lease_s=1.5))
        task = asyncio.create_task(worker.run())
        try:
            with Client(redis_url, ns) as client:
                await asyncio.to_thread(client.submit_many,
                                        [{"task": "quick"} for _ in range(20)])
                for _ in range(500):  # the heartbeat reports the runs (every 0.5 s)
                    s = await asyncio.to_thread(client.status)
                    if s.workers and s.workers[0].succeeded == 20 and not any(
                            q.depth or q.pending or q.inflight for q in s.queues):
                        break
                    await asyncio.sleep(0.01)
            _, out, _ = await asyncio.to_thread(sched, capsys, redis_url, ns, "status")
            return out
        finally:
            worker.stop()
            await task
            await conn.aclose()

    out = asyncio.run(go())
    assert "workers: 1 alive; idle, no work waiting" in out, out
    assert "run slots" not in out and "wanted" not in out, out


def test_the_keda_example_scales_on_the_declared_gauge() -> None:
    doc = yaml.safe_load((DEPLOY / "keda-scaledobject.yaml").read_text())
    assert doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject"
    assert doc["spec"]["minReplicaCount"] <= doc["spec"]["maxReplicaCount"]
    [trigger] = doc["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    meta = trigger["metadata"]
    assert "sched_workers_wanted" in meta["query"] and "sched_workers_wanted" in declared_names()
    assert all(isinstance(v, str) for v in meta.values())  # KEDA wants strings there
    assert float(meta["threshold"]) == 1  # replicas = ceil(wanted / 1)
