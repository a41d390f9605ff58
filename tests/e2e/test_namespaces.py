"""A namespace's life with real `sched worker` and `sched scheduler` processes: a queue that
holds nothing leaves `sched status` once idle."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from test_scheduler_nodes import scheduler_node, wait_for

from conftest import SCHED
from helpers import running, sched_process, statuses
from scheduler import Client

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them


def sched(redis_url: str, ns: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, *args],
                          capture_output=True, text=True, env=env, timeout=60)


def status_json(redis_url: str, ns: str, env: dict[str, str]) -> dict[str, Any]:
    out = sched(redis_url, ns, env, "status", "--json")
    assert out.stdout, out.stderr
    return dict(json.loads(out.stdout))


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
