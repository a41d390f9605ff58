"""A schedule declared with the code, as a user deploys it: `sched scheduler --app` and
`sched worker --app` start, the schedule exists and fires; the next version of the app drops
it, the node restarts, and the schedule is deleted, while one made through the API lives on."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from faults.harness import wait_for

from conftest import SCHED
from scheduler import Client

pytestmark = pytest.mark.slow

APP = '''
import os

import redis

from scheduler import Registry

registry = Registry()
counter = redis.Redis.from_url(os.environ["SCHED_TEST_REDIS_URL_APP"])


@registry.task("ticks.count")
def count(ctx, payload):
    counter.incr(payload["key"])
'''
DECLARED = '''
registry.schedule("every-second", count, {{"key": "{key}"}}, cron="* * * * * *")
'''


def start(tmp_path: Path, redis_url: str, ns: str, env: dict[str, str], *args: str
          ) -> subprocess.Popen[bytes]:
    with (tmp_path / f"{args[0]}.log").open("ab") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [*SCHED, "--redis-url", redis_url, "--namespace", ns, *args, "--app",
             "deployed:registry"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env={**env, "SCHED_TEST_REDIS_URL_APP": redis_url})


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_a_declared_schedule_fires_and_is_deleted_once_the_code_drops_it(
        tmp_path: Path, r: redis.Redis, redis_url: str, ns: str,
        app_env: dict[str, str]) -> None:
    key = f"{ns}:ticks"
    app = tmp_path / "deployed.py"
    app.write_text(APP + DECLARED.format(key=key))
    with Client(redis_url, ns) as client:
        api = client.schedule("made-by-api", "ticks.count", {"key": key},
                              cron="0 0 1 1 *")
        node = start(tmp_path, redis_url, ns, app_env, "scheduler")
        worker = start(tmp_path, redis_url, ns, app_env, "worker")
        try:
            wait_for(lambda: int(r.get(key) or 0) >= 2, timeout=30,
                     what="the declared schedule firing twice")
            assert client.get_job("every-second").cron == "* * * * * *"
            stop(node)
            logs = (tmp_path / "scheduler.log").read_text() + \
                (tmp_path / "worker.log").read_text()
            # The two started at once: one created it, the other found it as declared.
            assert "1 declared schedules: 1 created, 0 updated, 0 removed" in logs
            assert "1 declared schedules: 0 created, 0 updated, 0 removed" in logs

            app.write_text(APP + "# the next version: no schedule declared\n")
            node = start(tmp_path, redis_url, ns, app_env, "scheduler")
            wait_for(lambda: client.get_job("every-second").deleted_ms is not None,
                     timeout=30, what="the dropped schedule deleted")
            time.sleep(1.5)  # a run started before the deletion may still commit
            fired = int(r.get(key) or 0)
            time.sleep(2.5)
            assert int(r.get(key) or 0) == fired, "the deleted schedule still fires"
            assert client.next_fires("every-second") == []
            assert client.get_job(api).deleted_ms is None
            assert client.next_fires(api, 1)
        finally:
            stop(node)
            stop(worker)
    assert "0 declared schedules: 0 created, 0 updated, 1 removed (every-second)" in \
        (tmp_path / "scheduler.log").read_text()


def test_sched_dev_applies_the_apps_declared_schedules(
        tmp_path: Path, r: redis.Redis, redis_url: str, ns: str,
        app_env: dict[str, str]) -> None:
    key = f"{ns}:ticks"
    (tmp_path / "deployed.py").write_text(APP + DECLARED.format(key=key))
    dev = start(tmp_path, redis_url, ns, app_env, "dev", "--no-web", "--no-history",
                "--metrics-port", "0")
    try:
        wait_for(lambda: int(r.get(key) or 0) >= 2, timeout=30,
                 what="the declared schedule firing twice under sched dev")
    finally:
        stop(dev)
    assert "1 declared schedules: 1 created, 0 updated, 0 removed" in \
        (tmp_path / "dev.log").read_text()
