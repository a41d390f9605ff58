"""Fault injection with real processes: each fault in its own test, then randomized chaos
rounds (`--chaos-rounds N --chaos-jobs M --chaos-seed S` for a longer soak)."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest
import redis

from scheduler import Client, JobSpec, RetryPolicy
from scheduler.states import TERMINAL

from .harness import LEASE_S, Processes, Proxy, RedisServer, processes, wait_for
from .invariants import check
from .workload import mixed


def submit(client: Client, specs: list[JobSpec]) -> dict[str, str]:
    """job id -> slot id."""
    ids = client.submit_many(specs)
    return {j: s.slot_id for j in ids for s in client.slots(j)}


def settled(client: Client, slots: list[str]) -> bool:
    pipe = client.redis.pipeline(transaction=False)
    for s in slots:
        pipe.hget(client._core.slot_key(s), "status")
    return all(v is not None and v.decode() in TERMINAL for v in pipe.execute())


def settle(client: Client, slots: Iterable[str], procs: Processes, timeout: float,
           label: str = "") -> None:
    """Wait until every slot is terminal; on timeout, say which states remain and what the
    processes logged."""
    slots = list(slots)
    try:
        wait_for(lambda: settled(client, slots), timeout, "all slots to settle", interval=0.2)
    except AssertionError:
        states = Counter(client.get_slot(s).status.value for s in slots)
        raise AssertionError(f"{label} not settled after {timeout}s: {dict(states)}\n"
                             f"{procs.output()}") from None


def verify(r: redis.Redis, ns: str, client: Client, slots: set[str], effects: str,
           **kw: Any) -> Any:
    report = check(r, ns, expected_slots=slots, now_ms=client.now_ms(),
                   lease_ms=int(LEASE_S * 1000), effects_key=effects, **kw)
    report.fail_if_violated()
    return report


def slow_jobs(n: int, effects: str, seconds: float, **kw: Any) -> list[JobSpec]:
    return [JobSpec(task="chaos.slow", payload={"seconds": seconds, "effects": effects},
                    retry=RetryPolicy(max_attempts=5, base_s=0.05), **kw) for _ in range(n)]


def test_sigkilled_workers_lose_nothing(r: redis.Redis, redis_url: str, ns: str) -> None:
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client, processes(redis_url, ns) as procs:
        slots = submit(client, slow_jobs(200, effects, 0.3))
        procs.node()
        victims = [procs.worker("--concurrency", "40") for _ in range(2)]
        wait_for(lambda: r.hlen(effects) >= 30, 30, "the first effects")
        for v in victims:
            v.send_signal(signal.SIGKILL)
        procs.worker("--concurrency", "100")
        settle(client, slots.values(), procs, 60)
        report = verify(r, ns, client, set(slots.values()), effects)
    assert report.events["reclaimed"] > 0  # the killed workers' runs were taken back


def test_a_frozen_workers_late_commits_are_refused(r: redis.Redis, redis_url: str,
                                                   ns: str) -> None:
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client, processes(redis_url, ns) as procs:
        slots = submit(client, slow_jobs(20, effects, 1.0))
        procs.node()
        frozen = procs.worker("--concurrency", "20")
        wait_for(lambda: sum(s.status.value == "running" for j in slots for s in
                             client.slots(j)) == 20, 20, "all 20 running")
        frozen.send_signal(signal.SIGSTOP)
        wait_for(lambda: verify_reclaimed(client, slots), LEASE_S * 4, "the reclaim")
        procs.worker("--concurrency", "20")
        settle(client, slots.values(), procs, 30)
        frozen.send_signal(signal.SIGCONT)  # its handlers finish now and try to commit
        time.sleep(LEASE_S)
        report = verify(r, ns, client, set(slots.values()), effects)
    assert report.events["refused"] > 0, "the frozen worker's commits must be refused"
    assert all(report.successes[s] == 1 for s in slots.values())


def verify_reclaimed(client: Client, slots: dict[str, str]) -> bool:
    return all(client.get_slot(s).attempt == 1 and client.get_slot(s).status.value != "running"
               for s in slots.values())


def test_killed_scheduler_nodes_and_a_hanging_handler(r: redis.Redis, redis_url: str,
                                                      ns: str) -> None:
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client, processes(redis_url, ns) as procs:
        hang = client.submit("chaos.hang", {"effects": effects}, timeout=0.3,
                             retry=RetryPolicy(max_attempts=2, base_s=0.05))
        flaky = [JobSpec(task="chaos.flaky", payload={"fail_first": 2, "effects": effects},
                         retry=RetryPolicy(max_attempts=4, base_s=0.2)) for _ in range(100)]
        slots = submit(client, flaky)
        procs.worker("--concurrency", "50")
        for _ in range(4):  # retries need a node to promote them; keep killing it
            node = procs.node()
            time.sleep(0.7)
            node.send_signal(signal.SIGKILL)
        procs.node()
        all_slots = [*slots.values(), client.slots(hang)[0].slot_id]
        settle(client, all_slots, procs, 60)
        verify(r, ns, client, set(all_slots), effects)
        [h] = client.slots(hang)
    assert h.status.value == "dead" and [a.outcome for a in h.attempts] == ["timed_out"] * 2
    assert all(client.get_slot(s).status.value == "succeeded" for s in slots.values())


def test_redis_restart_with_aof_loses_nothing_accepted(ns: str) -> None:
    server = RedisServer()
    server.start()
    effects = f"{ns}:test:effects"
    try:
        r = redis.Redis(port=server.port)
        with Client(server.url, ns) as client, processes(server.url, ns) as procs:
            slots = submit(client, slow_jobs(300, effects, 0.2))
            procs.node()
            procs.worker("--concurrency", "50")
            wait_for(lambda: r.hlen(effects) >= 50, 30, "the first effects")
            server.kill()
            time.sleep(1.0)
            server.start()
            settle(client, slots.values(), procs, 60)
            verify(r, ns, client, set(slots.values()), effects)
        r.close()
    finally:
        server.stop()


def test_a_network_cut_between_worker_and_redis(r: redis.Redis, redis_url: str,
                                                ns: str) -> None:
    effects = f"{ns}:test:effects"
    port = r.connection_pool.connection_kwargs.get("port", 6379)
    proxy = Proxy(int(port))
    try:
        with Client(redis_url, ns) as client, processes(redis_url, ns) as procs:
            slots = submit(client, slow_jobs(40, effects, 1.0))
            procs.node()
            procs.worker("--concurrency", "40", redis_url=proxy.url)
            wait_for(lambda: sum(client.get_slot(s).status.value == "running"
                                 for s in slots.values()) >= 30, 20, "runs to start")
            proxy.stall()
            time.sleep(LEASE_S + 1.5)
            procs.worker("--concurrency", "40")
            proxy.cut()
            settle(client, slots.values(), procs, 60)
            proxy.restore()
            time.sleep(LEASE_S)
            report = verify(r, ns, client, set(slots.values()), effects)
        assert report.events["reclaimed"] > 0
    finally:
        proxy.close()


@pytest.mark.timeout(3600)  # each round bounds its own waits; the soak option runs long
def test_chaos_rounds(request: pytest.FixtureRequest, r: redis.Redis, redis_url: str,
                      ns: str) -> None:
    rounds = request.config.getoption("--chaos-rounds")
    jobs = request.config.getoption("--chaos-jobs")
    seed = request.config.getoption("--chaos-seed")
    seed = random.randrange(1 << 30) if seed is None else seed
    print(f"chaos: {rounds} rounds x {jobs} jobs, --chaos-seed {seed}")
    rng = random.Random(seed)
    for round_no in range(rounds):
        round_ns = f"{ns}r{round_no}"
        try:
            chaos_round(r, redis_url, round_ns, jobs, rng, f"seed {seed} round {round_no}")
        finally:
            for key in r.scan_iter(match=f"{round_ns}:*", count=5000):
                r.unlink(key)


def chaos_round(r: redis.Redis, redis_url: str, ns: str, jobs: int, rng: random.Random,
                label: str) -> None:
    effects = f"{ns}:test:effects"
    work = mixed(jobs, rng, effects)
    with Client(redis_url, ns) as client, processes(redis_url, ns) as procs:
        ids = client.submit_many(work.specs)
        cron_jobs = [j for j, k in zip(ids, work.kinds, strict=True) if k == "cron"]
        slot_of = {j: s.slot_id for j in ids for s in client.slots(j)}
        kind_of = {slot_of[j]: k for j, k in zip(ids, work.kinds, strict=True) if j in slot_of}
        workers = [procs.worker("--concurrency", "60") for _ in range(3)]
        nodes = [procs.node() for _ in range(2)]
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.2, 0.8))
            fault = rng.choice(["kill_worker", "kill_worker", "kill_node", "freeze_worker"])
            if fault == "kill_worker":
                victim = workers.pop(rng.randrange(len(workers)))
                victim.send_signal(signal.SIGKILL)
                workers.append(procs.worker("--concurrency", "60"))
            elif fault == "kill_node":
                nodes.pop(rng.randrange(len(nodes))).send_signal(signal.SIGKILL)
                nodes.append(procs.node())
            else:
                victim = rng.choice(workers)
                victim.send_signal(signal.SIGSTOP)
                time.sleep(rng.uniform(0.5, LEASE_S + 1))
                victim.send_signal(signal.SIGCONT)
        settle(client, slot_of.values(), procs, 120, label)
        # Cron jobs end 5 s after submit; wait until every one has materialized its last
        # occurrence (its watermark leaves the cron set), then until their slots settle.
        wait_for(lambda: not any(client.get_job(j).next_fire_ms for j in cron_jobs), 60,
                 f"cron jobs to finish ({label})", interval=0.5)
        cron_slots = [s.slot_id for j in cron_jobs for s in client.slots(j)]
        kind_of.update(dict.fromkeys(cron_slots, "cron"))
        settle(client, cron_slots, procs, 60, label)
        report = check(r, ns, expected_slots=set(kind_of), now_ms=client.now_ms(),
                       lease_ms=int(LEASE_S * 1000), effects_key=effects,
                       once_slots={s for s, k in kind_of.items() if k == "once"},
                       at_most_once={s for s, k in kind_of.items() if k == "at_most_once"})
        assert not report.violations, f"{label}: " + "\n".join(report.violations[:20])
        statuses = {s.status.value for s in report.slots.values()}
        assert statuses <= {"succeeded", "dead", "lost", "cancelled"}
