"""Ground truth for the fault suite, kept outside the Redis under test.

What the SDK returned (the job ids of every accepted submit, with what each job is), what the
test itself did (which worker processes it killed, froze, cut off or starved, which stream
entries it deleted) and what the handlers did (`chaos.*` tasks in tests/app_tasks.py record
every start and every effect in a second Redis, `TruthStore`). A fault that rolls the Redis
under test back, or a bug that rewrites it, cannot erase any of this.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import redis

# What a job of each workload kind may end as, and whether its handler fails by design.
# Kinds that never fail by design may still end `dead`, but only when every attempt was lost
# to a fault (the rules check that each lost attempt is explained).
ENDS: dict[str, frozenset[str]] = {
    "noop": frozenset({"succeeded", "dead"}),
    "slow": frozenset({"succeeded", "dead"}),
    "flaky": frozenset({"succeeded", "dead"}),
    "once": frozenset({"succeeded", "dead"}),
    "delayed": frozenset({"succeeded", "dead"}),
    "cron": frozenset({"succeeded", "dead"}),
    "cron_skip": frozenset({"succeeded", "dead", "skipped"}),  # overlap="skip"
    "at_most_once": frozenset({"succeeded", "lost"}),
    "hang": frozenset({"dead"}),
    "poison": frozenset({"dead"}),
}
FAILS_BY_DESIGN = frozenset({"flaky", "hang", "poison"})


@dataclass(frozen=True)
class JobTruth:
    kind: str
    delivery: str = "at_least_once"
    max_attempts: int = 3
    cron: str | None = None  # cron jobs: the expression (UTC)
    end_ms: int = 0  # cron jobs: end_at
    submitted_ms: tuple[int, int] = (0, 0)  # Redis time just before and just after submit


def wall_ms() -> int:
    """Wall-clock ms. The Redis under test runs on this host, so its TIME (lease_until,
    finished_ms) is on the same clock."""
    return int(time.time() * 1000)


@dataclass
class Outage:
    """A span in which a fault the test injected kept every node from reclaiming: Redis
    refused writes, or a node died holding shards that no one may take before their leases
    run out. `end_ms` is None while it lasts."""
    what: str
    start_ms: int
    end_ms: int | None = None


@dataclass
class Truth:
    jobs: dict[str, JobTruth] = field(default_factory=dict)
    faulted_pids: set[int] = field(default_factory=set)  # workers whose leases may be lost
    outages: list[Outage] = field(default_factory=list)
    planted_orphans: set[str] = field(default_factory=set)  # slots whose entries we removed
    cancelled: set[str] = field(default_factory=set)  # slots the test asked to cancel
    effects: dict[str, int] = field(default_factory=dict)  # slot -> effects recorded
    starts: dict[str, int] = field(default_factory=dict)  # slot -> handler starts recorded

    def accept(self, ids: list[str], jobs: list[JobTruth]) -> None:
        """Record what submit_many returned for these jobs (in input order)."""
        assert len(ids) == len(jobs), "submit_many returned a different number of ids"
        self.jobs.update(zip(ids, jobs, strict=True))

    def outage_ms(self, lo: int, hi: int) -> int:
        """How much of [lo, hi] the outages cover (overlapping ones counted once)."""
        spans = sorted((max(o.start_ms, lo), min(hi if o.end_ms is None else o.end_ms, hi))
                       for o in list(self.outages))
        covered, reach = 0, lo
        for a, b in spans:
            a = max(a, reach)
            if b > a:
                covered += b - a
                reach = b
        return covered

    def outages_within(self, lo: int, hi: int) -> str:
        """The outages that touch [lo, hi], as ms from lo, for a violation's message."""
        out = [f"{o.what} {o.start_ms - lo:+d}..{'' if o.end_ms is None else f'{o.end_ms - lo:+d}'}"
               for o in list(self.outages)
               if o.start_ms <= hi and (o.end_ms is None or o.end_ms >= lo)]
        return ", ".join(out) or "none"


class TruthStore:
    """The handlers' records, in a Redis that is not the one under test: `<key>` slot ->
    effects, `<key>:starts` slot -> starts, `<key>:log` one JSON line per start and end."""

    def __init__(self, url: str, key: str) -> None:
        self.redis = redis.Redis.from_url(url)
        self.key = key

    def read_into(self, truth: Truth) -> Truth:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.key)
        pipe.hgetall(f"{self.key}:starts")
        effects, starts = pipe.execute()
        truth.effects = {k.decode(): int(v) for k, v in effects.items()}
        truth.starts = {k.decode(): int(v) for k, v in starts.items()}
        return truth

    def log(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.redis.lrange(f"{self.key}:log", 0, -1)]

    def effect_count(self) -> int:
        return int(self.redis.hlen(self.key))

    def close(self) -> None:
        self.redis.delete(self.key, f"{self.key}:starts", f"{self.key}:log")
        self.redis.close()


def worker_pid(worker_id: str | None) -> int | None:
    """Worker ids are `<host>-<pid>-<random>` (scheduler/worker/worker.py)."""
    if not worker_id:
        return None
    parts = worker_id.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
