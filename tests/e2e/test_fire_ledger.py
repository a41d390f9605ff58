"""Did it fire, and if not, why: real `sched scheduler` and `sched worker` processes on the
real clock, and `Client.fires` / `sched schedules explain` reading what they did.

- overlap="skip" with runs longer than the cadence: every fire time of a 10 s window is
  listed once; the skipped ones read `overlap` and name a run that was active at their fire
  time; the on-time share and lag quantiles equal those computed from the slots themselves;
- every node stopped ~10 s with catchup="latest": the dropped fire times read `catchup`,
  the latest of them ran;
- a queue no worker reads: its occurrences read `pending`, `no_worker`;
- a redefinition: the old cadence's withdrawn occurrences read `redefined`;
- queues whose rate or concurrency limit holds their runs back: `pending`, `paused_by_limit`.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from conftest import SCHED
from helpers import running, sched_process
from scheduler import Client, FireState, Reason, RetryPolicy
from scheduler.core.ledger import start_lag_ms
from scheduler.history.store import open_store

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them


def node(redis_url: str, ns: str, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return sched_process(redis_url, ns, env, "scheduler", "--shard-lease", "2",
                         "--log-level", "warning", *args)


def worker(redis_url: str, ns: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return sched_process(redis_url, ns, env, "worker", "--app", "app_tasks:registry",
                         "--concurrency", "50", "--log-level", "warning")


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.1)


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()  # type: ignore[misc]
    return int(sec) * 1000 + int(usec) // 1000


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_overlap_skips_name_the_run_they_yielded_to(r: redis.Redis, redis_url: str, ns: str,
                                                    app_env: dict[str, str]) -> None:
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client:
        client.create_namespace()
        with running(node(redis_url, ns, app_env), worker(redis_url, ns, app_env)):
            job_id = client.submit("test.sleep_then_effect",
                                   {"seconds": 2.5, "effects": effects},
                                   cron="* * * * * *", overlap="skip")
            first = client.get_job(job_id).fire_ms
            last = first + 9000  # a 10 s window
            # the window, and the run active at its end, finished
            wait_for(lambda: redis_ms(r) > last + 4000, 25, "the window and its last run")
        page = client.fires(job_id, since=at(first), until=at(last))
        slots = {s.fire_ms: s for s in client.slots(job_id)}
    fires = page.fires
    assert [f.fire_ms for f in fires] == list(range(first, last + 1, 1000))  # each once
    ran = [f for f in fires if f.state is FireState.RAN]
    skipped = [f for f in fires if f.reason is Reason.OVERLAP]
    assert len(ran) + len(skipped) == 10 and 2 <= len(ran) <= 5, [
        (f.state, f.reason) for f in fires]
    for f in ran:
        assert f.outcome == "succeeded" and f.reason is None and f.slot_id
    for f in skipped:
        assert f.state is FireState.NOT_RUN and f.yielded_to
        active = slots[int(f.yielded_to.rpartition(":")[2])]
        attempt = active.attempts[0]
        # the run it yielded to had started by this fire time, or was about to (queued at
        # its own fire time), and had not finished
        assert active.fire_ms < f.fire_ms and (attempt.finished_ms or 0) >= f.fire_ms - 50
    # The summary's figures are the slots' own.
    lags = sorted(start_lag_ms(slots[f.fire_ms]) or 0 for f in ran)
    s = page.summary
    assert s.due == 10 and s.started == len(ran) and s.not_started == {"overlap": len(skipped)}
    assert s.on_time == sum(lag <= 2000 for lag in lags)
    assert s.on_time_share == s.on_time / len(ran)
    assert s.lag_p50_ms == lags[math.ceil(0.5 * len(lags)) - 1]
    assert s.lag_p99_ms == lags[math.ceil(0.99 * len(lags)) - 1] == s.lag_max_ms == lags[-1]


def test_a_stopped_node_and_catchup_latest(r: redis.Redis, redis_url: str, ns: str,
                                           app_env: dict[str, str]) -> None:
    grace = ("--misfire-grace", "1", "--lookahead", "1")
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client:
        client.create_namespace()
        with running(worker(redis_url, ns, app_env)):
            job_id = client.submit("test.effect", {"effects": effects}, cron="* * * * * *",
                                   catchup="latest")
            with running(node(redis_url, ns, app_env, *grace)):
                wait_for(lambda: len(client.slots(job_id)) >= 2, 15, "the first slots")
            down_from = max(s.fire_ms for s in client.slots(job_id))
            time.sleep(10)  # every node down
            with running(node(redis_url, ns, app_env, *grace)):
                back = redis_ms(r)
                wait_for(lambda: any(s.fire_ms > back and s.status.value == "succeeded"
                                     for s in client.slots(job_id)), 15, "runs after the restart")
            page = client.fires(job_id, since=at(down_from - 1000))
    by_reason = [f for f in page.fires if f.reason is Reason.CATCHUP]
    assert len(by_reason) >= 7, [(f.fire_ms, f.state, f.reason) for f in page.fires]
    dropped = [f.fire_ms for f in by_reason]
    assert dropped == list(range(dropped[0], dropped[-1] + 1, 1000))  # one by one
    assert dropped[0] == down_from + 1000
    latest = next(f for f in page.fires if f.fire_ms == dropped[-1] + 1000)
    assert latest.state is FireState.RAN and latest.outcome == "succeeded"
    assert page.summary.not_started["catchup"] == len(dropped)


def test_no_worker_and_a_redefinition(r: redis.Redis, redis_url: str, ns: str,
                                      app_env: dict[str, str]) -> None:
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client:
        client.create_namespace()
        with running(node(redis_url, ns, app_env), worker(redis_url, ns, app_env)):
            lonely = client.submit("test.effect", {"effects": effects}, cron="* * * * * *",
                                   queue="nobody-reads")
            client.schedule("every", "test.effect", {"effects": effects}, cron="* * * * * *")
            wait_for(lambda: len(client.slots("every")) >= 4, 15, "occurrences made ahead")
            ahead = [s.fire_ms for s in client.slots("every") if s.fire_ms > redis_ms(r)]
            client.schedule("every", "test.effect", {"effects": effects},
                            cron="*/7 * * * * *")
            redefined_at = redis_ms(r)
            wait_for(lambda: redis_ms(r) > redefined_at + 4000, 10, "a few seconds")
            read_at = redis_ms(r)
            waiting = client.fires(lonely, since=timedelta(seconds=30))
            every = client.fires("every", since=timedelta(seconds=30))
            text = subprocess.run(
                [*SCHED, "--redis-url", redis_url, "--namespace", ns, "schedules",
                 "explain", "every", "--since", "30s", "--json"], env=app_env,
                capture_output=True, text=True, check=True).stdout
    old = [f for f in waiting.fires if read_at - f.fire_ms > 2100]  # past the objective
    assert len(old) >= 3 and all(f.state is FireState.PENDING and f.reason is Reason.NO_WORKER
                       for f in old)
    withdrawn = [f.fire_ms for f in every.fires if f.reason is Reason.REDEFINED]
    new_cadence = {t for t in ahead if (t // 1000) % 60 % 7 == 0}
    assert withdrawn and set(withdrawn) == set(ahead) - new_cadence
    assert all(f.state is FireState.NOT_RUN for f in every.fires if f.fire_ms in withdrawn)
    listed = json.loads(text)  # read a moment later: its window moved on a little
    assert {f["fire_ms"] for f in listed["fires"] if f["reason"] == "redefined"} == set(withdrawn)
    assert {f["reason"] for f in listed["fires"]} >= {"redefined", None}
    assert all(f["fire_at"].endswith(("Z", "+00:00")) for f in listed["fires"])



def test_queues_held_by_their_rate_or_concurrency_limit(r: redis.Redis, redis_url: str, ns: str,
                                                       app_env: dict[str, str]) -> None:
    """Two queues under one node and worker: one whose rate limit lets one start a minute,
    and one whose concurrency limit of 1 a long run takes. Each schedule's occurrences wait
    past their objective, `paused_by_limit` (not `behind`)."""
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client:
        client.create_namespace()
        client.set_queue_limit("limited", rate="1/m")  # one start a minute
        client.set_queue_limit("narrow", concurrency=1)
        # --grace: the hog's run is released at once when the block ends, not in 10 s
        both = sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry",
                             "--queues", "limited,narrow", "--grace", "0.5",
                             "--log-level", "warning")
        with running(node(redis_url, ns, app_env), both):
            hog = client.submit("test.sleep_then_effect", {"seconds": 30, "effects": effects},
                                queue="narrow")
            wait_for(lambda: client.slots(hog)[0].status.value == "running", 15, "the hog")
            by_rate, by_concurrency = (
                client.submit("test.effect", {"effects": effects}, cron="* * * * * *",
                              queue=queue) for queue in ("limited", "narrow"))
            first = {j: client.get_job(j).fire_ms for j in (by_rate, by_concurrency)}
            wait_for(lambda: redis_ms(r) > max(first.values()) + 7000, 15, "a few occurrences")
            read_at = redis_ms(r)
            rated, narrowed = (client.fires(j, since=at(first[j])).fires
                               for j in (by_rate, by_concurrency))
    # past the objective (with a margin for the client's clock), and not the one start the
    # rate limit let through
    old = [f for f in rated if read_at - f.fire_ms > 3000 and f.state is not FireState.RAN]
    assert len(old) >= 3 and len([f for f in rated if f.state is FireState.RAN]) <= 1 and all(
        f.state is FireState.PENDING and f.reason is Reason.PAUSED_BY_LIMIT for f in old), [
        (f.state, f.reason) for f in rated]
    old = [f for f in narrowed if read_at - f.fire_ms > 3000]
    assert len(old) >= 3 and all(
        f.state is FireState.PENDING and f.reason is Reason.PAUSED_BY_LIMIT for f in old), [
        (f.state, f.reason) for f in narrowed]


def test_the_same_ledger_read_back_from_the_history_store_once_redis_forgot_it(
        r: redis.Redis, redis_url: str, ns: str, app_env: dict[str, str], pg_dsn: str,
        tmp_path: Path) -> None:
    """A real `sched snapshotter` into Postgres beside the node and the worker: occurrences
    that ran, that the catch-up policy dropped while no node ran, and that a redefinition
    withdrew. Once every record of the window has left Redis (the slots, the ledger key),
    `fires` reads the same timeline back from the history store; without the store, none
    of those records is known."""
    grace = ("--misfire-grace", "1", "--lookahead", "1")
    effects = f"{ns}:test:effects"
    subprocess.run([*SCHED, "db", "upgrade", "--postgres-dsn", pg_dsn], env=app_env,
                   check=True, capture_output=True)
    with Client(redis_url, ns) as client:
        client.create_namespace()
        snap = sched_process(redis_url, ns, app_env, "snapshotter", "--postgres-dsn", pg_dsn,
                             "--keep-redis", "--defer", "0", "--settle", "0.1",
                             "--log-level", "warning")
        with running(worker(redis_url, ns, app_env), snap):
            client.schedule("every", "test.effect", {"effects": effects},
                            cron="* * * * * *", catchup="latest")
            with running(node(redis_url, ns, app_env, *grace)):
                wait_for(lambda: sum(s.status.value == "succeeded"
                                     for s in client.slots("every")) >= 3, 15, "first runs")
            time.sleep(6)  # every node down: catch-up drops what it missed
            # the default lookahead: occurrences made ahead, for the redefinition to withdraw
            with running(node(redis_url, ns, app_env, "--misfire-grace", "1")):
                back = redis_ms(r)
                wait_for(lambda: any(s.fire_ms > back + 1000 and s.status.value == "succeeded"
                                     for s in client.slots("every")), 15, "runs after restart")
                wait_for(lambda: sum(s.fire_ms > redis_ms(r) + 500 and s.fire_ms // 1000 % 7
                                     for s in client.slots("every")) >= 1, 10, "made ahead")
                client.schedule("every", "test.effect", {"effects": effects},
                                cron="*/7 * * * * *", catchup="latest")
                wait_for(lambda: redis_ms(r) > back + 5000, 10, "a few seconds more")
                until = redis_ms(r) - 500
                time.sleep(2)  # every run of the window ended
            job_id = client.fires("every").job_id
            first = min(s.fire_ms for s in client.slots(job_id))
            in_redis = client.fires(job_id, since=at(first), until=at(until))
            reasons = {f.reason for f in in_redis.fires}
            assert {Reason.CATCHUP, Reason.REDEFINED, None} <= reasons, reasons
            assert Reason.UNRECORDED not in reasons
            ran = {f.fire_ms for f in in_redis.fires if f.state is FireState.RAN}
            noted = {f.fire_ms for f in in_redis.fires if f.reason is not None}
            store = open_store(pg_dsn)

            def copied() -> bool:
                past = store.ledger(ns, job_id, first, until + 1, 10_000)
                done = {f for f, s in past.slots if s.get("status") == "succeeded"}
                return ran <= done and noted <= {f for f, _ in past.entries} | set(
                    dict(past.slots))
            try:
                wait_for(copied, 20, "the snapshotter's copy")
            finally:
                store.close()
        # Redis forgets the window: its slots, their index, the ledger key.
        gone = [k for k in r.scan_iter(match=f"{ns}:*", count=1000)
                if k.decode().endswith((f"fires:{job_id}", f"runs:{job_id}"))
                or f"slot:{job_id}:" in k.decode()]
        assert gone and r.delete(*gone) == len(gone)
    with Client(redis_url, ns, history=pg_dsn) as client:
        from_store = client.fires(job_id, since=at(first), until=at(until))
    assert from_store.fires == in_redis.fires
    assert from_store.summary == in_redis.summary
    text = subprocess.run(
        [*SCHED, "--redis-url", redis_url, "--namespace", ns, "schedules", "explain", "every",
         "--since", "1h", "--json", "--postgres-dsn", pg_dsn], env=app_env,
        capture_output=True, text=True, check=True).stdout
    listed = [(f["fire_ms"], f["state"], f["reason"]) for f in json.loads(text)["fires"]
              if first <= f["fire_ms"] <= until]
    assert listed == [(f.fire_ms, f.state.value, f.reason and f.reason.value)
                      for f in in_redis.fires]
    with Client(redis_url, ns, history=f"sqlite://{tmp_path / 'empty.sqlite3'}") as client:
        forgot = client.fires(job_id, since=at(first), until=at(until))
    # Without it, only the current cadence's fire times are known, and none has a record.
    assert len(forgot.fires) < len(in_redis.fires)
    assert all(f.reason is Reason.UNRECORDED for f in forgot.fires), forgot.fires


def test_a_run_waiting_to_retry_reads_retrying(r: redis.Redis, redis_url: str, ns: str,
                                               app_env: dict[str, str]) -> None:
    """Each occurrence's first attempt fails and its retry waits a minute: it started (its
    lag is the first attempt's), and reads `retrying`, not `running`."""
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client:
        client.create_namespace()
        with running(node(redis_url, ns, app_env), worker(redis_url, ns, app_env)):
            job_id = client.submit("chaos.flaky", {"fail_first": 99, "effects": effects},
                                   cron="* * * * * *",
                                   retry=RetryPolicy(max_attempts=2, base_s=60, jitter=0))
            first = client.get_job(job_id).fire_ms
            window = range(first, first + 3001, 1000)

            def failed_once() -> bool:
                waiting = {s.fire_ms for s in client.slots(job_id)
                           if s.status.value == "scheduled" and s.attempts}
                return waiting >= set(window)
            wait_for(failed_once, 40, "four failed first attempts")
            page = client.fires(job_id, since=at(first), until=at(first + 3000))
            slots = {s.fire_ms: s for s in client.slots(job_id)}
    assert [f.state for f in page.fires] == [FireState.RETRYING] * 4, page.fires
    for f in page.fires:
        assert f.reason is None and f.start_lag_ms == start_lag_ms(slots[f.fire_ms])
        assert slots[f.fire_ms].status.value == "scheduled"
    assert page.summary.started == 4 and page.summary.not_started == {}
