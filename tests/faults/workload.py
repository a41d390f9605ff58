"""A mixed workload for chaos rounds: what each job is and what its slot may end as."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler import JobSpec, RetryPolicy


@dataclass
class Workload:
    specs: list[JobSpec] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)


def mixed(n: int, rng: random.Random, effects: str) -> Workload:
    """Immediate no-ops, slow, flaky, exactly-once and at-most-once jobs, hanging handlers,
    delayed jobs (0-3 s) and every-second cron jobs that end after 5 s."""
    w = Workload()
    end = datetime.now(UTC) + timedelta(seconds=5)
    fast = RetryPolicy(max_attempts=5, base_s=0.05, max_s=0.5, jitter=0.5)
    for _ in range(n):
        roll = rng.random()
        payload: dict[str, Any] = {"effects": effects}
        if roll < 0.35:
            kind, spec = "noop", JobSpec(task="chaos.noop", payload=payload, retry=fast)
        elif roll < 0.55:
            payload["seconds"] = round(rng.uniform(0.1, 1.0), 2)
            kind, spec = "slow", JobSpec(task="chaos.slow", payload=payload, retry=fast,
                                         timeout=10)
        elif roll < 0.75:
            payload["fail_first"] = rng.randint(1, 2)
            kind, spec = "flaky", JobSpec(task="chaos.flaky", payload=payload, retry=fast)
        elif roll < 0.87:
            payload["seconds"] = round(rng.uniform(0, 0.5), 2)
            kind, spec = "once", JobSpec(task="chaos.once", payload=payload, retry=fast,
                                         delivery="exactly_once")
        elif roll < 0.92:
            kind, spec = "at_most_once", JobSpec(task="chaos.noop", payload=payload,
                                                 delivery="at_most_once")
        elif roll < 0.95:
            kind, spec = "delayed", JobSpec(task="chaos.noop", payload=payload, retry=fast,
                                            delay=round(rng.uniform(0, 3), 3))
        elif roll < 0.97:
            kind, spec = "cron", JobSpec(task="chaos.noop", payload=payload, retry=fast,
                                         cron="* * * * * *", end_at=end)
        else:
            kind, spec = "hang", JobSpec(task="chaos.hang", payload=payload, timeout=0.3,
                                         retry=RetryPolicy(max_attempts=2, base_s=0.05))
        w.specs.append(spec)
        w.kinds.append(kind)
    return w
