"""A worker that moves its own concurrency (scheduler/worker/autoscale.py): the controller on
synthetic observations, then a real worker under a backlog of slow jobs, in-process and as
`sched worker --autoscale`."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from typing import Any

import pytest
import redis

from conftest import SCHED
from helpers import sched
from scheduler import Client, Context, Registry
from scheduler.core.errors import ConfigError
from scheduler.observe.metrics import RunMetrics
from scheduler.redis.clients import async_redis
from scheduler.worker.autoscale import AutoscaleConfig, Autoscaler, Controller
from scheduler.worker.worker import Worker, WorkerConfig

LATE, ON_TIME = 5000.0, 10.0  # mean start lag of an observation's claims, ms


def controller(low: int = 1, high: int = 50, **kw: Any) -> Controller:
    return Controller(AutoscaleConfig(min_concurrency=low, max_concurrency=high, **kw))


def test_it_raises_under_lag_when_every_slot_is_busy_up_to_max() -> None:
    c = controller(1, 50)
    path = [c.concurrency]
    for _ in range(30):
        c.observe(LATE, busy=c.concurrency)
        if c.concurrency != path[-1]:
            path.append(c.concurrency)
    assert path == [1, 2, 3, 5, 8, 12, 18, 27, 41, 50]  # by half, every 2nd observation


def test_it_does_not_raise_when_on_time_or_not_saturated() -> None:
    c = controller(4, 50)
    for _ in range(20):
        c.observe(ON_TIME, busy=4)  # busy and on time: keeping up
        c.observe(LATE, busy=3)  # late but a slot free: more slots would not start it sooner
    assert c.concurrency == 4


def test_entries_waiting_here_for_a_slot_count_as_saturated() -> None:
    c = controller(4, 50)
    c.observe(LATE, busy=3, waiting=True)
    c.observe(LATE, busy=3, waiting=True)
    assert c.concurrency == 6
    for _ in range(30):  # waiting on time with few runs (e.g. just started): not idle
        c.observe(ON_TIME, busy=0, waiting=True)
    assert c.concurrency == 6


def test_it_lowers_when_idle_down_to_min_and_slower_than_it_raises() -> None:
    c = controller(2, 50)
    c.concurrency = 40
    path = [40]
    for _ in range(200):
        c.observe(None, busy=0)
        if c.concurrency != path[-1]:
            path.append(c.concurrency)
    assert path == [40, 30, 23, 18, 14, 11, 9, 7, 6, 5, 4, 3, 2]  # a quarter every 10th
    for _ in range(50):
        assert c.observe(None, busy=0) == 2  # never below MIN


def test_hysteresis_a_row_broken_by_the_other_condition_or_the_dead_band_starts_again() -> None:
    c = controller(1, 50)
    c.concurrency = 10
    for _ in range(50):
        c.observe(LATE, busy=10)  # lagging, saturated ...
        c.observe(ON_TIME, busy=7)  # ... then the dead band: neither row completes
    assert c.concurrency == 10
    for _ in range(50):
        for _ in range(9):
            c.observe(ON_TIME, busy=2)  # nine idle observations ...
        c.observe(LATE, busy=10)  # ... broken by one lagging one
    assert c.concurrency == 10
    c.observe(LATE, busy=10)
    assert c.concurrency == 15  # the second in a row raises
    c.observe(None, busy=15)  # no claim while saturated: neither breaks nor counts
    c.observe(LATE, busy=15)
    c.observe(None, busy=15)
    c.observe(LATE, busy=15)
    assert c.concurrency == 23


def test_the_autoscaler_reads_the_mean_lag_of_new_claims_off_the_histograms() -> None:
    class FakeWorker:
        running: dict[str, Any] = {}
        claiming = 0
        reader = type("R", (), {"backlog": []})()
        run_metrics: dict[tuple[str, str], RunMetrics] = {}

        def set_concurrency(self, concurrency: int) -> None:
            self.concurrency = concurrency

    w = FakeWorker()
    scaler = Autoscaler(w, AutoscaleConfig(min_concurrency=1, max_concurrency=4, raise_after=1))
    queue = f"lag-{time.monotonic_ns()}"  # the histograms are the process's: a fresh child
    a, b = RunMetrics(queue, "a"), RunMetrics(queue, "b")  # one queue: one lag child
    a.start_lag.observe_ms(99_000)  # before the worker knew it: a baseline, not a claim
    w.run_metrics = {(queue, "a"): a, (queue, "b"): b}
    assert scaler.lag_ms() is None
    a.start_lag.observe_ms(1000)
    b.start_lag.observe_ms(3000)
    assert scaler.lag_ms() == 2000 and scaler.lag_ms() is None
    w.running = {"s": None}  # the one slot busy, and the next claim 5 s late: raise
    a.start_lag.observe_ms(5000)
    assert asyncio.run(scaler.run_once()) == 2 and w.concurrency == 2


@pytest.mark.parametrize("text", ["5", "a:b", "1:", ":3", "-1:4", "1.5:3", "0:4", "5:2"])
def test_bad_bounds_are_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        AutoscaleConfig.parse(text)


@pytest.mark.parametrize("args, problem", [
    (["--autoscale", "5:2"], "1 <= MIN <= MAX, not 5:2"),
    (["--autoscale", "lots"], "'lots' is not MIN:MAX"),
    (["--autoscale", "0:8"], "min_concurrency must be from 1 to 100,000, not 0"),
    (["--autoscale", "1:8", "--concurrency", "4"], "--concurrency or --autoscale"),
])
def test_the_cli_refuses_bad_autoscale_input_in_one_line_with_exit_2(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        args: list[str], problem: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, "worker", "--app", "app_tasks:registry",
                           *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and problem in err, err
    assert not list(r.scan_iter(match=f"{ns}:*", count=10_000))  # nothing started, nothing written


SLOW_S, JOBS = 0.1, 40


def _drain(redis_url: str, ns: str, queue: str, autoscale: AutoscaleConfig | None
           ) -> tuple[float, list[int]]:
    """Seconds a worker at concurrency 1 (or autoscaled from 1) takes to run JOBS slow jobs
    queued before it starts, and the concurrencies it went through."""
    registry, done = Registry(), [0]

    @registry.task("slow")
    async def slow(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(SLOW_S)
        done[0] += 1

    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "slow", "queue": queue} for _ in range(JOBS)])

    async def go() -> tuple[float, list[int]]:
        conn = async_redis(redis_url)
        worker = Worker(conn, registry, namespace=ns, config=WorkerConfig(
            concurrency=1, autoscale=autoscale, queues=(queue,), block_ms=50, lease_s=3))
        task = asyncio.create_task(worker.run())
        started, path = time.monotonic(), [worker.concurrency]
        try:
            while done[0] < JOBS:
                assert time.monotonic() - started < 60 and not task.done(), "too slow"
                if worker.concurrency != path[-1]:
                    path.append(worker.concurrency)
                await asyncio.sleep(0.005)
            return time.monotonic() - started, path
        finally:
            worker.stop()
            await task
            await conn.aclose()

    return asyncio.run(go())


@pytest.mark.slow
def test_an_autoscaled_worker_under_a_backlog_raises_and_finishes_sooner(
        redis_url: str, ns: str) -> None:
    fixed_s, fixed_path = _drain(redis_url, ns, "fixed", None)
    auto_s, auto_path = _drain(redis_url, ns, "auto", AutoscaleConfig(
        min_concurrency=1, max_concurrency=50, interval_s=0.1, target_lag_ms=300))
    print(f"fixed at 1: {fixed_s:.2f}s; autoscaled 1:50: {auto_s:.2f}s via {auto_path}")
    assert fixed_path == [1] and fixed_s >= JOBS * SLOW_S
    assert auto_path[0] == 1 and max(auto_path) >= 8 and auto_path == sorted(auto_path)
    assert auto_s < fixed_s / 2


@pytest.mark.slow
def test_sched_worker_autoscale_reports_its_concurrency_and_logs_each_change(
        redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "test.sleep_then_effect", "queue": "slow",
                             "payload": {"seconds": 0.5, "effects": f"{ns}:test:effects"}}
                            for _ in range(60)])
        proc = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker",
                                 "--app", "app_tasks:registry", "--queues", "slow",
                                 "--autoscale", "2:8", "--lease", "3"],
                                env={**app_env, "SCHED_TEST_REDIS_URL_APP": redis_url},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline, seen = time.monotonic() + 30, []
            while not seen or seen[-1].concurrency <= 2:
                assert proc.poll() is None and time.monotonic() < deadline, seen
                seen.extend(w for w in client.workers() if w.alive)
                time.sleep(0.1)
            status = client.status()
        finally:
            proc.send_signal(signal.SIGTERM)
            out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, out
    assert seen[0].max_concurrency == 8 and 2 < seen[-1].concurrency <= 8
    assert "concurrency 2..8, autoscaled" in out
    assert "autoscale: concurrency 2 -> 3 (claims started" in out, out
    assert status.scaling is not None and status.scaling.slots_per_worker == 8
