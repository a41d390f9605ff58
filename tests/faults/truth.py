"""Ground truth for the fault suite: the rules' inputs live in the package
(scheduler.testing.truth); the handlers' records of `chaos.*` tasks (tests/app_tasks.py), kept
in a second Redis that a fault on the Redis under test cannot roll back, live here."""

from __future__ import annotations

import json
from typing import Any

import redis

from scheduler.testing.truth import (
    ENDS,
    FAILS_BY_DESIGN,
    JobTruth,
    Outage,
    Truth,
    wall_ms,
    worker_pid,
)

__all__ = ["ENDS", "FAILS_BY_DESIGN", "JobTruth", "Outage", "Truth", "TruthStore", "wall_ms",
           "worker_pid"]


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
