"""A mixed workload for chaos rounds: the jobs to submit, and what the test knows of each
(tests/faults/truth.py: its kind, delivery, attempts, schedule)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler import JobSpec, RetryPolicy

from .truth import JobTruth

FAST = RetryPolicy(max_attempts=5, base_s=0.05, max_s=0.5, jitter=0.5)


@dataclass
class Workload:
    specs: list[JobSpec] = field(default_factory=list)
    jobs: list[JobTruth] = field(default_factory=list)

    def add(self, kind: str, spec: JobSpec) -> None:
        retry = spec.retry or RetryPolicy()
        end_ms = int(spec.end_at.timestamp() * 1000) if spec.end_at else 0
        self.specs.append(spec)
        self.jobs.append(JobTruth(kind=kind, delivery=spec.delivery,
                                  max_attempts=retry.max_attempts, cron=spec.cron,
                                  end_ms=end_ms))


def mixed(n: int, rng: random.Random, effects: str, *, poison: bool = True) -> Workload:
    """Immediate no-ops (some with a priority), slow (they log and return a result), flaky
    (they log), exactly-once and at-most-once jobs, hanging handlers,
    handlers that fail with an unencodable error, delayed jobs (0-3 s) and every-second cron
    jobs that end after 5 s."""
    w = Workload()
    end = datetime.now(UTC) + timedelta(seconds=5)
    for _ in range(n):
        roll = rng.random()
        payload: dict[str, Any] = {"effects": effects}
        if roll < 0.34:  # a priority of their own for some: history must hold it
            w.add("noop", JobSpec(task="chaos.noop", payload=payload, retry=FAST,
                                  priority=rng.choice([None, None, 1, 2, 4, 5])))
        elif roll < 0.54:
            payload["seconds"] = round(rng.uniform(0.1, 1.0), 2)
            w.add("slow", JobSpec(task="chaos.slow", payload=payload, retry=FAST, timeout=10))
        elif roll < 0.74:
            payload["fail_first"] = rng.randint(1, 2)
            w.add("flaky", JobSpec(task="chaos.flaky", payload=payload, retry=FAST))
        elif roll < 0.86:
            payload["seconds"] = round(rng.uniform(0, 0.5), 2)
            w.add("once", JobSpec(task="chaos.once", payload=payload, retry=FAST,
                                  delivery="exactly_once"))
        elif roll < 0.91:
            w.add("at_most_once", JobSpec(task="chaos.noop", payload=payload,
                                          delivery="at_most_once"))
        elif roll < 0.94:
            w.add("delayed", JobSpec(task="chaos.noop", payload=payload, retry=FAST,
                                     delay=round(rng.uniform(0, 3), 3)))
        elif roll < 0.96:
            w.add("cron", JobSpec(task="chaos.noop", payload=payload, retry=FAST,
                                  cron="* * * * * *", end_at=end))
        elif roll < 0.98 or not poison:
            w.add("hang", JobSpec(task="chaos.hang", payload=payload, timeout=0.3,
                                  retry=RetryPolicy(max_attempts=2, base_s=0.05)))
        else:
            w.add("poison", JobSpec(task="chaos.poison", payload=payload,
                                    retry=RetryPolicy(max_attempts=2, base_s=0.05)))
    return w
