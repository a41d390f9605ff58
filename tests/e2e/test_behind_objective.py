"""Schedules behind their objective, with a real `sched scheduler` on the real clock: a
schedule whose queue no worker reads is named by `sched status` (and makes it unhealthy)
and the console's overview within a few seconds; once a worker reads its queue and its
on-time share over the node's window (5 s here) is back at the target, it leaves the list."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest

from conftest import SCHED
from helpers import http_get, running, sched_process, serve_console
from scheduler import Client, FireState, Reason

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_status_names_a_schedule_nobody_reads_until_it_catches_up(
        redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    effects = f"{ns}:test:effects"

    def status() -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, "status"],
                              env=app_env, capture_output=True, text=True, timeout=60)

    def workers(*queues: str) -> subprocess.Popen[bytes]:
        return sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry",
                             "--queues", ",".join(queues), "--log-level", "warning")

    with Client(redis_url, ns) as client:
        client.create_namespace()
        node = sched_process(redis_url, ns, app_env, "scheduler", "--log-level", "warning",
                             "--objective-window", "5")
        with running(node, workers("default")):
            client.schedule("nightly-report", "test.effect", {"effects": effects},
                            cron="0 3 * * *")  # not due: never behind
            client.schedule("lonely", "test.effect", {"effects": effects},
                            cron="* * * * * *", queue="nobody-reads")
            wait_for(lambda: client.status().schedules_behind >= 1, 20, "it to fall behind")
            out = status()
            assert out.returncode == 3, out.stdout
            assert "1 schedule(s) behind their objective: lonely" in out.stdout
            assert "nightly-report" not in out.stdout.split("schedules:")[1]
            console, base = serve_console(redis_url, ns)
            with running(console):
                code, body = http_get(f"{base}/partials/health")
            assert code == 200 and 'id="behind"' in body and "/jobs/lonely" in body
            assert "/jobs/nightly-report" not in body
            page = client.fires("lonely")
            assert any(f.state is FireState.PENDING and f.reason is Reason.NO_WORKER
                       for f in page.fires)

            with running(workers("nobody-reads")):
                wait_for(lambda: client.status().schedules_behind == 0, 40, "it to catch up")
                out = status()
    assert out.returncode == 0, out.stdout
    assert "0 behind their objective" in out.stdout and "healthy" in out.stdout
