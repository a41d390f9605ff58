"""The rest of what a new user tripped over in the CLI, each checked as the user met it."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from conftest import SCHED
from helpers import make_dead, run_until, sched
from scheduler import Client, Context, Registry, RetryPolicy, SlotStatus
from scheduler.observe.status import _worker


def test_timeout_takes_a_duration_like_delay(capsys: pytest.CaptureFixture[str],
                                             redis_url: str, ns: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, "submit", "demo.hello", "--timeout", "5m",
                           "--delay", "90s")
    assert code == 0, err
    with Client(redis_url, ns) as client:
        assert client.get_job(out.strip()).timeout_s == 300


def test_there_is_a_version() -> None:
    done = subprocess.run([*SCHED, "--version"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.startswith("sched, version ")


def test_attempts_print_every_field_as_slots_do(capsys: pytest.CaptureFixture[str],
                                                redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        [job_id] = make_dead(client, redis_url, ns)
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "show", job_id, "--json")
    [slot] = json.loads(out)["slots"]
    [attempt] = slot["attempts"]
    # one policy: every field, null when unknown, in attempts as in slots
    assert {"number", "worker", "token", "claimed_ms", "lease_until_ms", "started_ms",
            "finished_ms", "outcome", "error"} <= set(attempt)
    assert "lease_until_ms" in slot and slot["lease_until_ms"] is None


def test_status_counts_failures_beside_successes(capsys: pytest.CaptureFixture[str],
                                                 redis_url: str, ns: str) -> None:
    registry = Registry()

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        if payload:
            raise ValueError("no")

    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "t", "payload": i % 2,
                                   "retry": RetryPolicy(max_attempts=1)} for i in range(4)])

        shown: list[str] = []

        def counted() -> bool:  # asked while the worker runs: `sched workers` shows it
            if sum(w.failed for w in client.workers()) < 2:
                return False
            shown.append(sched(capsys, redis_url, ns, "workers")[1])
            return True

        asyncio.run(run_until(redis_url, ns, registry, lambda: all(
            client.slots(j)[0].status in (SlotStatus.SUCCEEDED, SlotStatus.DEAD)
            for j in ids) and counted(), lease_s=3))
    header = next(line for line in shown[0].splitlines() if line.startswith("WORKER"))
    assert "SUCCEEDED" in header and "FAILED " in header and "DONE" not in header


def test_a_worker_that_missed_its_heartbeats_is_gone_within_half_its_lease() -> None:
    raw = {b"seen_ms": b"0", b"lease_ms": b"30000", b"host": b"h"}
    assert _worker("w", 0, 16_000, raw).alive  # a heartbeat (every 10 s) late: alive
    assert not _worker("w", 0, 17_500, raw).alive  # 1.5 intervals + 2 s: gone, not at 30 s
