"""History under load: once the jobs finished and the snapshotter caught up, the history
store holds every slot and job as Redis does (the history rule, tests/faults/invariants.py).
`sched recover` rebuilds Redis from that store: a slot whose end never reached it would run
again after a Redis loss."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from scheduler import JobSpec

from .harness import Processes
from .scenario import Scenario
from .truth import JobTruth
from .workload import FAST

pytestmark = pytest.mark.slow


def test_every_finished_delayed_job_reaches_history_as_redis_holds_it(
        scenario: Scenario, procs: Processes, history_dsn: str) -> None:
    """A real `sched scheduler`, worker and snapshotter, started first as an operator does;
    then 1,000 no-ops delayed 4 s, submitted at 100 jobs/s."""
    sc = scenario
    sc.client.create_namespace()
    procs.node()
    procs.worker("--concurrency", "100")
    procs.snapshotter(history_dsn)
    t0 = time.monotonic()
    for n in range(100):
        specs = [JobSpec(task="chaos.noop", payload={"effects": sc.effects}, delay=4,
                         retry=FAST) for _ in range(10)]
        sc.submit(specs, [JobTruth(kind="delayed", max_attempts=FAST.max_attempts)] * 10)
        time.sleep(max(0.0, t0 + (n + 1) * 0.1 - time.monotonic()))  # 10 every 0.1 s
    sc.settle(procs, 60)
    report = sc.check(procs)  # the history rule among the rest
    assert sum(s.status.value == "succeeded" for s in report.observed.slots.values()) == 1000


def test_an_overlap_skip_jobs_active_run_reaches_history(
        scenario: Scenario, procs: Processes, history_dsn: str) -> None:
    """Cron jobs with overlap="skip" whose runs outlast their second: promote.lua names each
    job's run in flight in the job hash (`active`), and history must hold it too, or
    `sched recover` restores a job that no longer knows its run and starts the next
    occurrence beside the restored one."""
    sc = scenario
    end = datetime.now(UTC) + timedelta(seconds=5)
    specs = [JobSpec(task="chaos.slow", payload={"effects": sc.effects, "seconds": 1.5},
                     cron="* * * * * *", end_at=end, retry=FAST, overlap="skip")
             for _ in range(5)]
    sc.submit(specs, [JobTruth(kind="cron_skip", cron="* * * * * *", end_ms=int(
        end.timestamp() * 1000), max_attempts=FAST.max_attempts)] * len(specs))
    procs.node()
    procs.worker("--concurrency", "20")
    procs.snapshotter(history_dsn)
    sc.settle(procs, 60)
    report = sc.check(procs)
    ends = {s.status.value for s in report.observed.slots.values()}
    assert ends == {"succeeded", "skipped"}, ends
