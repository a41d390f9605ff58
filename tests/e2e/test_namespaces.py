"""A namespace's life with real `sched worker` and `sched scheduler` processes: started before
the namespace exists they wait for it where `sched status` and `sched workers` show them,
`sched namespace create` creates it and they start without a restart; a queue that holds
nothing leaves `sched status` once idle."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from typing import Any

import pytest
import redis
from test_scheduler_nodes import scheduler_node, wait_for, worker

from conftest import SCHED
from helpers import running, sched_process, serve_console, statuses
from scheduler import Client
from scheduler.core.keys import Keys

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them


def sched(redis_url: str, ns: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, *args],
                          capture_output=True, text=True, env=env, timeout=60)


def status_json(redis_url: str, ns: str, env: dict[str, str]) -> dict[str, Any]:
    out = sched(redis_url, ns, env, "status", "--json")
    assert out.stdout, out.stderr
    return dict(json.loads(out.stdout))


def test_processes_started_before_the_namespace_show_as_waiting_then_start_once_created(
        r: redis.Redis, redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    console, base = serve_console(redis_url, ns)  # the console first, as operators start it
    procs = [worker(redis_url, ns, app_env), worker(redis_url, ns, app_env),
             scheduler_node(redis_url, ns, app_env)]
    with running(console, *procs):
        wait_for(lambda: "2 workers and 1 node are waiting" in sched(
            redis_url, ns, app_env, "status").stdout, 30, "both workers and the node to wait")
        shown = sched(redis_url, ns, app_env, "status")
        assert shown.returncode == 0, shown.stdout  # ready for the first submit: healthy
        assert ("namespace not created yet: 2 workers and 1 node are waiting (its first "
                "submit, or `sched namespace create`, creates it)") in shown.stdout
        listed = sched(redis_url, ns, app_env, "workers")
        assert listed.returncode == 0 and listed.stdout.count(" waiting ") == 2, listed.stdout
        assert [w["waiting"] for w in json.loads(sched(
            redis_url, ns, app_env, "workers", "--json").stdout)] == [True, True]
        page = urllib.request.urlopen(f"{base}/workers", timeout=10).read().decode()
        assert page.count("waiting for its namespace") == 2, page
        page = urllib.request.urlopen(f"{base}/", timeout=10).read().decode()
        assert "namespace not created yet: 2 workers and 1 node are waiting" in page
        assert r.hget(Keys(ns).meta, "shards") is None  # waiting created nothing

        made = sched(redis_url, ns, app_env, "namespace", "create", "--shards", "3",
                     "--max-payload-bytes", "5000")
        assert made.returncode == 0 and made.stdout == (
            f"namespace {ns}: 3 shards, payloads up to 5,000 bytes\n"), made.stderr
        again = sched(redis_url, ns, app_env, "namespace", "create", "--shards", "4")
        assert again.returncode == 1 and again.stderr.count("\n") == 1
        assert "has 3 shards in Redis, not the 4 asked for" in again.stderr

        effects = f"{ns}:test:effects"
        with Client(redis_url, ns) as client:  # the processes start without a restart
            ids = client.submit_many([{"task": "test.effect", "payload": {"effects": effects},
                                       "delay": 0.5 * (i % 2)} for i in range(20)])
            wait_for(lambda: statuses(client, ids) == {"succeeded": 20}, 30, "the jobs to run")
        wait_for(lambda: status_json(redis_url, ns, app_env)["shards_owned"] == 3, 15,
                 "the node to own every shard")
        now = status_json(redis_url, ns, app_env)
        assert now["shards"] == 3 and now["workers_alive"] == 2
        assert now["workers_waiting"] == 0 and now["nodes_waiting"] == 0
        assert not any(w["waiting"] for w in now["workers"])
        assert "namespace not created" not in sched(redis_url, ns, app_env, "status").stdout


def test_status_on_a_namespace_nothing_waits_for_is_unhealthy(redis_url: str, ns: str,
                                                              app_env: dict[str, str]) -> None:
    shown = sched(redis_url, ns, app_env, "status")
    assert shown.returncode == 3
    assert "namespace not created yet: no worker or node is waiting" in shown.stdout


def test_a_queue_that_holds_nothing_leaves_status_once_idle(redis_url: str, ns: str,
                                                           app_env: dict[str, str]) -> None:
    """20 queues, one job each; a worker reads the first 10: those drain and, a second of
    idle later, leave `sched status`; the 10 nobody reads hold their job and stay."""
    names = [f"q{i:02d}" for i in range(20)]
    with Client(redis_url, ns) as client:
        client.create_namespace()
        node = scheduler_node(redis_url, ns, app_env, "--queue-idle", "1")
        reader = sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry",
                               "--queues", ",".join(names[:10]), "--log-level", "warning")
        with running(node, reader):
            ids = client.submit_many([{"task": "test.effect", "queue": q,
                                       "payload": {"effects": f"{ns}:test:effects"}}
                                      for q in names])
            wait_for(lambda: statuses(client, ids[:10]) == {"succeeded": 10}, 30,
                     "the read queues to drain")

            def listed() -> list[str]:
                return [q["queue"] for q in status_json(redis_url, ns, app_env)["queues"]]
            wait_for(lambda: listed() == names[10:], 30, "the drained queues to leave")
            assert {q["queue"]: q["depth"] for q in status_json(
                redis_url, ns, app_env)["queues"]} == dict.fromkeys(names[10:], 1)
