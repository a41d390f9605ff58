"""`sched worker --processes N` as users run it: SIGHUP replaces the children one by one while
jobs keep coming, and a child that cannot start stops the supervisor with one clear error."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from faults.harness import children_of, pid_alive, wait_for

from conftest import SCHED
from scheduler import Client

pytestmark = pytest.mark.slow


def supervisor(redis_url: str, ns: str, env: dict[str, str], *args: str
               ) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker", "--processes", "2",
         "--log-level", "warning", *args],
        env={**env, "SCHED_TEST_REDIS_URL_APP": redis_url}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)


def test_sighup_replaces_the_children_one_by_one_and_drops_no_job(
        r: redis.Redis, redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    effects = f"{ns}:test:effects"
    job = {"task": "test.sleep_then_effect", "payload": {"seconds": 0.2, "effects": effects}}
    with Client(redis_url, ns) as client:
        ids = client.submit_many([job] * 50)  # the namespace exists before the workers start
        sup = supervisor(redis_url, ns, app_env, "--app", "app_tasks:registry",
                         "--concurrency", "20", "--grace", "10")
        try:
            wait_for(lambda: len(children_of(sup.pid)) == 2, 30, "two children")
            old = children_of(sup.pid)
            wait_for(lambda: r.hlen(effects) >= 10, 30, "the first runs")
            stop = threading.Event()

            def keep_submitting() -> None:
                with Client(redis_url, ns) as c:
                    while not stop.is_set():
                        ids.extend(c.submit_many([job] * 10))
                        time.sleep(0.1)

            feeder = threading.Thread(target=keep_submitting)
            feeder.start()
            sup.send_signal(signal.SIGHUP)
            try:
                wait_for(lambda: (kids := children_of(sup.pid)).isdisjoint(old)
                         and len(kids) == 2, 60, "both children replaced")
            finally:
                stop.set()
                feeder.join()
            assert sup.poll() is None
            wait_for(lambda: r.hlen(effects) == len(ids), 60, "every job's run")
            wait_for(lambda: all(s.status.value == "succeeded"
                                 for i in ids for s in client.slots(i)), 20, "the commits")
        finally:
            sup.send_signal(signal.SIGTERM)
            out, _ = sup.communicate(timeout=30)
    assert sup.returncode == 0, out.decode()
    assert Counter(int(v) for v in r.hvals(effects)) == {1: len(ids)}, "each run once"
    assert len(ids) > 50  # jobs came during the rolling restart


def test_a_sighup_onto_a_broken_deploy_keeps_the_running_children(
        tmp_path: Path, redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    app = tmp_path / "deployed.py"
    app.write_text("from app_tasks import registry  # noqa: F401\n")
    log = tmp_path / "supervisor.log"
    client = Client(redis_url, ns)
    client.create_namespace()
    with open(log, "wb") as out:
        sup = subprocess.Popen(
            [*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker", "--processes", "2",
             "--app", "deployed:registry", "--log-level", "warning"],
            cwd=tmp_path, env={**app_env, "SCHED_TEST_REDIS_URL_APP": redis_url}, stdout=out,
            stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(children_of(sup.pid)) == 2, 30, "two children")
        kids = children_of(sup.pid)
        # Up, their code imported, before the deploy breaks it.
        wait_for(lambda: len(client.workers()) == 2, 30, "both children registered")
        app.write_text("import no_such_module_deployed  # noqa: F401\n")
        # Python takes a cached .pyc for its source while the size and the mtime's whole
        # second match: both versions are 45 bytes, and a quick start writes them within
        # one second, so the replacement would run the old code and succeed.
        shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
        sup.send_signal(signal.SIGHUP)
        wait_for(lambda: "the old children keep running" in log.read_text(), 30,
                 "the failed replacement")
        assert "cannot import 'deployed'" in log.read_text()
        assert sup.poll() is None and children_of(sup.pid) == kids
    finally:
        client.close()
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=30)
    assert sup.returncode == 0, log.read_text()


def test_a_child_that_cannot_start_stops_the_supervisor_with_one_error(
        redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker", "--processes", "2",
         "--app", "no_such_module_here:registry", "--log-level", "warning"],
        env=app_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert time.monotonic() - started < 40
    lines = done.stderr.strip().splitlines()
    # The children's own error, then the supervisor's, once, last; no traceback.
    assert "cannot import 'no_such_module_here'" in lines[0]
    assert lines[-1].startswith("error: worker child ") and "5 times in a row" in lines[-1]
    assert sum("in a row before it was up" in line for line in lines) == 1
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_the_children_stop_when_their_supervisor_is_killed(
        redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    client = Client(redis_url, ns)
    client.create_namespace()
    sup = supervisor(redis_url, ns, app_env, "--app", "app_tasks:registry", "--grace", "1")
    kids: set[int] = set()
    try:
        wait_for(lambda: len(children_of(sup.pid)) == 2, 30, "two children")
        kids = children_of(sup.pid)
        # Both up and working (a child that starts after its supervisor died stops at once).
        wait_for(lambda: len(client.workers()) == 2, 30, "both children registered")
        sup.kill()
        sup.wait()
        wait_for(lambda: not any(pid_alive(k) for k in kids), 10, "the orphans' exit")
    finally:
        sup.kill()
        sup.communicate()
        client.close()
        for k in kids:  # the orphans of a failure
            if pid_alive(k):
                os.kill(k, signal.SIGKILL)


def test_each_child_gets_its_share_of_the_cores_for_its_process_pool(
        redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    """Without --process-pool, N children with one pool child per core each would outnumber
    the cores N times: each gets cores / N (at least one)."""
    from scheduler.worker.pool import cores

    client = Client(redis_url, ns)
    client.create_namespace()
    sup = supervisor(redis_url, ns, app_env, "--app", "pool_tasks:registry", "--grace", "1")
    try:
        wait_for(lambda: len(children_of(sup.pid)) == 2, 30, "two children")
        kids = children_of(sup.pid)
        share = max(1, cores() // 2)
        wait_for(lambda: all(len(children_of(k)) == share for k in kids), 30,
                 f"{share} pool child(ren) under each worker child")
        time.sleep(0.5)  # and no more come
        assert [len(children_of(k)) for k in kids] == [share, share]
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.communicate(timeout=30)
        client.close()
