"""Concurrency keys under faults: a worker SIGKILLed while it holds keyed runs. Its keys'
permits come back when the reclaimer ends those attempts, the keys go on, and by the
handlers' own log (kept outside the Redis under test) no key ever had more runs going than
its limit; nothing lost, nothing run twice."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from scheduler import JobSpec

from .harness import Processes, wait_for
from .scenario import Scenario
from .workload import FAST

pytestmark = pytest.mark.slow

LIMIT = 2


def test_a_killed_worker_s_keyed_runs_give_their_permits_back(scenario: Scenario,
                                                              procs: Processes) -> None:
    scenario.client.set_queue_limit("default", per_key_concurrency=LIMIT)
    procs.node()
    # 6 run slots each: neither worker alone can hold the 12 runs the limits allow
    doomed = procs.worker("--concurrency", "6")
    procs.worker("--concurrency", "6")
    wait_for(lambda: len(scenario.client.workers()) == 2, 30, "both workers up")
    time.sleep(1.2)  # the limit read
    keys = [f"tenant-{i}" for i in range(6)]
    specs = [JobSpec(task="chaos.slow", payload={"seconds": 0.3, "effects": scenario.effects},
                     retry=FAST, concurrency_key=k) for _ in range(12) for k in keys]
    ids = scenario.submit(specs)
    key_of = {job_id: spec.concurrency_key for job_id, spec in zip(ids, specs, strict=True)}
    wait_for(lambda: any(line["pid"] == doomed.pid for line in scenario.store.log()), 30,
             "runs in the worker to kill")
    procs.kill(doomed)
    killed_at = time.time()
    procs.worker("--concurrency", "6")
    scenario.settle(procs, 90)
    report = scenario.check(procs)
    assert report.observed.events["reclaimed"] > 0  # the killed worker's runs were taken back

    # Each run from its start to its end (or to the kill, for the killed worker's own).
    starts: dict[tuple[str, int, int], float] = {}
    spans: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for line in scenario.store.log():
        run = (line["slot"], line["attempt"], line["pid"])
        if line["event"] == "start":
            starts[run] = line["t"]
        else:
            key = key_of[line["slot"].rpartition(":")[0]]
            spans[key] += [(starts.pop(run), 1), (line["t"], -1)]
    for slot, _, pid in starts:
        assert pid == doomed.pid, f"a run of {slot} never ended in a live worker"
        spans[key_of[slot.rpartition(":")[0]]] += [(starts[(slot, _, pid)], 1), (killed_at, -1)]
    for key, points in spans.items():
        now = peak = 0
        for _, step in sorted(points):
            now += step
            peak = max(peak, now)
        assert peak <= LIMIT, f"{key}: {peak} runs at once"
    assert set(spans) == set(keys)
