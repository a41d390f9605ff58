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

Consumer groups are created here too (`create_groups`), for the dispatch streams a worker
reads and the events streams the snapshotter reads: BUSYGROUP means it exists, fine.

Pure functions over a pipeline and its replies, so the blocking client, the asyncio client
and every service apply the same policy whatever I/O drives them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from scheduler.core.errors import ConfigError, NamespaceError, NamespaceMissing
from scheduler.core.keys import DEFAULT_SHARDS, Keys

__all__ = ["EVENTS_MAXLEN", "MAX_PAYLOAD_LIMIT", "MAX_SHARDS", "META_FIELDS", "Meta",
           "NamespaceMissing", "check_groups", "check_payload_limit", "check_shards", "create",
           "create_groups", "parse", "read", "write_config"]

MAX_SHARDS = 1024
MAX_PAYLOAD_LIMIT = 512 * 1024 * 1024  # Redis's largest string (proto-max-bulk-len's default)
# Each shard's events stream is trimmed (approximately) to this many entries by every script
# that emits; the snapshotter must read them before they go (docs/operating/history.md).
EVENTS_MAXLEN = 1_000_000
META_FIELDS = ("shards", "max_payload_bytes")


class Meta(msgspec.Struct, frozen=True):
    """What `<ns>:meta` holds."""

    shards: int
    max_payload_bytes: int | None  # None in namespaces made before limits were stored


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
