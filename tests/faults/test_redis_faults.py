"""Faults of Redis itself and of the connection to it, one per test, with real processes:
every process outlives them, nothing accepted is lost, nothing stays stuck, and the figure
each test is about (how soon work resumes, how far a cut-off worker runs) is asserted.

Ground truth as everywhere in tests/faults: the ids submit returned, the faults the test
caused, and what handlers recorded outside the Redis under test."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from scheduler import JobSpec, RetryPolicy
from scheduler.core.keys import DISPATCH_GROUP

from .harness import LEASE_S, SWEEP_INTERVAL_S, Processes, RedisServer, redis_server, wait_for
from .scenario import Scenario, slow
from .workload import FAST

pytestmark = pytest.mark.slow


def test_processes_live_through_ten_seconds_of_oom(sut: RedisServer, scenario: Scenario,
                                                  procs: Processes, history_dsn: str) -> None:
    """Redis refuses every write (maxmemory, noeviction) for 10 s while jobs run: no worker,
    node or snapshotter exits, every job accepted before runs once it has memory again, and
    history catches up with all of it."""
    scenario.submit(slow(300, scenario.effects, 0.2))
    scenario.grace_ms += 10_000  # nothing can be reclaimed while Redis takes no write
    scenario.watch()
    procs.node()
    procs.node()
    procs.snapshotter(history_dsn)
    procs.worker("--concurrency", "50")
    procs.worker("--concurrency", "50")
    wait_for(lambda: scenario.store.effect_count() >= 20, 30, "the first effects")
    procs.touch_all_workers()
    sut.oom(True)
    try:
        time.sleep(10)
        assert procs.died() == [], procs.output()
        with pytest.raises(Exception, match="out of memory"):  # the SDK says so, in one line
            scenario.client.submit("chaos.noop", {"effects": scenario.effects})
    finally:
        sut.oom(False)
    resumed = time.monotonic()
    scenario.settle(procs, 60)
    print(f"all {len(scenario.truth.jobs)} jobs settled {time.monotonic() - resumed:.1f}s "
          f"after the OOM ended")
    scenario.check(procs)


def test_due_slots_start_within_two_seconds_of_redis_answering_again(
        redis_url: str, ns: str) -> None:
    """Redis (AOF) is killed and restarted with delayed jobs falling due meanwhile: each
    starts within 2 s of its fire time or of Redis answering again, whichever is later."""
    with redis_server(aof=True) as server:
        sc = Scenario(server.url, redis_url, ns)
        try:
            from .harness import processes
            with processes(server.url, ns, redis_url, sc.truth) as procs:
                specs = [JobSpec(task="chaos.noop", payload={"effects": sc.effects},
                                 delay=2 + i * 0.02, retry=FAST) for i in range(200)]
                sc.submit(specs)
                procs.node()
                procs.node()
                procs.worker("--concurrency", "100")
                time.sleep(1.0)
                procs.touch_all_workers()
                server.kill()
                time.sleep(3.0)  # every slot falls due while Redis is down
                server.start()
                back = time.time()
                sc.settle(procs, 60)
                report = sc.check(procs)
            starts = sc.first_starts()
            lags = sorted(starts[s] - max(back, slot.fire_ms / 1000)
                          for s, slot in report.observed.slots.items())
            print(f"after the restart: {len(lags)} slots started, lag behind Redis answering "
                  f"(or the fire time) median {lags[len(lags) // 2]:.2f}s, max {lags[-1]:.2f}s")
            assert lags[-1] < 2.0, lags[-10:]
        finally:
            sc.close()


def test_a_stalled_connection_stops_the_runs_before_their_lease_expires(
        scenario: Scenario, procs: Processes) -> None:
    """The worker's connection stays open and carries nothing (no RST, no FIN): its watchdog
    stops every run before Redis can think the lease expired, so no slot ever runs on two
    workers at once; the slots are reclaimed and finish on another worker."""
    scenario.submit(slow(30, scenario.effects, 6.0, timeout=30))
    procs.node()
    cut = procs.worker("--concurrency", "30", proxied=True)
    wait_for(lambda: len(scenario.first_starts()) == 30, 20, "all 30 running")
    procs.truth.faulted_pids.add(cut.pid)
    stalled = time.time()
    procs.proxies[cut.pid].stall()
    procs.worker("--concurrency", "30")
    try:
        scenario.settle(procs, 60)
    finally:
        procs.proxies[cut.pid].restore()
    report = scenario.check(procs)
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for line in scenario.store.log():
        runs.setdefault((line["slot"], line["attempt"]), {})[line["event"]] = line
    overlaps, stopped_after = [], []
    for (slot, attempt), ev in runs.items():
        if attempt != 1:
            continue
        end = ev.get("cancelled", ev.get("ok", ev.get("failed")))
        assert end is not None, f"{slot}: attempt 1 never ended"
        stopped_after.append(end["t"] - stalled)
        nxt = runs.get((slot, 2), {}).get("start")
        if nxt is not None:
            overlaps.append(end["t"] - nxt["t"])
    lease_ends = [a.lease_until_ms / 1000 - stalled for s in report.observed.slots.values()
                  for a in s.attempts if a.number == 1 and a.lease_until_ms]
    print(f"stalled worker stopped its runs {min(stopped_after):.2f}-{max(stopped_after):.2f}s "
          f"after the stall; their leases ran until {min(lease_ends):.2f}-"
          f"{max(lease_ends):.2f}s; overlap with the next attempt {max(overlaps):.2f}s")
    assert max(overlaps) < 0, "a slot ran on two workers at once"
    assert all(e.outcome.value == "lost" for s in report.observed.slots.values()
               for e in s.attempts if e.number == 1)


def test_an_outcome_that_arrives_after_its_lease_is_refused(scenario: Scenario,
                                                            procs: Processes) -> None:
    """Fencing, end to end: the handlers finish while their worker's connection is stalled,
    so their successes wait in its committer while the slots are reclaimed and run again
    elsewhere. When the connection comes back, every one of those late commits is refused,
    and each slot's one success is the second worker's."""
    sc = scenario
    sc.submit(slow(20, sc.effects, 3.0, timeout=30))
    procs.node()
    first = procs.worker("--concurrency", "20", proxied=True)
    wait_for(lambda: len(sc.first_starts()) == 20, 20, "all 20 running")
    procs.truth.faulted_pids.add(first.pid)
    time.sleep(max(0.0, max(sc.first_starts().values()) + 2.5 - time.time()))
    proxy = procs.proxies[first.pid]
    proxy.stall()  # the handlers end in half a second; their commits cannot leave
    procs.worker("--concurrency", "20")
    try:
        wait_for(lambda: sum(1 for line in sc.store.log()
                             if line["event"] == "start" and line["attempt"] == 2) == 20,
                 20, "the second attempts to start")
    finally:
        proxy.restore()  # while the second attempts run: the late commits arrive now
    sc.settle(procs, 30)
    report = sc.check(procs)  # the commit rule: each success is its lease holder's
    assert report.observed.events["refused"] >= 20
    assert all(len(w) == 1 and f"-{first.pid}-" not in w[0][1]
               for w in report.observed.successes.values())


def test_a_failed_claim_puts_its_entries_back(sut: RedisServer, scenario: Scenario,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis starts refusing writes (OOM) between a worker's read and its claim, for 1.5 s:
    the claim fails, and the worker claims those entries as soon as Redis takes writes again,
    not a lease (30 s here) later when the reclaimer would find them. A real worker in this
    process, so that the fault lands exactly between the two round trips."""
    import asyncio
    import threading

    import app_tasks
    from scheduler.redis.clients import process_redis
    from scheduler.worker.claims import Claims
    from scheduler.worker.worker import Worker, WorkerConfig

    sc = scenario
    monkeypatch.setenv("SCHED_TEST_REDIS_URL_APP", sc.truth_url)
    app_tasks._client = None
    sc.submit([JobSpec(task="chaos.noop", payload={"effects": sc.effects}, retry=FAST)
               for _ in range(40)])
    back: list[float] = []
    real = Claims.claim

    async def claim_into_oom(self: Claims, *args: Any, **kw: Any) -> int:
        if not back:
            sut.oom(True)
            back.append(0.0)
            threading.Timer(1.5, lambda: (sut.oom(False), back.__setitem__(0, time.time()))
                            ).start()
        return await real(self, *args, **kw)

    monkeypatch.setattr(Claims, "claim", claim_into_oom)

    async def run() -> None:
        client = process_redis(sut.url, 30.0)
        worker = Worker(client, app_tasks.registry, namespace=sc.ns,
                        config=WorkerConfig(concurrency=50, lease_s=30, block_ms=100))
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.to_thread(wait_for, lambda: sc.store.effect_count() >= 40, 20,
                                    "the 40 runs")
        except AssertionError:
            pass  # the assertion below says how many ran
        worker.stop()
        await task
        await client.aclose()
        if app_tasks._client is not None:  # the handlers' client, of this event loop
            await app_tasks._client.aclose()
            app_tasks._client = None

    asyncio.run(run())
    starts = sc.first_starts()
    assert len(starts) == 40, f"{len(starts)} of 40 ran within 20 s"
    lags = [t - back[0] for t in starts.values()]
    print(f"claimed after Redis took writes again: {min(lags):.2f}-{max(lags):.2f}s")
    assert max(lags) < 2.0
    app_tasks._client = None


def test_an_error_text_that_cannot_be_encoded_kills_no_worker(scenario: Scenario,
                                                              procs: Processes) -> None:
    """A handler raising RuntimeError("\\udcff...") used to kill every worker that ran it and
    strand the slots in flight beside it: now its slot fails as any other, and the 50 jobs
    around it succeed on the same worker."""
    poison = [JobSpec(task="chaos.poison", payload={"effects": scenario.effects},
                      retry=RetryPolicy(max_attempts=2, base_s=0.05)) for _ in range(5)]
    scenario.submit([*poison, *slow(50, scenario.effects, 0.5)])
    procs.node()
    procs.worker("--concurrency", "60")
    scenario.settle(procs, 30)
    report = scenario.check(procs)
    dead = [s for s in report.observed.slots.values() if s.status.value == "dead"]
    assert len(dead) == 5 and all("\\udcff" in (a.error or "") for s in dead for a in s.attempts)


# --- orphans: slots that fell out of every index ------------------------------------------


def _slot_fields(sc: Scenario, slot: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in
            sc.client.redis.hgetall(sc.client._core.slot_key(slot)).items()}


def test_orphans_are_found_and_run_again(sut: RedisServer, scenario: Scenario,
                                         procs: Processes) -> None:
    """Five ways to strand a slot, none of which the reclaimer can see: a queued slot whose
    stream entry is deleted; a queued one whose entry was read and acked, never claimed; a
    running one whose pending entry was acked, its worker then dead; a running at-most-once
    one missing from `leases`; a scheduled one missing from `due`. The sweeper repairs each
    within the lease plus its interval of the node taking its shards."""
    r, sc = sut.client(), scenario
    victim = procs.worker("--concurrency", "10")
    running = sc.submit(slow(1, sc.effects, 3.0))
    amo = sc.submit([JobSpec(task="chaos.slow", payload={"seconds": 3, "effects": sc.effects},
                             delivery="at_most_once")])
    wait_for(lambda: len(sc.first_starts()) == 2, 20, "the two runs to start")
    procs.kill(victim)
    killed = time.time()
    deleted, acked = sc.submit(slow(2, sc.effects, 0.1))  # no worker reads them now
    [unscheduled] = sc.submit(slow(1, sc.effects, 0.1, delay=0.5))
    slot = {j: f"{j}:{sc.client.get_job(j).fire_ms}" for j in
            [*running, *amo, deleted, acked, unscheduled]}
    sc.truth.planted_orphans |= set(slot.values())
    fields = {j: _slot_fields(sc, s) for j, s in slot.items()}
    prefix = {j: sc.client._core.slot_key(s).rsplit("slot:", 1)[0] for j, s in slot.items()}
    r.xdel(prefix[deleted] + "q:default", fields[deleted]["msg"])
    stream = prefix[acked] + "q:default"
    r.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True) if not _has_group(
        r, stream) else None
    r.xreadgroup(DISPATCH_GROUP, "thief", {stream: ">"}, count=1000)
    r.xack(stream, DISPATCH_GROUP, fields[acked]["msg"])
    r.xack(prefix[running[0]] + "q:default", DISPATCH_GROUP, fields[running[0]]["msg"])
    r.zrem(prefix[amo[0]] + "leases", slot[amo[0]])
    r.zrem(prefix[unscheduled] + "due", slot[unscheduled])
    time.sleep(1.0)  # the unscheduled slot's fire time passes
    sc.watch()
    procs.node()
    procs.worker("--concurrency", "10")
    wait_for(lambda: sc.client.status().shards_owned == sc.client.shards, 20, "the node")
    ready = time.time()
    sc.settle(procs, 30)
    report = sc.check(procs)
    lease_end = max(killed, ready) + LEASE_S  # no heartbeat after the kill
    rerun = {"deleted entry": sc.starts_after(slot[deleted], killed) - (ready - killed),
             "acked entry": sc.starts_after(slot[acked], killed) - (ready - killed),
             "not in due": sc.starts_after(slot[unscheduled], killed) - (ready - killed),
             "pending acked": sc.starts_after(slot[running[0]], killed) - (lease_end - killed)}
    print("orphans re-run after the node took its shards (the lease's end for the running "
          "one): " + ", ".join(f"{k} {t:.2f}s" for k, t in rerun.items())
          + f"; budget lease + sweep interval = {LEASE_S + SWEEP_INTERVAL_S:.1f}s")
    assert report.observed.orphaned >= set(slot.values()) - {slot[amo[0]]}
    assert report.observed.slots[slot[amo[0]]].status.value == "lost"  # never re-run
    assert max(rerun.values()) < LEASE_S + SWEEP_INTERVAL_S, rerun
    assert sc.client.status().orphans_recovered >= 5
    r.close()


def _has_group(r: redis.Redis, stream: str) -> bool:
    try:
        return any(g["name"] == DISPATCH_GROUP.encode() for g in r.xinfo_groups(stream))
    except redis.exceptions.ResponseError:
        return False


def test_status_escalates_a_running_orphan_until_it_is_repaired(
        sut: RedisServer, scenario: Scenario, procs: Processes) -> None:
    """A running slot whose pending entry is gone, its worker alive and heartbeating: the
    sweeper cannot re-run it while its lease lives, so `sched status` reports it unhealthy;
    when the run ends the report clears."""
    r = sut.client()
    sc = scenario
    [job] = sc.submit(slow(1, sc.effects, 4.0))
    procs.node()
    procs.worker("--concurrency", "1")
    slot = f"{job}:{sc.client.get_job(job).fire_ms}"
    wait_for(lambda: _slot_fields(sc, slot).get("status") == "running", 20, "the run")
    key = sc.client._core.slot_key(slot)
    r.xack(key.rsplit("slot:", 1)[0] + "q:default", DISPATCH_GROUP, _slot_fields(sc, slot)["msg"])
    wait_for(lambda: sc.client.status().orphans_waiting == 1, 10, "the report")
    problems = sc.client.status().problems()
    assert any("lost their pending stream entry" in p for p in problems), problems
    sc.settle(procs, 20)
    wait_for(lambda: sc.client.status().orphans_waiting == 0, 10, "the report to clear")
    sc.check(procs)
    r.close()


def test_what_the_handlers_recorded_is_json(scenario: Scenario) -> None:
    """The truth log's lines parse (the other tests rely on it)."""
    scenario.store.redis.rpush(f"{scenario.store.key}:log", json.dumps({"event": "x"}))
    assert scenario.store.log() == [{"event": "x"}]
