"""Fault injection with real processes: each fault in its own test, then randomized chaos
rounds (`--chaos-rounds N --chaos-jobs M --chaos-seed S` for a longer soak).

Every test checks the same invariants (tests/faults/invariants.py) against ground truth kept
outside the Redis under test: the ids submit returned, the faults the test caused, and what
the handlers recorded in the shared test Redis. Where a snapshotter runs, the history store
is checked against Redis too (the history rule)."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
import redis

from scheduler import JobSpec, RetryPolicy
from scheduler.core.keys import DEFAULT_PRIORITY, lane

from .harness import (
    LEASE_S,
    Processes,
    RedisServer,
    history_database,
    processes,
    redis_server,
    wait_for,
)
from .invariants import Report
from .scenario import Scenario, slow
from .workload import mixed

pytestmark = pytest.mark.slow


def running(sc: Scenario, n: int) -> bool:
    return sum(s == "running" for s in sc.statuses(sc.slot_ids())) >= n


def test_sigkilled_workers_lose_nothing(scenario: Scenario, procs: Processes,
                                        history_dsn: str) -> None:
    scenario.submit(slow(200, scenario.effects, 0.3))
    scenario.watch()
    procs.node()
    procs.snapshotter(history_dsn)
    victims = [procs.worker("--concurrency", "40") for _ in range(2)]
    wait_for(lambda: scenario.store.effect_count() >= 30, 30, "the first effects")
    for v in victims:
        procs.kill(v)
    procs.worker("--concurrency", "100")
    scenario.settle(procs, 60)
    report = scenario.check(procs)
    assert report.observed.events["reclaimed"] > 0  # the killed workers' runs were taken back


def test_a_frozen_workers_late_commits_are_refused(scenario: Scenario, procs: Processes) -> None:
    scenario.submit(slow(20, scenario.effects, 1.0))
    procs.node()
    frozen = procs.worker("--concurrency", "20")
    wait_for(lambda: running(scenario, 20), 20, "all 20 running")
    procs.truth.faulted_pids.add(frozen.pid)
    frozen.send_signal(19)  # SIGSTOP: frozen past its lease
    wait_for(lambda: all(s != "running" for s in scenario.statuses(scenario.slot_ids())),
             LEASE_S * 4, "the reclaim")
    procs.worker("--concurrency", "20")
    scenario.settle(procs, 30)
    frozen.send_signal(18)  # SIGCONT: its handlers finish now and may try to commit
    time.sleep(LEASE_S)
    report = scenario.check(procs)  # the commit rule: every success is the lease holder's
    # Woken, it either commits and is refused, or its watchdog sees the leases over first
    # and stops the runs without a commit: never does its success count.
    frozen_id = f"-{frozen.pid}-"
    assert not any(frozen_id in w for wins in report.observed.successes.values()
                   for _, w in wins)


def test_killed_scheduler_nodes_and_a_hanging_handler(scenario: Scenario, procs: Processes,
                                                      history_dsn: str) -> None:
    hang = JobSpec(task="chaos.hang", payload={"effects": scenario.effects}, timeout=0.3,
                   retry=RetryPolicy(max_attempts=2, base_s=0.05))
    flaky = [JobSpec(task="chaos.flaky", payload={"fail_first": 2, "effects": scenario.effects},
                     retry=RetryPolicy(max_attempts=4, base_s=0.2)) for _ in range(100)]
    [hang_id, *_] = scenario.submit([hang, *flaky])
    procs.worker("--concurrency", "50")
    procs.snapshotter(history_dsn)
    for _ in range(4):  # retries need a node to promote them; keep killing it
        node = procs.node()
        time.sleep(0.7)
        procs.kill(node)
    procs.node()
    scenario.settle(procs, 60)
    report = scenario.check(procs)
    [h] = scenario.client.slots(hang_id)
    assert h.status.value == "dead" and [a.outcome for a in h.attempts] == ["timed_out"] * 2
    assert sum(s.status.value == "succeeded" for s in report.observed.slots.values()) == 100


def test_redis_restart_with_aof_loses_nothing_accepted(redis_url: str, ns: str) -> None:
    with redis_server(aof=True) as server, history_database() as dsn:
        sc = Scenario(server.url, redis_url, ns)
        try:
            with processes(server.url, ns, redis_url, sc.truth) as procs:
                sc.submit(slow(300, sc.effects, 0.2))
                procs.node()
                procs.snapshotter(dsn)
                procs.worker("--concurrency", "50")
                wait_for(lambda: sc.store.effect_count() >= 50, 30, "the first effects")
                procs.touch_all_workers()
                server.kill()
                time.sleep(1.0)
                server.start()
                sc.settle(procs, 60)
                sc.check(procs)
        finally:
            sc.close()


def test_a_network_cut_between_worker_and_redis(scenario: Scenario, procs: Processes) -> None:
    scenario.submit(slow(40, scenario.effects, 1.0))
    procs.node()
    cut = procs.worker("--concurrency", "40", proxied=True)
    wait_for(lambda: running(scenario, 30), 20, "runs to start")
    procs.truth.faulted_pids.add(cut.pid)
    proxy = procs.proxies[cut.pid]
    proxy.stall()
    time.sleep(LEASE_S + 1.5)
    procs.worker("--concurrency", "40")
    proxy.cut()
    scenario.settle(procs, 60)
    proxy.restore()
    time.sleep(LEASE_S)
    report = scenario.check(procs)
    assert report.observed.events["reclaimed"] > 0


@pytest.mark.lease(8.0)
def test_many_delayed_and_cron_jobs_all_run_once(scenario: Scenario, procs: Processes,
                                                 history_dsn: str) -> None:
    """No fault at all, many slots through `due`: 5,000 delayed jobs and 30 every-second cron
    jobs. What it guards is the promoter and the materializer themselves (a slot in a
    thousand dropped, an occurrence skipped, would show here). Leases of 8 s, not the
    suite's 2: 400 handlers each opening connections to the truth Redis hold a worker's loop
    for seconds when another test shares the two cores (measured: 3 of 20 runs, two at a
    time, had their watchdog rightly give runs up), and no fault here needs a lease to end."""
    from datetime import UTC, datetime, timedelta

    from .truth import JobTruth
    from .workload import FAST

    end = datetime.now(UTC) + timedelta(seconds=6)
    delayed = [JobSpec(task="chaos.noop", payload={"effects": scenario.effects},
                       delay=i % 2000 / 1000, retry=FAST) for i in range(5000)]
    crons = [JobSpec(task="chaos.noop", payload={"effects": scenario.effects},
                     cron="* * * * * *", end_at=end, retry=FAST) for _ in range(30)]
    scenario.submit(delayed)
    scenario.submit(crons, [JobTruth(kind="cron", cron="* * * * * *", max_attempts=5,
                                     end_ms=int(end.timestamp() * 1000)) for _ in crons])
    scenario.watch()
    procs.node()
    procs.node()
    procs.snapshotter(history_dsn)
    # Not more at once: 500 handlers each opening connections to record their effects
    # starve a worker's event loop on two cores past its 2 s lease (its watchdog then rightly
    # gives the runs up).
    procs.worker("--concurrency", "200")
    procs.worker("--concurrency", "200")
    scenario.settle(procs, 40)
    report = scenario.check(procs)
    assert report.observed.events["queued"] >= 5000


# --- chaos ------------------------------------------------------------------------------

FAULTS = ["kill_worker", "kill_worker", "kill_node", "freeze_worker", "stall_worker", "oom",
          "delete_entries", "kill_snapshotter", "operator"]


@pytest.mark.timeout(7200)  # each round bounds its own waits; the soak option runs long
def test_chaos_rounds(request: pytest.FixtureRequest, sut: RedisServer, redis_url: str,
                      ns: str, history_dsn: str) -> None:
    rounds = request.config.getoption("--chaos-rounds")
    jobs = request.config.getoption("--chaos-jobs")
    seed = request.config.getoption("--chaos-seed")
    seed = random.randrange(1 << 30) if seed is None else seed
    print(f"chaos: {rounds} rounds x {jobs} jobs, --chaos-seed {seed}")
    rng = random.Random(seed)
    r = sut.client()
    for round_no in range(rounds):
        round_ns = f"{ns}r{round_no}"
        started = time.monotonic()
        report = chaos_round(sut, redis_url, round_ns, jobs, rng,
                             f"seed {seed} round {round_no}", history_dsn)
        print(f"round {round_no}: {len(report.observed.slots)} slots in "
              f"{time.monotonic() - started:.0f}s, events {dict(report.observed.events)}, "
              f"exactly-once effects lost with their attempt: {report.exempt_once}, "
              f"slowest reclaim past a lease (outages not counted): "
              f"{max(report.reclaim_lags, default=0)} ms; history holds "
              f"{len(report.history.slots) if report.history else 'no'} slots as Redis does")
        # What the history rule compares beyond statuses and attempts is there to compare.
        fields = {k.partition(":")[0] for h in report.observed.hashes.values() for k in h}
        assert {"result", "log", "priority", "a"} <= fields, fields
        for key in r.scan_iter(match=f"{round_ns}:*", count=5000):
            r.unlink(key)
    r.close()


def chaos_round(sut: RedisServer, truth_url: str, ns: str, jobs: int, rng: random.Random,
                label: str, history_dsn: str) -> Report:
    sc = Scenario(sut.url, truth_url, ns)
    try:
        work = mixed(jobs, rng, sc.effects)
        with processes(sut.url, ns, truth_url, sc.truth) as procs:
            sc.submit(work.specs, work.jobs)
            sc.watch()
            workers = [procs.worker("--concurrency", "60", proxied=True) for _ in range(3)]
            nodes = [procs.node() for _ in range(2)]
            snapshotters = [procs.snapshotter(history_dsn)]
            deadline, injected = time.monotonic() + 8, Counter[str]()
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(0.2, 0.8))
                injected[fault := rng.choice(FAULTS)] += 1
                inject(fault, rng, sc, sut, procs, workers, nodes, snapshotters)
            if not injected["kill_snapshotter"]:  # every round kills one at least
                injected["kill_snapshotter"] += 1
                inject("kill_snapshotter", rng, sc, sut, procs, workers, nodes, snapshotters)
            print(f"{label}: faults {dict(injected)}")
            settling = time.monotonic()
            sc.settle(procs, 180, label)
            print(f"{label}: settled in {time.monotonic() - settling:.1f}s", end="")
            report = sc.check(procs, label)
            print(f", history caught up {sc.history_wait_s:.1f}s later")
            return report
    finally:
        sc.close()


def inject(fault: str, rng: random.Random, sc: Scenario, sut: RedisServer, procs: Processes,
           workers: list, nodes: list, snapshotters: list) -> None:  # type: ignore[type-arg]
    if fault == "kill_worker":
        procs.kill(workers.pop(rng.randrange(len(workers))))
        workers.append(procs.worker("--concurrency", "60", proxied=True))
    elif fault == "kill_node":
        procs.kill(nodes.pop(rng.randrange(len(nodes))))
        nodes.append(procs.node())
    elif fault == "freeze_worker":
        procs.freeze(rng.choice(workers), rng.uniform(0.5, LEASE_S + 1))
    elif fault == "stall_worker":
        procs.stall(rng.choice(workers), rng.uniform(0.5, LEASE_S + 1.5))
    elif fault == "oom":
        with procs.redis_outage("oom"):
            sut.oom(True)
            try:
                time.sleep(rng.uniform(1.0, 3.0))
            finally:
                sut.oom(False)
    elif fault == "delete_entries":
        delete_entries(sc, rng, 3)
    elif fault == "kill_snapshotter":  # events pile up unread, its pending ones wait idle
        assert procs.history_dsn is not None
        procs.kill(snapshotters.pop())
        time.sleep(rng.uniform(0, 1.5))
        snapshotters.append(procs.snapshotter(procs.history_dsn))
    elif fault == "operator":
        operate(sc, rng)


def operate(sc: Scenario, rng: random.Random) -> None:
    """What an operator does mid-round: cancel up to 3 slots not finished yet (a reason each;
    a running one is stopped by its worker) and replay every dead one (a fresh attempt of
    the same slot). History must hold both as Redis does."""
    slots = sc.slot_ids()
    live = [s for s, st in zip(slots, sc.statuses(slots), strict=True)
            if st in ("scheduled", "queued", "running")]
    for s in rng.sample(live, min(3, len(live))):
        sc.truth.cancelled.add(s)
        sc.client.cancel(s, reason=f"chaos: {s[-6:]} cancelled by the test")
    sc.client.replay()


def delete_entries(sc: Scenario, rng: random.Random, n: int) -> list[str]:
    """Remove the stream entry (and pending entry) of up to `n` queued or running slots: the
    orphans the sweeper must find. Returns the slots touched."""
    r = sc.client.redis
    slots = sc.slot_ids()
    sample = rng.sample(slots, min(len(slots), 300))
    pipe = r.pipeline(transaction=False)
    for s in sample:
        pipe.hmget(sc.client._core.slot_key(s), "status", "msg", "queue", "priority")
    touched = []
    for s, (status, msg, queue, priority) in zip(sample, pipe.execute(), strict=True):
        if status in (b"queued", b"running") and msg:
            # The entry is in its priority's lane; an entry of the queue's plain stream with
            # the same id (written in the same ms) is another slot's.
            key = sc.client._core.slot_key(s)
            stream = key[:key.index("slot:")] + "q:" + lane(
                queue.decode(), int(priority) if priority else DEFAULT_PRIORITY)
            sc.truth.planted_orphans.add(s)
            try:
                r.xack(stream, "workers", msg)
                r.xdel(stream, msg)
            except redis.exceptions.ResponseError:
                pass  # no group yet
            touched.append(s)
            if len(touched) >= n:
                break
    return touched
