"""How every process and client opens a namespace: one creation policy, one place.

A namespace's `<ns>:meta` hash holds what cannot change once jobs are in it: the shard count
(a job's shard is a hash of its id modulo the count) and the payload limit its scripts
enforce (copied into each shard's `config` hash, where `submit.lua` reads it).

The policy:
- **Writers create it.** A client's first submit, `client.create_namespace()` (`sched
  namespace create`), and `sched recover` (with the settings history recorded), write the
  count (the one they were given, or DEFAULT_SHARDS on one Redis and DEFAULT_CLUSTER_SHARDS
  on a Cluster: keys.py says why) and the limit with HSETNX: the first writer wins, and every
  writer after it adopts what is stored.
- **Everyone else waits for it.** Workers, scheduler nodes, the snapshotter and retention
  read the count and, while there is none, raise `NamespaceMissing`, which their start-up
  loops log (once, then at most every 30 s) and retry about every second. So a worker started
  before the first submit does not fix the count behind the user's back. Workers and nodes
  register meanwhile as waiting (worker.py, node.py), so `sched status` shows them.
- **A count given explicitly must match.** `Client(shards=16)` on a namespace created with
  8 is a NamespaceError that names both counts; omitting `shards` adopts the stored count.

It also holds the settings that may change at any time: how long finished work stays in
Redis (`retention_s`, `retain_max`, `dead_retention_s`: `RetentionSettings`, read by every
scheduler node's expirer at each pass, so a change applies without a restart), and
`strict_tasks` ("1": a submit of a task the task catalog does not list is refused; else it
warns), which every client reads with the catalog, at each clock re-sync.

Consumer groups are created here too (`create_groups`), for the dispatch streams a worker
reads and the events streams the snapshotter reads: BUSYGROUP means it exists, fine.

Pure functions over a pipeline and its replies, so the blocking client, the asyncio client
and every service apply the same policy whatever I/O drives them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from scheduler.core.errors import ConfigError, NamespaceError, NamespaceMissing
from scheduler.core.keys import DEFAULT_SHARDS, Keys

__all__ = ["DEFAULT_DEAD_RETENTION_S", "DEFAULT_RETAIN_MAX", "DEFAULT_RETENTION_S",
           "EVENTS_MAXLEN", "MAX_PAYLOAD_LIMIT", "MAX_SHARDS", "META_FIELDS", "Meta",
           "NamespaceMissing", "RETENTION_FIELDS", "RetentionSettings", "STRICT_TASKS", "check_groups",
           "check_payload_limit", "check_retention", "check_shards", "create", "create_groups",
           "parse", "parse_retention", "read", "read_retention", "seconds", "write_config",
           "write_retention"]

MAX_SHARDS = 1024
MAX_PAYLOAD_LIMIT = 512 * 1024 * 1024  # Redis's largest string (proto-max-bulk-len's default)
# Each shard's events stream is trimmed (approximately) to this many entries by every script
# that emits; the snapshotter must read them before they go (docs/operating/history.md).
EVENTS_MAXLEN = 1_000_000
META_FIELDS = ("shards", "max_payload_bytes")

# Finished work leaves Redis by age or by count, whichever comes first (the node's expirer,
# lua/expire.lua). The count is what bounds memory whatever the rate:
# docs/operating/retention.md has the bytes a finished job costs and the arithmetic behind
# these defaults (`python -m bench retention-soak` measures them).
DEFAULT_RETENTION_S = 3600.0
DEFAULT_RETAIN_MAX = 500_000
DEFAULT_DEAD_RETENTION_S = 7 * 86400.0  # dead letters wait for an operator: longer
MAX_RETENTION_S = 366 * 86400.0
MAX_RETAIN_MAX = 1_000_000_000
RETENTION_FIELDS = ("retention_s", "retain_max", "dead_retention_s")
STRICT_TASKS = "strict_tasks"  # a `meta` field: "1" on, anything else off
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*")


class Meta(msgspec.Struct, frozen=True):
    """What `<ns>:meta` holds."""

    shards: int
    max_payload_bytes: int | None  # None in namespaces made before limits were stored


class RetentionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How long finished work stays in Redis: `sched namespace set`, Client.set_retention."""

    retention_s: float = DEFAULT_RETENTION_S
    """A finished slot leaves this long after it finished..."""
    retain_max: int = DEFAULT_RETAIN_MAX
    """...or once this many finished slots of the namespace are younger than it."""
    dead_retention_s: float = DEFAULT_DEAD_RETENTION_S
    """A dead-lettered slot leaves the dead-letter set and Redis this long after it died."""

    def shard_max(self, shards: int) -> int:
        """Each shard's share of `retain_max` (each shard bounds its own)."""
        return max(1, math.ceil(self.retain_max / max(1, shards)))


def seconds(field: str, value: float | str) -> float:
    """A duration in seconds from a number or text as the CLI takes it ("90", "60s", "1h",
    "7d"); ConfigError naming `field` otherwise."""
    if isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if m is None:
            raise ConfigError(f"{field} must be a duration such as 90s, 15m, 1h or 7d, not "
                              f"{value!r}")
        return float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{field} must be a number of seconds, not {value!r}")
    return float(value)


def check_retention(retention_s: float | str, retain_max: int,
                    dead_retention_s: float | str) -> RetentionSettings:
    age, dead = seconds("retention", retention_s), seconds("dead_retention", dead_retention_s)
    for name, value in (("retention", age), ("dead_retention", dead)):
        if not 1 <= value <= MAX_RETENTION_S:
            raise ConfigError(f"{name} must be between 1 s and 366 days, not {value:g} s")
    if isinstance(retain_max, bool) or not isinstance(retain_max, int) \
            or not 1 <= retain_max <= MAX_RETAIN_MAX:
        raise ConfigError(f"retain_max must be an integer between 1 and {MAX_RETAIN_MAX:,}, "
                          f"not {retain_max!r}")
    return RetentionSettings(retention_s=age, retain_max=retain_max, dead_retention_s=dead)


def read_retention(pipe: Any, keys: Keys) -> None:
    """Queue the read whose reply `parse_retention` takes."""
    pipe.hmget(keys.meta, *RETENTION_FIELDS)


def parse_retention(reply: Sequence[Any]) -> RetentionSettings:
    """The stored settings, each one not set (or not readable) at its default."""
    age, count, dead = (_number(v) for v in reply)
    default = RetentionSettings()
    return RetentionSettings(
        retention_s=age if age is not None and age >= 1 else default.retention_s,
        retain_max=int(count) if count is not None and count >= 1 else default.retain_max,
        dead_retention_s=dead if dead is not None and dead >= 1 else default.dead_retention_s)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def write_retention(pipe: Any, keys: Keys, settings: RetentionSettings,
                    fields: Iterable[str] = RETENTION_FIELDS) -> None:
    """Queue the write of `fields` (of RETENTION_FIELDS) of `settings`."""
    values = {"retention_s": repr(settings.retention_s), "retain_max": settings.retain_max,
              "dead_retention_s": repr(settings.dead_retention_s)}
    mapping = {name: values[name] for name in fields}
    if mapping:
        pipe.hset(keys.meta, mapping=mapping)


def check_shards(shards: int | None) -> int | None:
    if shards is not None and (type(shards) is not int or not 1 <= shards <= MAX_SHARDS):
        raise ConfigError(f"shards must be an integer between 1 and {MAX_SHARDS}, not {shards!r}")
    return shards


def check_payload_limit(limit: int) -> int:
    if type(limit) is not int or not 1 <= limit <= MAX_PAYLOAD_LIMIT:
        raise ConfigError(f"max_payload_bytes must be an integer between 1 and "
                          f"{MAX_PAYLOAD_LIMIT:,}, not {limit!r}")
    return limit


def read(pipe: Any, keys: Keys) -> None:
    """Queue the read whose reply `parse` takes."""
    pipe.hmget(keys.meta, *META_FIELDS)


def create(pipe: Any, keys: Keys, shards: int | None, max_payload_bytes: int) -> None:
    """Queue a writer's creation (the first writer wins), then the read `parse` takes."""
    pipe.hsetnx(keys.meta, "shards", shards or DEFAULT_SHARDS)
    pipe.hsetnx(keys.meta, "max_payload_bytes", max_payload_bytes)
    read(pipe, keys)


def write_config(pipe: Any, keys: Keys, meta: Meta) -> None:
    """Each shard's copy of the namespace's limits, which its scripts enforce."""
    if meta.max_payload_bytes is not None:
        for shard in range(meta.shards):
            pipe.hset(keys.config(shard), "max_payload_bytes", meta.max_payload_bytes)


def parse(namespace: str, reply: Sequence[Any], requested: int | None = None) -> Meta:
    """The stored meta from `read`'s reply. Raises NamespaceMissing when there is none, and
    NamespaceError when `requested` (a count the caller gave explicitly) differs from it."""
    stored, limit = reply
    if stored is None:
        raise NamespaceMissing(namespace)
    meta = Meta(int(stored), None if limit is None else int(limit))
    if requested is not None and requested != meta.shards:
        raise NamespaceError(
            f"namespace {namespace!r} has {meta.shards} shards in Redis, not the {requested} "
            f"asked for: the count is fixed when a namespace is created (omit shards= to use "
            f"{meta.shards}, or use a new namespace)")
    return meta


def create_groups(pipe: Any, streams: Iterable[str | bytes], group: str) -> None:
    """Queue XGROUP CREATE (from the start, making the stream) for each stream; pass the
    pipeline's replies to `check_groups`."""
    for stream in streams:
        pipe.xgroup_create(stream, group, id="0", mkstream=True)


def check_groups(results: Iterable[Any]) -> None:
    """Raise the first error of `create_groups`' replies that is not "the group exists"."""
    for result in results:
        if isinstance(result, Exception) and "BUSYGROUP" not in str(result):
            raise result
