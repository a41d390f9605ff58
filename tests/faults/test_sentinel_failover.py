"""The loss of the Redis host under Sentinel: a producer submits ~1,000 jobs/s with
durability="replicated", a node and two workers run them, all through one sentinel URL, and
the primary (of a primary and two replicas: a failover leaves one to confirm writes; with a
single replica, replicated submits are refused until one is back) is SIGKILLed mid-stream. The sentinels promote the replica; every process follows
by itself (none is restarted), and the checker finds every acknowledged job run with one
committed success.

Ground truth is what the producer was told: a batch counts as acknowledged only when
submit_many returned (after WAIT saw the replica confirm it). A batch that failed (the
primary gone, or the replica not confirming in time) is sent again with the same dedupe keys
until it is acknowledged, as a producer should: the dedupe keys make the repeat safe."""

from __future__ import annotations

import time

import pytest

from scheduler import Client

from .harness import processes, wait_for
from .scenario import Producer, Scenario
from .sentinel import sentinel_set

pytestmark = pytest.mark.slow

RATE = 1000  # jobs/s asked of the producer
BATCH = 20
SECONDS = 10.0
KILL_AT = 3.0


def test_a_primary_killed_under_load_loses_no_acknowledged_job(redis_url: str, ns: str) -> None:
    with sentinel_set() as hs:
        sc = Scenario(hs.url, redis_url, ns)
        producer = Client(hs.url, ns, durability="replicated", replicas=1,
                          replica_timeout_s=1.0)
        try:
            with processes(hs.url, ns, redis_url, sc.truth) as procs:
                sc.client.create_namespace()
                procs.node()
                procs.node()
                procs.worker("--concurrency", "200")
                procs.worker("--concurrency", "200")
                wait_for(lambda: len(sc.client.workers()) == 2, 30, "both workers")
                load = Producer(producer, sc, rate=RATE, batch=BATCH, seconds=SECONDS)
                try:
                    time.sleep(KILL_AT)
                    # Every worker's leases and commits in flight may die with the primary
                    # (written there, not replicated yet): the fault touches them all. Until
                    # the sentinels promote the replica no node can reclaim anything: a
                    # failover whose first election fails takes the failover-timeout (10 s)
                    # more, which once left slots 11 s past their leases in CI.
                    with procs.redis_outage("primary killed"):
                        old = hs.kill_primary()
                        killed = time.time()
                        failover_s = hs.wait_failover(old)
                finally:
                    load.join()
                summary = load.finish(procs)
                stats = load.stats
                log = sc.store.log()
        finally:
            producer.close()
            sc.close()
        after = sorted(line["t"] for line in log if line["event"] == "ok" and line["t"] > killed)
        first: dict[str, float] = {}
        for line in log:
            if line["event"] == "start":
                first.setdefault(line["slot"], line["t"])
        lags = sorted(max(0.0, t - int(slot.rsplit(":", 1)[1]) / 1000)
                      for slot, t in first.items())
        p99 = lags[int(0.99 * (len(lags) - 1))]
        print(f"{stats['submitted']} jobs acknowledged in {stats['seconds']:.1f}s "
              f"({stats['submitted'] / stats['seconds']:.0f}/s); {len(stats['refused'])} "
              f"batch tries refused ({sorted(set(stats['refused']))}); sentinels failed over "
              f"{failover_s:.1f}s after the kill; first completion after the kill "
              f"{after[0] - killed:.2f}s after it; start lag p99 {p99 * 1000:.0f} ms, max "
              f"{lags[-1] * 1000:.0f} ms; {summary.summary()}")
        assert len(sc.truth.jobs) == stats["submitted"]
        assert after, "nothing completed after the kill"
