"""A limit applies to every claim made after the call that set it returns (the rule:
scheduler/core/limits.py). Worker processes are started first and left idle, the limit is set
(with Client, AsyncClient or `sched queues limit`), then jobs are submitted at once on the
real clock. What ran when is the handlers' own record, a file outside the Redis under test:
a limit read by the workers a second later would let the first claims run past it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from helpers import running, sched, sched_process
from scheduler import AsyncClient, Client, JobSpec
from scheduler.core import events
from scheduler.core.keys import Keys

pytestmark = pytest.mark.slow

WORKERS = 2
QUEUES = "tenants,wide,rated"
SETTERS = ["client", "async", "cli"]
JOB_S = 0.4  # each run's length: long enough that runs started together overlap


@contextmanager
def idle_workers(r: Any, redis_url: str, ns: str, app_env: dict[str, str]) -> Iterator[None]:
    """WORKERS worker processes of tests/app_tasks.py, registered and past their first read
    of the limits (none) before anything is set or submitted."""
    with Client(redis_url, ns) as client:
        client.create_namespace()
    procs = [sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry",
                           "--queues", QUEUES, "--concurrency", "20") for _ in range(WORKERS)]
    with running(*procs):
        deadline = time.monotonic() + 30
        while r.zcard(Keys(ns).workers) < WORKERS:
            assert time.monotonic() < deadline, "the workers did not start"
            assert all(p.poll() is None for p in procs), "a worker exited"
            time.sleep(0.05)
        time.sleep(1.0)  # their claim loops are going, and hold no limit
        yield


def set_limit(how: str, capsys: pytest.CaptureFixture[str], redis_url: str, ns: str,
              queue: str, **limit: Any) -> None:
    """Set (no limit given: clear) the queue's limit the way `how` names."""
    if how == "client":
        with Client(redis_url, ns) as client:
            client.set_queue_limit(queue, **limit)
    elif how == "async":
        async def main() -> None:
            async with AsyncClient(redis_url, ns) as client:
                await client.set_queue_limit(queue, **limit)
        asyncio.run(main())
    else:
        args = [f"--{name.replace('_', '-')}={value}" for name, value in limit.items()]
        code, _, err = sched(capsys, redis_url, ns, "queues", "limit", queue,
                             *(args or ["--clear"]))
        assert code == 0, err


def submit(redis_url: str, ns: str, record: Path, queue: str, n: int, seconds: float = JOB_S,
           key: str | None = None) -> None:
    with Client(redis_url, ns) as client:
        client.submit_many([JobSpec(task="test.span_to_file", queue=queue, concurrency_key=key,
                                    payload={"file": str(record), "seconds": seconds})
                            for _ in range(n)])


def spans(record: Path, n: int, timeout: float = 30) -> list[tuple[float, float]]:
    """The (start, end) of each of n runs, once all n have ended."""
    deadline = time.monotonic() + timeout
    while True:
        lines = record.read_text().splitlines() if record.exists() else []
        times: dict[str, dict[str, float]] = {}
        for line in lines:
            slot, what, at = line.split()
            times.setdefault(slot, {})[what] = float(at)
        if sum(1 for t in times.values() if "end" in t) >= n:
            assert len(times) == n, f"{len(times)} runs, not {n}"
            return sorted((t["start"], t["end"]) for t in times.values())
        assert time.monotonic() < deadline, f"{len(times)} of {n} runs began in {timeout} s"
        time.sleep(0.05)


def redispatched(r: Any, ns: str) -> int:
    """Slots handed back to their streams (requeue.lua's "redispatched" records)."""
    keys = Keys(ns)
    return sum(len(events.records(fields))
               for shard in range(int(r.hget(keys.meta, "shards")))
               for _, fields in r.xrange(keys.events(shard))
               if fields[b"type"] == b"redispatched")


def most_at_once(runs: list[tuple[float, float]]) -> int:
    # An end and a start at the same instant: the end first (the permit went back).
    edges = sorted([(s, 1) for s, _ in runs] + [(e, -1) for _, e in runs])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("how", SETTERS)
def test_a_per_key_limit_holds_from_the_first_claim_after_the_call(
        how: str, r: Any, redis_url: str, ns: str, app_env: dict[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """per_key_concurrency=2 set on running workers, then 8 jobs of one key at once: never
    more than 2 running; cleared, the next 8 run side by side."""
    with idle_workers(r, redis_url, ns, app_env):
        set_limit(how, capsys, redis_url, ns, "tenants", per_key_concurrency=2)
        submit(redis_url, ns, tmp_path / "limited", "tenants", 8, key="acme")
        limited = most_at_once(spans(tmp_path / "limited", 8))
        set_limit(how, capsys, redis_url, ns, "tenants")
        submit(redis_url, ns, tmp_path / "cleared", "tenants", 8, key="acme")
        cleared = most_at_once(spans(tmp_path / "cleared", 8))
    assert limited == 2, limited
    assert cleared >= 4, cleared


@pytest.mark.parametrize("how", SETTERS)
def test_a_queue_wide_limit_holds_from_the_first_claim_after_the_call(
        how: str, r: Any, redis_url: str, ns: str, app_env: dict[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """concurrency=2 set on running workers that read the queue without permits, then 8 jobs
    at once: never more than 2 running; cleared, the next 8 run side by side. A worker whose
    claim is refused for the new limit reads the limits at once: it hands the queue's
    entries back a few times at most, not in a loop until its next refresh."""
    with idle_workers(r, redis_url, ns, app_env):
        set_limit(how, capsys, redis_url, ns, "wide", concurrency=2)
        submit(redis_url, ns, tmp_path / "limited", "wide", 8)
        limited = most_at_once(spans(tmp_path / "limited", 8))
        handed_back = redispatched(r, ns)
        set_limit(how, capsys, redis_url, ns, "wide")
        submit(redis_url, ns, tmp_path / "cleared", "wide", 8)
        cleared = most_at_once(spans(tmp_path / "cleared", 8))
    print(f"most at once {limited}, then {cleared} cleared; {handed_back} handed back")
    assert limited == 2, limited
    assert cleared >= 4, cleared
    # Each worker hands back what it read before it saw the limit (two reads' worth at
    # most), and the limited loop what waited past HOLD_S without a permit.
    assert handed_back <= 8 * 8, handed_back


def test_a_rate_holds_from_the_first_claim_after_the_call(
        r: Any, redis_url: str, ns: str, app_env: dict[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """rate=2/s set on running workers, then 6 jobs at once: one start now, then one every
    half second (a bucket of one token); cleared, the next 6 start together."""
    with idle_workers(r, redis_url, ns, app_env):
        set_limit("cli", capsys, redis_url, ns, "rated", rate="2/s")
        submit(redis_url, ns, tmp_path / "limited", "rated", 6, seconds=0)
        limited = [s for s, _ in spans(tmp_path / "limited", 6)]
        set_limit("client", capsys, redis_url, ns, "rated")
        submit(redis_url, ns, tmp_path / "cleared", "rated", 6, seconds=0)
        cleared = [s for s, _ in spans(tmp_path / "cleared", 6)]
    # At 2/s the sixth start is 2.5 s after the first; 2 s leaves room for a token's rounding.
    assert limited[-1] - limited[0] >= 2.0, [round(s - limited[0], 2) for s in limited]
    assert sum(1 for s in limited if s < limited[0] + 1.0) <= 3, limited
    assert cleared[-1] - cleared[0] < 1.0, [round(s - cleared[0], 2) for s in cleared]
