"""A real `sched worker` process sent SIGTERM mid-run loses nothing."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter

import pytest
import redis

from conftest import SCHED
from scheduler import Client

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them

N = 300


def start_worker(redis_url: str, ns: str, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    env = {**env, "SCHED_TEST_REDIS_URL_APP": redis_url}
    return subprocess.Popen(
        [*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker", "--app",
         "app_tasks:registry", "--log-level", "warning", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize(("grace", "expect_released"), [("30", False), ("0.1", True)])
def test_sigterm_mid_run_loses_no_job(r: redis.Redis, redis_url: str, ns: str,
                                      app_env: dict[str, str], grace: str,
                                      expect_released: bool) -> None:
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "test.sleep_then_effect",
                                   "payload": {"seconds": 0.5, "effects": effects}}
                                  for _ in range(N)])
        first = start_worker(redis_url, ns, app_env, "--concurrency", "50", "--grace", grace)
        try:
            wait_for(lambda: r.hlen(effects) >= 60, 30, "the first runs")
            # Effects land as a claim's runs end, and the next claim's runs start then:
            # signalled a little later, runs are surely in flight with more than 0.1 s to go
            # (signalled at once, the runs of another pipeline's claim could all end within
            # the short grace, and nothing would be released).
            time.sleep(0.15)
            first.send_signal(signal.SIGTERM)
            out, _ = first.communicate(timeout=60)
        finally:
            first.kill()
        assert first.returncode == 0, out.decode()
        done_by_first = r.hlen(effects)
        assert 0 < done_by_first < N

        second = start_worker(redis_url, ns, app_env, "--concurrency", "100")
        try:
            wait_for(lambda: r.hlen(effects) == N, 60, "all runs")
            wait_for(lambda: all(s.status.value == "succeeded"
                                 for i in ids for s in client.slots(i)), 10, "commits")
        finally:
            second.send_signal(signal.SIGTERM)
            second.communicate(timeout=30)
        slots = [s for i in ids for s in client.slots(i)]

    counts = Counter(int(v) for v in r.hvals(effects))
    assert counts == {1: N}, "every effect exactly once"
    released = [s for s in slots if any(a.outcome == "released" for a in s.attempts)]
    assert bool(released) is expect_released
    for s in released:
        assert s.failures == 0 and [a.outcome for a in s.attempts][-1] == "succeeded"
