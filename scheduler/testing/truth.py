"""Ground truth for the invariant checker, known outside the Redis slots it judges.

What the SDK returned (the job ids of every accepted submit, with what each job is), what the
caller itself did (which worker processes it killed, froze, cut off or starved, which stream
entries it deleted) and what the handlers did (every start and every effect, recorded apart
from the slots: the fault suite in a second Redis, `sched verify` in its run's own keys). A
bug that rewrites a slot cannot erase any of this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# What a job of each kind may end as, and whether its handler fails by design.
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
    # Spans in which Redis itself was away (a restart or failover the caller made): any
    # attempt in flight across one may lose its lease, on whatever worker it ran.
    redis_away: list[Outage] = field(default_factory=list)
    planted_orphans: set[str] = field(default_factory=set)  # slots whose entries we removed
    cancelled: set[str] = field(default_factory=set)  # slots the test asked to cancel
    effects: dict[str, int] = field(default_factory=dict)  # slot -> effects recorded
    starts: dict[str, int] = field(default_factory=dict)  # slot -> handler starts recorded

    def accept(self, ids: list[str], jobs: list[JobTruth]) -> None:
        """Record what submit_many returned for these jobs (in input order)."""
        assert len(ids) == len(jobs), "submit_many returned a different number of ids"
        self.jobs.update(zip(ids, jobs, strict=True))

    def in_flight_across_redis_away(self, claimed_ms: int | None,
                                    lease_until_ms: int | None) -> bool:
        """Whether an attempt was claimed before Redis came back and held a lease that had
        not run out when it went away (`redis_away`): its loss is the outage's, not a bug's."""
        return claimed_ms is not None and lease_until_ms is not None and any(
            claimed_ms <= (o.end_ms if o.end_ms is not None else claimed_ms)
            and lease_until_ms >= o.start_ms for o in list(self.redis_away))

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


def worker_pid(worker_id: str | None) -> int | None:
    """The pid in a worker id (`<host>-<pid>-<random>`); None for any other id."""
    if not worker_id:
        return None
    parts = worker_id.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
