"""Helpers shared by the benchmarks: namespaces, CPU counters, cleanup."""

from __future__ import annotations

import platform
import time
import uuid
from typing import Any

import redis


def fresh_namespace(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:6]}"


def redis_cpu_s(r: redis.Redis) -> float:
    info: Any = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def drop_namespace(r: redis.Redis, ns: str) -> None:
    batch = []
    for key in r.scan_iter(match=f"{ns}:*", count=5000):
        batch.append(key)
        if len(batch) >= 1000:
            r.unlink(*batch)
            batch.clear()
    if batch:
        r.unlink(*batch)


def machine(r: redis.Redis) -> dict[str, Any]:
    import os

    info: Any = r.info("server")
    return {"python": platform.python_version(), "redis": info["redis_version"],
            "cpus": os.cpu_count(), "platform": platform.platform(), "at": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
