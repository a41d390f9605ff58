"""The outbox end to end, as an application runs it: a real `sched worker` and real
`sched outbox relay` processes, jobs submitted with `scheduler.outbox.submit` in Postgres
transactions that commit or roll back. Ground truth is what the test's transactions did: the
ids outbox.submit returned in the transactions that committed are the accepted jobs (the
checker's rules then find a job that never ran, ran twice, or a slot of a job no committed
transaction submitted: a rolled-back one, or one under an id the relay made up).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from scheduler import outbox

from .harness import Processes, RedisServer, outbox_schema, processes, redis_server, wait_for
from .scenario import Scenario
from .truth import JobTruth, wall_ms
from .workload import FAST

pytestmark = pytest.mark.slow


@pytest.fixture
def box() -> Iterator[tuple[str, str]]:
    with outbox_schema() as found:
        yield found


def commit_jobs(conn: psycopg.Connection[Any], sc: Scenario, schema: str, n: int, *,
                commit: bool = True) -> tuple[list[str], float]:
    """One transaction: an order row and n jobs; (ids, wall time the commit returned). Only a
    committed transaction's ids are accepted."""
    lo = wall_ms()
    with conn.cursor() as cur:
        ids = outbox.submit_many(conn, [{"task": "chaos.noop", "payload": {"effects": sc.effects},
                                         "retry": FAST}] * n, schema=schema)
        cur.execute(f'INSERT INTO "{schema}".orders (job_id) VALUES (%s)', (ids[0],))
    if commit:
        conn.commit()
        sc.truth.accept(ids, [JobTruth(kind="noop", submitted_ms=(lo, wall_ms()))] * n)
    else:
        conn.rollback()
    return ids, time.time()


def outbox_rows(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".outbox').fetchone()
    return int(row[0]) if row else 0


def test_committed_jobs_run_once_and_rolled_back_ones_never(
        scenario: Scenario, procs: Processes, box: tuple[str, str]) -> None:
    """1,000 transactions commit after outbox.submit, 1,000 roll back, interleaved: each
    committed job runs exactly once, no rolled-back job ever exists; the commit-to-start
    latency is printed (p99) and held to a generous bound only."""
    dsn, schema = box
    scenario.client.create_namespace()
    procs.worker("--concurrency", "100")
    procs.relay(dsn, schema)
    committed: dict[str, float] = {}
    rolled_back: list[str] = []
    with psycopg.connect(dsn) as conn:
        # Measured from a running worker and relay: one job through both first.
        commit_jobs(conn, scenario, schema, 1)
        wait_for(lambda: scenario.store.effect_count() == 1, 20, "the first job to run")
        for i in range(2000):
            ids, at = commit_jobs(conn, scenario, schema, 1, commit=i % 2 == 0)
            if i % 2 == 0:
                committed[ids[0]] = at
            else:
                rolled_back += ids
            if i % 50 == 0:
                time.sleep(0.02)  # an application's pace, not a bulk load
    wait_for(lambda: outbox_rows(dsn, schema) == 0, 30, "the outbox to drain")
    scenario.settle(procs, 60)
    report = scenario.check(procs)
    assert len(report.observed.slots) == 1001
    pipe = scenario.client.redis.pipeline(transaction=False)
    for job_id in rolled_back:
        pipe.exists(scenario.client._core.job_key(job_id))
    assert sum(pipe.execute()) == 0, "a rolled-back transaction's job is in Redis"
    starts = scenario.first_starts()
    lags = sorted(starts[f"{slot.job_id}:{slot.fire_ms}"] - committed[slot.job_id]
                  for slot in report.observed.slots.values() if slot.job_id in committed)
    p50, p99 = lags[len(lags) // 2], lags[int(len(lags) * 0.99)]
    print(f"commit to handler start over {len(lags)} jobs: p50 {p50 * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms")
    assert p99 < 2.0, lags[-20:]


def test_relays_sigkilled_every_second_lose_and_duplicate_nothing(
        scenario: Scenario, procs: Processes, box: tuple[str, str]) -> None:
    """Two relays share the outbox while rows commit at about 1,000 a second for 6 s; one
    of them is SIGKILLed every second (and started again): 0 lost, 0 duplicated."""
    dsn, schema = box
    scenario.client.create_namespace()
    procs.worker("--concurrency", "200")
    relays = [procs.relay(dsn, schema), procs.relay(dsn, schema)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with psycopg.connect(dsn) as conn:
                while not stop.is_set():
                    t0 = time.monotonic()
                    commit_jobs(conn, scenario, schema, 10)
                    time.sleep(max(0.0, 0.01 - (time.monotonic() - t0)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        for k in range(6):
            time.sleep(1.0)
            victim = relays[k % 2]
            procs.kill(victim)
            relays[k % 2] = procs.relay(dsn, schema)
    finally:
        stop.set()
        producer.join()
    assert not errors, errors
    accepted = len(scenario.truth.jobs)
    print(f"{accepted} jobs committed in 6 s under 6 relay kills")
    assert accepted >= 2000
    wait_for(lambda: outbox_rows(dsn, schema) == 0, 30, "the outbox to drain")
    scenario.settle(procs, 60)
    report = scenario.check(procs)
    assert len(report.observed.slots) == accepted


def test_rows_wait_while_redis_is_stopped_then_all_run(redis_url: str, ns: str,
                                                       box: tuple[str, str]) -> None:
    """Redis (AOF) stopped for 10 s while transactions commit: the rows wait in the outbox
    (none taken, none lost), the relay logs the outage once, and every job runs once after
    Redis is back."""
    dsn, schema = box
    with redis_server(aof=True) as server:
        sc = Scenario(server.url, redis_url, ns)
        try:
            with processes(server.url, ns, redis_url, sc.truth) as procs:
                sc.client.create_namespace()
                # A node, as a deployment runs one: a claim Redis ran just before it stopped,
                # whose reply the outage cut, is the reclaimer's once its lease ran out.
                procs.node()
                procs.worker("--concurrency", "50")
                relay = procs.relay(dsn, schema)
                with psycopg.connect(dsn) as conn:
                    for _ in range(20):
                        commit_jobs(conn, sc, schema, 5)
                    wait_for(lambda: outbox_rows(dsn, schema) == 0, 20, "the first rows")
                    with procs.redis_outage("redis stopped"):
                        stopped(server, sc, conn, schema, dsn)
                        server.start()
                wait_for(lambda: outbox_rows(dsn, schema) == 0, 30, "the outbox to drain")
                sc.settle(procs, 60)
                report = sc.check(procs)
                assert len(report.observed.slots) == 100 + 300
                assert relay.poll() is None, "the relay died of the outage"
                log = "".join(f.read_text() for f in procs.logs.glob("*-outbox.log"))
                assert log.count("Redis failing") == 1, log
        finally:
            sc.close()


def stopped(server: RedisServer, sc: Scenario, conn: psycopg.Connection[Any], schema: str,
            dsn: str) -> None:
    """Ten seconds without Redis, rows committed throughout: all of them still wait."""
    server.kill()
    until = time.monotonic() + 10
    # Until the rows are all committed, however long a loaded machine takes, and ten seconds.
    while time.monotonic() < until or len(sc.truth.jobs) < 400:
        if len(sc.truth.jobs) < 400:
            commit_jobs(conn, sc, schema, 10)
        time.sleep(0.3)
    assert outbox_rows(dsn, schema) == 300


def test_a_scheduler_node_can_be_the_relay(scenario: Scenario, procs: Processes,
                                           box: tuple[str, str]) -> None:
    """`sched scheduler --outbox-dsn`: the node relays the outbox too, and stops cleanly."""
    dsn, schema = box
    scenario.client.create_namespace()
    procs.worker("--concurrency", "50")
    node = procs.node("--outbox-dsn", dsn, "--outbox-schema", schema)
    with psycopg.connect(dsn) as conn:
        for _ in range(20):
            commit_jobs(conn, scenario, schema, 5)
        commit_jobs(conn, scenario, schema, 5, commit=False)
    wait_for(lambda: outbox_rows(dsn, schema) == 0, 20, "the outbox to drain")
    scenario.settle(procs, 30)
    report = scenario.check(procs)
    assert len(report.observed.slots) == 100
    node.terminate()
    assert node.wait(timeout=15) == 0


def test_poison_rows_are_kept_aside_and_the_relay_process_runs_every_good_job_once(
        scenario: Scenario, procs: Processes, box: tuple[str, str]) -> None:
    """1,000 good rows and a poison row of every kind (tests/poison_rows.py) interleaved,
    written past outbox.submit as another service would, over 20 commits while a real
    `sched outbox relay`, worker and scheduler node run: every good job runs exactly once
    (the handlers' own record, outside the Redis under test), every poison row is in
    outbox_rejected with its reason, and the relay never exits nor fails a pass."""
    from poison_rows import POISON

    from scheduler.core.jobspec import job_ids
    from scheduler.outbox.writer import rows_of

    dsn, schema = box
    scenario.client.create_namespace()
    procs.worker("--concurrency", "100")
    procs.node()
    relay = procs.relay(dsn, schema)
    poison_ids = [given or fresh for (_, given, _), fresh in zip(
        POISON, job_ids.take(len(POISON)), strict=True)]
    poison = [(job_id, spec) for job_id, (_, _, spec) in zip(poison_ids, POISON, strict=True)]
    commits = 20
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        for k in range(commits):
            lo = wall_ms()
            ids, specs = rows_of([{"task": "chaos.noop", "payload": {"effects": scenario.effects},
                                   "retry": FAST}] * (1000 // commits))
            rows = list(zip(ids, specs, strict=True))
            for n, bad in enumerate(poison[k::commits]):  # spread through the commit's rows
                rows.insert(5 + 13 * n, bad)
            cur.executemany(f'INSERT INTO "{schema}".outbox (job_id, spec) VALUES (%s, %s)',
                            rows)
            conn.commit()
            scenario.truth.accept(ids, [JobTruth(kind="noop", submitted_ms=(lo, wall_ms()))]
                                  * len(ids))
    wait_for(lambda: outbox_rows(dsn, schema) == 0, 60, "the outbox to drain")
    scenario.settle(procs, 60)
    report = scenario.check(procs)
    assert len(report.observed.slots) == 1000
    with psycopg.connect(dsn) as conn:
        refused = dict(conn.execute(f'SELECT job_id, error FROM "{schema}".outbox_rejected')
                       .fetchall())
    assert sorted(refused) == sorted(poison_ids)
    assert all(refused[j] and "\n" not in refused[j] for j in poison_ids), refused
    assert relay.poll() is None, "the relay exited"
    log = "".join(f.read_text() for f in procs.logs.glob("*-outbox.log"))
    assert "Traceback" not in log and "failed" not in log, log
    assert "refused as jobs, moved to outbox_rejected" in log
