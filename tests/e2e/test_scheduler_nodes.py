"""Real `sched scheduler` and `sched worker` processes: every cron occurrence gets exactly one
slot and runs once, across two nodes and after one is SIGKILLed; backfill after all nodes
were down; delayed jobs never start early.

The cron test's size comes from the environment so CI stays quick: SCHED_TEST_CRON_JOBS
(default 50) every-second jobs for SCHED_TEST_CRON_SECONDS (default 6). The full size:

    SCHED_TEST_CRON_JOBS=200 SCHED_TEST_CRON_SECONDS=30 .venv/bin/pytest \
        tests/e2e/test_scheduler_nodes.py -k two_nodes --timeout 300
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable

import pytest
import redis

from helpers import running, sched_process
from scheduler import Client
from scheduler.core.keys import Keys

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them

JOBS = int(os.environ.get("SCHED_TEST_CRON_JOBS", "50"))
SECONDS = int(os.environ.get("SCHED_TEST_CRON_SECONDS", "6"))
LEASE_S = 2.0


def scheduler_node(redis_url: str, ns: str, env: dict[str, str],
                   *args: str) -> subprocess.Popen[bytes]:
    return sched_process(redis_url, ns, env, "scheduler", "--shard-lease", str(LEASE_S),
                         "--log-level", "warning", *args)


def worker(redis_url: str, ns: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return sched_process(redis_url, ns, env, "worker", "--app", "app_tasks:registry",
                         "--concurrency", "500", "--log-level", "warning")


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - t0


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()  # type: ignore[misc]
    return int(sec) * 1000 + int(usec) // 1000


def owners(r: redis.Redis, ns: str, shards: int) -> list[str]:
    k = Keys(ns)
    return [(v or b"").decode() for v in r.mget([k.owner(s) for s in range(shards)])]


def test_two_nodes_then_one_killed_every_occurrence_once(r: redis.Redis, redis_url: str,
                                                          ns: str,
                                                          app_env: dict[str, str]) -> None:
    effects = f"{ns}:test:effects"
    with Client(redis_url, ns) as first_writer:  # nodes wait for the namespace to exist
        first_writer.create_namespace()
    a = scheduler_node(redis_url, ns, app_env)
    b = scheduler_node(redis_url, ns, app_env)
    w = worker(redis_url, ns, app_env)
    with running(a, b, w), Client(redis_url, ns) as client:
        shards = client.shards
        wait_for(lambda: all(owners(r, ns, shards)) and len(
            {o.split(":", 1)[1] for o in owners(r, ns, shards)}) == 2, 15, "both nodes own shards")
        ids = client.submit_many([{"task": "test.effect", "payload": {"effects": effects},
                                   "cron": "* * * * * *"} for _ in range(JOBS)])
        first = client.get_job(ids[0]).fire_ms
        assert all(client.get_job(i).fire_ms == first for i in ids[:5])
        wait_for(lambda: redis_ms(r) > first + SECONDS * 1000, SECONDS + 10, "the window")

        a.kill()  # SIGKILL: no release; its leases must run out
        killed_ms = redis_ms(r)
        survivor = f"-{b.pid}-"
        took = wait_for(lambda: all(survivor in o for o in owners(r, ns, shards)),
                        LEASE_S + 5, "the survivor to own every shard")
        print(f"takeover after SIGKILL: {took:.2f} s (lease {LEASE_S} s)")
        assert took <= LEASE_S + 2.5, took
        end = redis_ms(r) + 2000  # the series continues past the takeover
        wait_for(lambda: redis_ms(r) > end + 1000, 10, "the tail of the window")

        def done() -> bool:
            return all(s.status.value == "succeeded" for i in ids for s in client.slots(i)
                       if s.fire_ms <= end)
        wait_for(done, 30, "every occurrence up to the end to succeed")
        expected = list(range(first, end + 1, 1000))
        for job_id in ids:
            got = [s.fire_ms for s in client.slots(job_id) if s.fire_ms <= end]
            assert got == expected, f"gap or duplicate in {job_id}"
        counts = [int(v) for v in r.hvals(effects)]
        assert len(counts) >= JOBS * len(expected) and set(counts) == {1}, "each ran once"
        assert killed_ms < end


def test_catchup_after_every_node_was_down(r: redis.Redis, redis_url: str, ns: str,
                                           app_env: dict[str, str]) -> None:
    grace = ("--misfire-grace", "1", "--lookahead", "1")
    with Client(redis_url, ns) as client:
        policies = ("all", "latest", "none")
        ids = {p: client.submit("t", cron="* * * * * *", catchup=p) for p in policies}
        node = scheduler_node(redis_url, ns, app_env, *grace)
        with running(node):
            wait_for(lambda: all(len(client.slots(i)) >= 2 for i in ids.values()), 15,
                     "the first slots")
        down_from = max(s.fire_ms for i in ids.values() for s in client.slots(i))
        time.sleep(5)  # every node down: about four occurrences per job are missed
        node = scheduler_node(redis_url, ns, app_env, *grace)
        with running(node):
            back = redis_ms(r)
            wait_for(lambda: all(max(s.fire_ms for s in client.slots(i)) > back
                                 for i in ids.values()), 15, "slots after the restart")
        # The restarted node's materializer passed `now` to Lua: it is each "missed" event's
        # ts, and everything more than the 1 s grace before it was missed.
        k = Keys(ns)
        missed_at: dict[str, int] = {}
        for shard in range(client.shards):
            for _, e in r.xrange(k.events(shard)):
                if e[b"type"] == b"missed":
                    for rec in json.loads(e[b"data"]):
                        missed_at[rec["job"]] = int(e[b"ts"])
        for policy, job_id in ids.items():
            got = [s.fire_ms for s in client.slots(job_id)]
            assert got == sorted(set(got))
            first = client.get_job(job_id).fire_ms
            absent = sorted(set(range(first, got[-1] + 1, 1000)) - set(got))
            missed = client.get_job(job_id).missed
            if policy == "all":
                assert absent == [] and missed == 0 and job_id not in missed_at
                continue
            late_before = missed_at[job_id] - 1000
            gap = list(range(down_from + 1000, late_before, 1000))
            assert len(gap) >= 3, (policy, gap)
            if policy == "latest":
                assert absent == gap[:-1] and gap[-1] in got and missed == len(gap) - 1
            else:
                assert absent == gap and missed == len(gap)


def test_delayed_jobs_never_start_before_their_fire_time(r: redis.Redis, redis_url: str,
                                                         ns: str,
                                                         app_env: dict[str, str]) -> None:
    effects = f"{ns}:test:effects"
    node = scheduler_node(redis_url, ns, app_env)
    w = worker(redis_url, ns, app_env)
    with running(node, w), Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "test.effect", "payload": {"effects": effects},
                                   "delay": 0.5 + (i % 30) / 10} for i in range(300)])
        wait_for(lambda: r.hlen(effects) == len(ids), 30, "every delayed job to run")
        wait_for(lambda: all(client.slots(i)[0].status.value == "succeeded" for i in ids), 10,
                 "commits")
        lags = []
        for job_id in ids:
            (slot,) = client.slots(job_id)
            for attempt in slot.attempts:
                assert attempt.claimed_ms is not None and attempt.claimed_ms >= slot.fire_ms
                lags.append(attempt.claimed_ms - slot.fire_ms)
        assert max(lags) < 2000, max(lags)
