"""Scheduler nodes dying and freezing under a cron load: no occurrence is lost, none is
created twice, and each starts within 2 s of its fire time, though the dead and frozen
nodes' shards wait a whole shard lease (5 s, the default) for a new owner."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from scheduler import JobSpec

from .harness import Processes, wait_for
from .scenario import Scenario
from .workload import FAST

pytestmark = pytest.mark.slow

JOBS, SECONDS = 40, 16


def test_cron_starts_within_two_seconds_while_nodes_die_and_freeze(
        scenario: Scenario, procs: Processes) -> None:
    sc = scenario
    # The processes start first: eight nodes take seconds to come up on a loaded two-core
    # box, and occurrences due before any node runs would measure start-up, not failover.
    # They wait for the namespace (scheduler/core/namespace.py), created here ahead of any job.
    sc.client.create_namespace()
    nodes = [procs.node("--shard-lease", "5") for _ in range(8)]
    procs.worker("--concurrency", "200")
    procs.worker("--concurrency", "200")
    wait_for(lambda: (st := sc.client.status()).shards_owned == sc.client.shards
             and st.workers_alive == 2, 30, "owned shards and two live workers")
    end = datetime.now(UTC) + timedelta(seconds=SECONDS)
    specs = [JobSpec(task="chaos.noop", payload={"effects": sc.effects}, cron="* * * * * *",
                     end_at=end, retry=FAST) for _ in range(JOBS)]
    from .truth import JobTruth
    cron_ids = set(sc.submit(specs, [JobTruth(kind="cron", cron="* * * * * *",
                                              end_ms=int(end.timestamp() * 1000), max_attempts=5)
                                     for _ in specs]))
    time.sleep(3)
    # The faults go to the nodes that own shards (a namespace on one Redis has 2 shards, so
    # most of the 8 own none, and faulting those proves nothing): the first owner killed, the
    # second frozen, and one more node killed.
    owners = owning_nodes(sc, nodes)
    killed, frozen = owners[0], (owners[1:] or [n for n in nodes if n is not owners[0]])[0]
    extra = next(n for n in nodes if n is not killed and n is not frozen)
    faulted_at = time.time()
    procs.kill(killed)
    procs.kill(extra)
    frozen.send_signal(signal.SIGSTOP)
    try:
        time.sleep(8)  # longer than a shard lease: the frozen node's shards change hands too
    finally:
        frozen.send_signal(signal.SIGCONT)
    sc.settle(procs, 90)
    report = sc.check(procs)
    starts = sc.first_starts()
    occurrences = {s: slot for s, slot in report.observed.slots.items()
                   if s.rpartition(":")[0] in cron_ids}
    lags = sorted(starts[s] - slot.fire_ms / 1000 for s, slot in occurrences.items())
    during = sorted(starts[s] - slot.fire_ms / 1000 for s, slot in occurrences.items()
                    if faulted_at <= slot.fire_ms / 1000 <= faulted_at + 8)
    print(f"{len(lags)} occurrences: start lag p50 {lags[len(lags) // 2]:.2f}s, "
          f"p99 {lags[int(len(lags) * 0.99)]:.2f}s, max {lags[-1]:.2f}s; while the 3 nodes were "
          f"down or frozen ({len(during)}): max {during[-1]:.2f}s")
    late = sorted((round(slot.fire_ms / 1000 - faulted_at, 1), round(starts[s] - slot.fire_ms / 1000, 2))
                  for s, slot in occurrences.items() if starts[s] - slot.fire_ms / 1000 >= 2.0)
    assert not late, f"(fire time after the fault, start lag) of late occurrences: {late[:20]}"


def owning_nodes(sc: Scenario, nodes: list[subprocess.Popen[bytes]]
                 ) -> list[subprocess.Popen[bytes]]:
    """The node processes that own shards now, each once (a node id is
    `<host>-<pid>-<random>`, scheduler/node/node.py)."""
    by_pid = {n.pid: n for n in nodes}
    pids = [int(d.owner.rsplit("-", 2)[1]) for d in sc.client.status().shard_details
            if d.owner]
    owners = [by_pid[pid] for pid in dict.fromkeys(pids) if pid in by_pid]
    assert owners, f"no node of ours owns a shard: {pids}"
    return owners

