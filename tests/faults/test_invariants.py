"""The invariant checker itself catches what it is meant to catch."""

from __future__ import annotations

import json

import redis

from scheduler.keys import Keys, shard_of

from .invariants import check


def seed(r: redis.Redis, ns: str, job_id: str, fires: list[int], *, end: int,
         successes: int = 1) -> None:
    keys = Keys(ns)
    r.hset(keys.meta, "shards", 4)
    shard = shard_of(job_id, 4)
    r.hset(keys.job(shard, job_id), mapping={"kind": "cron", "cron": "* * * * * *",
                                              "fire_ms": fires[0], "end_ms": end})
    for fire in fires:
        slot = f"{job_id}:{fire}"
        r.hset(keys.slot(shard, slot), mapping={"job_id": job_id, "fire_ms": fire,
                                                "status": "succeeded", "attempt": 1})
        for _ in range(successes):
            r.xadd(keys.events(shard), {"type": "succeeded", "ts": fire,
                                        "data": json.dumps([{"slot": slot, "attempt": 1}])})


def test_a_gap_in_a_cron_series_is_a_violation(r: redis.Redis, ns: str) -> None:
    base = 1_800_000_000_000
    seed(r, ns, "complete", [base + i * 1000 for i in range(5)], end=base + 4000)
    seed(r, ns, "gappy", [base + i * 1000 for i in (0, 1, 3, 4)], end=base + 4000)
    report = check(r, ns, expected_slots=set(), now_ms=base, lease_ms=1000)
    assert report.violations == ["cron job gappy: 1 occurrences without a slot, 0 unexpected slots"]


def test_two_committed_successes_are_a_violation(r: redis.Redis, ns: str) -> None:
    base = 1_800_000_000_000
    seed(r, ns, "twice", [base], end=base, successes=2)
    report = check(r, ns, expected_slots={f"twice:{base}", "ghost:1"}, now_ms=base,
                   lease_ms=1000)
    assert sorted(report.violations) == [
        "ghost:1: submitted but has no slot",
        f"twice:{base}: 2 committed successes",
        f"twice:{base}: succeeded without exactly one success event"]
