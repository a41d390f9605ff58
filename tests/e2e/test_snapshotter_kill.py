"""A real `sched snapshotter` process is SIGKILLed in the middle of its work and started
again: the store ends with every slot, job and attempt exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
import redis

from helpers import pending, run_until
from scheduler import Client, Context, Registry
from scheduler.history.store import open_store

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them

JOBS = 4000


def _counts(dsn: str, ns: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        out: dict[str, Any] = {}
        for table, key in (("jobs", "job_id"), ("slots", "job_id, fire_ms"),
                           ("attempts", "job_id, fire_ms, number")):
            out[table] = conn.execute(
                f"SELECT count(*), count(DISTINCT ({key})) FROM {table} WHERE namespace = %s",
                (ns,)).fetchone()
        out["statuses"] = dict(conn.execute(  # type: ignore[arg-type]
            "SELECT status, count(*) FROM slots WHERE namespace = %s GROUP BY status",
            (ns,)).fetchall())
    return out


def _start(redis_url: str, ns: str, dsn: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", "--redis-url", redis_url, "--namespace", ns,
         "snapshotter", "--postgres-dsn", dsn, "--read-count", "2", "--claim-idle", "1",
         "--keep-redis", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_sigkill_mid_batch_then_restart_loses_and_duplicates_nothing(
        redis_url: str, ns: str, r: redis.Redis, pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    store.upgrade()
    store.close()
    registry = Registry()
    ran: Counter[str] = Counter()

    @registry.task("n")
    async def noop(ctx: Context, payload: Any) -> None:
        ran[ctx.slot_id] += 1

    with Client(redis_url, ns, shards=4) as client:
        for i in range(0, JOBS, 5):  # small submit batches: many events entries
            client.submit_many([{"task": "n", "payload": j} for j in range(i, i + 5)])
    asyncio.run(run_until(redis_url, ns, registry, lambda: len(ran) == JOBS))

    # Kill while it holds delivered, unacked entries (mid-batch). A kill can land between
    # two batches; then start it again and kill again.
    for _ in range(5):
        first = _start(redis_url, ns, pg_dsn)
        try:
            _wait(lambda: pending(r, ns) > 0 or _counts(pg_dsn, ns)["slots"][0] == JOBS,
                  30, "a batch in flight")
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=10)
        if pending(r, ns) > 0:
            break
    at_kill = _counts(pg_dsn, ns)
    assert at_kill["slots"][0] < JOBS, "the snapshotter finished before it was killed"
    assert pending(r, ns) > 0  # it died holding delivered, unacked entries

    second = _start(redis_url, ns, pg_dsn)
    try:
        _wait(lambda: _counts(pg_dsn, ns)["statuses"].get("succeeded") == JOBS
              and pending(r, ns) == 0, 60, "the restarted snapshotter to catch up")
    finally:
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=20)
    assert second.returncode == 0, err.decode()[-2000:]
    final = _counts(pg_dsn, ns)
    assert final["jobs"] == (JOBS, JOBS)
    assert final["slots"] == (JOBS, JOBS)
    assert final["attempts"] == (JOBS, JOBS)
    assert final["statuses"] == {"succeeded": JOBS}
