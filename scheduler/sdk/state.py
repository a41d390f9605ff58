"""What a client knows of its namespace, without I/O: key names, the shard count and
payload limit read from Redis, the clock, the durability asked for, a submit's caches, and
the decoding of job hashes (`ClientState`). Also the operations that learn or create the
namespace (`ready`, `ensure_namespace`), which every other operation starts with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from scheduler.core import catalog
from scheduler.core.catalog import TaskDefaults
from scheduler.core.cron import CronSpec
from scheduler.core.errors import JobNotFound, NamespaceError, ValidationError
from scheduler.core.finite import finite_number
from scheduler.core.keys import (
    DEFAULT_CLUSTER_SHARDS,
    DEFAULT_SHARDS,
    Keys,
    check_job_id,
    shard_of,
    split_slot_id,
)
from scheduler.core.models import MAX_SECONDS, Job, job_from_hash
from scheduler.core.namespace import (
    META_FIELDS,
    STRICT_TASKS,
    Meta,
    NamespaceMissing,
    RetentionSettings,
    check_payload_limit,
    check_retention,
    check_shards,
    parse_retention,
    read_retention,
    write_config,
    write_retention,
)
from scheduler.core.namespace import create as write_namespace
from scheduler.core.namespace import parse as parse_meta
from scheduler.core.states import Delivery, Durability
from scheduler.redis.clock import Clock, RedisClock
from scheduler.sdk.requests import Op, Pipe

if TYPE_CHECKING:
    from scheduler.observe.tracing import SubmitTracer


class ClientState:
    """One client's state and every decision that needs no I/O: key names, the decoding
    of replies, and (with scheduler/sdk/batching.py, which validates a submit and makes
    its Lua calls) the caches a submit keeps."""

    def __init__(self, namespace: str, shards: int | None, clock: Clock | None,
                 max_payload_bytes: int, events_maxlen: int,
                 durability: str = Durability.PRIMARY, replicas: int = 1,
                 replica_timeout_s: float = 1.0) -> None:
        self.durability = durability_of(durability)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            raise ValidationError("replicas", f"{replicas!r} is not allowed; must be an "
                                              "integer >= 1")
        if not finite_number(replica_timeout_s) or not 0 < replica_timeout_s <= MAX_SECONDS:
            raise ValidationError("replica_timeout_s", f"{replica_timeout_s!r} is not "
                                                       f"allowed; must be a finite number of "
                                                       f"seconds > 0 and at most "
                                                       f"{MAX_SECONDS:,} (a year)")
        self.replicas = replicas
        self.replica_timeout_ms = max(1, int(replica_timeout_s * 1000))
        self.fsync_checked = False  # durability="fsynced": the server can (jobs.py)
        self.keys = Keys(namespace)
        self.namespace = namespace
        self.requested_shards = check_shards(shards)
        self.shards = 0
        self.clock: Clock = clock or RedisClock()
        self.max_payload_bytes = max_payload_bytes
        self.events_maxlen = events_maxlen
        self.created = False  # its first write created the namespace, or found it
        self.at = "redis"  # where Redis is, for error messages: the driver sets it
        self.on_cluster = False  # ...and whether it is a Redis Cluster (the default shards)
        # submit_batch.validate's caches: the job-hash fields of the options most jobs
        # share, computed once per distinct set, and the (task, queue, delivery) seen valid.
        self.option_fields: dict[tuple[Any, ...], list[Any]] = {}
        self.checked_names: dict[tuple[Any, Any, Any], tuple[str, str, Delivery]] = {}
        self.tracer: SubmitTracer | None = None  # set by a client with tracing on
        # The task catalog (core/catalog.py) as ready() last read it, along with what it
        # reads anyway: each listed task's merged defaults (what a submit applies to the
        # options it leaves at None; a task listed here is known), and whether the namespace
        # refuses a task it does not list (`strict_tasks`).
        self.catalog: dict[str, TaskDefaults] = {}
        self.catalog_raw: Mapping[Any, Any] | None = None
        self.strict_tasks = False
        # Names that need no catalog entry: a TaskHandle's (they come from code).
        self.vouched: set[str] = set()
        # validate()'s: the names of the jobs being validated that the catalog does not list
        # (checked by sdk/catalog.py's check_tasks once the batch is validated), and the
        # names already warned about (once per name per client).
        self.unseen: set[str] = set()
        self.warned: set[str] = set()
        # Where an unknown task's sentence goes: an UnknownTaskWarning (None), or a callable
        # (a service logs it: the outbox relay, whose warnings nobody reads).
        self.on_unknown_task: Callable[[str], None] | None = None

    def take_catalog(self, raw: Mapping[Any, Any], strict: Any = None) -> None:
        """The catalog as HGETALL read it, and the `strict_tasks` setting as HGET read it
        (None: not read, keep the one known). Each entry is merged once, here, and only when
        the catalog changed since the last read."""
        if strict is not None or self.catalog_raw is None:
            self.strict_tasks = strict in (b"1", "1")
        if raw == self.catalog_raw:
            return
        self.catalog_raw = raw
        found = (catalog.decode(value) for value in raw.values())
        self.catalog = {info.task: catalog.defaults_of(info) for info in found
                        if info is not None}

    def adopt(self, reply: Any, *, written: bool) -> None:
        """Take the shard count and payload limit stored in Redis (namespace.read's reply).
        Before the namespace's first write nothing is stored yet: reads use the count it
        will be created with, and payloads this client's own limit (scheduler/core/namespace.py)."""
        try:
            meta = parse_meta(self.namespace, reply, self.requested_shards)
        except NamespaceMissing:
            if written:
                raise
            self.shards = self.requested_shards or (
                DEFAULT_CLUSTER_SHARDS if self.on_cluster else DEFAULT_SHARDS)
            return
        self.shards = meta.shards
        if meta.max_payload_bytes is not None:
            self.max_payload_bytes = meta.max_payload_bytes

    def namespace_writes(self, pipe: Any) -> None:
        """The first write of a client: create the namespace (the policy is
        scheduler/core/namespace.py's)."""
        write_namespace(pipe, self.keys, self.shards, self.max_payload_bytes)

    def config_writes(self, pipe: Any) -> None:
        """Each shard's copy of the namespace's limits, which its scripts enforce."""
        write_config(pipe, self.keys,
                               Meta(self.shards, self.max_payload_bytes))

    def job_key(self, job_id: str) -> str:
        check_job_id(job_id)
        return self.keys.job(shard_of(job_id, self.shards), job_id)

    def slot_key(self, slot: str) -> str:
        job_id, _ = split_slot_id(slot)
        return self.keys.slot(shard_of(job_id, self.shards), slot)

    def prefix_of(self, job_id: str) -> str:
        check_job_id(job_id)
        return self.keys.prefix(shard_of(job_id, self.shards))

    def runs_key(self, job_id: str) -> str:
        return self.keys.runs(shard_of(job_id, self.shards), job_id)

    def fires_key(self, job_id: str) -> str:
        return self.keys.fires(shard_of(job_id, self.shards), job_id)

    def ontime_key(self, job_id: str) -> str:
        return self.keys.ontime(shard_of(job_id, self.shards), job_id)

    def behind_key(self, job_id: str) -> str:
        return self.keys.behind(shard_of(job_id, self.shards))

    def cron_key(self, job_id: str) -> str:
        return self.keys.cron(shard_of(job_id, self.shards))

    def job(self, job_id: str, raw: Any, watermark: Any) -> Job:
        """A job from its hash, with `next_fire_ms` from the clock and, for cron jobs, the
        job's watermark in the `cron` set (None once the job has ended)."""
        if not raw:
            raise JobNotFound(job_id)
        job = job_from_hash(job_id, raw)
        now = self.clock.now_ms()
        next_ms: int | None = None
        if job.deleted_ms:
            pass  # its series is over
        elif job.cron:
            if watermark is not None:
                try:
                    spec = CronSpec(job.cron, job.tz or "UTC")
                except ValidationError:
                    # Written past the SDK: no next fire (the materializer ends its series),
                    # and the job still shows, in a listing too.
                    return job
                # None past the calendar's end (year 9999): the watermark is the last.
                ahead = next(spec.after(max(now, job.start_ms or 0) - 1), None)
                next_ms = int(float(watermark)) if ahead is None else min(
                    int(float(watermark)), ahead)
                if job.end_ms and next_ms > job.end_ms:
                    next_ms = None
        elif job.fire_ms > now:
            next_ms = job.fire_ms
        return msgspec.structs.replace(job, next_fire_ms=next_ms)

    def list_order(self, replies: list[Any], limit: int) -> list[str]:
        """Newest first across shards: replies are ZREVRANGE ... WITHSCORES per shard."""
        pairs = [(float(score), member.decode()) for reply in replies for member, score in reply]
        pairs.sort(reverse=True)
        return [job_id for _, job_id in pairs[:limit]]


def durability_of(value: str) -> Durability:
    try:
        return Durability(value)
    except ValueError:
        raise ValidationError("durability", f"{value!r} is not a durability; use one of "
                                            f"{', '.join(Durability)}") from None


def ready(core: ClientState) -> Op[None]:
    """Learn the namespace's shard count and anchor the clock, in one round trip, when
    either is not known yet. The same round trip reads the task catalog: a client's copy
    is as fresh as its clock's last re-sync (RedisClock: every 5 s), and a submit pays no
    round trip of its own for it."""
    need_meta, need_time = not core.shards, core.clock.stale()
    if not (need_meta or need_time):
        return
    pipe = Pipe()
    if need_meta:
        pipe.hmget(core.keys.meta, *META_FIELDS)
    read_catalog(pipe, core)
    if need_time:
        pipe.time()
    replies = yield pipe
    if need_meta:
        core.adopt(replies[0], written=False)
    first = 1 if need_meta else 0
    core.take_catalog(replies[first], replies[first + 1])
    if need_time:
        core.clock.anchor(replies[-1])


def read_catalog(pipe: Pipe, core: ClientState) -> None:
    """Queue the reads `take_catalog` takes: the catalog, then the `strict_tasks` setting."""
    pipe.hgetall(core.keys.tasks)
    pipe.hget(core.keys.meta, STRICT_TASKS)


def ensure_namespace(core: ClientState) -> Op[None]:
    """Create the namespace (scheduler/core/namespace.py's policy) the first time this
    client writes."""
    if not core.created:
        pipe = Pipe()
        core.namespace_writes(pipe)
        core.adopt((yield pipe)[-1], written=True)
        pipe = Pipe()
        core.config_writes(pipe)
        yield pipe
        core.created = True


def create_namespace(core: ClientState, max_payload_bytes: int | None = None) -> Op[int]:
    """Create the namespace now, with this client's shard count and payload limit (or
    `max_payload_bytes`), as its first submit would. A no-op when it exists with them; a
    shard count given to the client, or a `max_payload_bytes`, that differs from the stored
    one is a NamespaceError naming both. For deployments that start workers and scheduler
    nodes before anything is submitted: they wait for the namespace, and start within about
    a second of its creation. Returns its shard count."""
    if max_payload_bytes is not None:
        check_payload_limit(max_payload_bytes)
    yield from ready(core)
    if max_payload_bytes is not None and not core.created:
        core.max_payload_bytes = max_payload_bytes
    yield from ensure_namespace(core)
    if max_payload_bytes is not None and core.max_payload_bytes != max_payload_bytes:
        raise NamespaceError(
            f"namespace {core.namespace!r} has a payload limit of {core.max_payload_bytes:,} "
            f"bytes in Redis, not the {max_payload_bytes:,} asked for: the limit is fixed when "
            f"a namespace is created (omit it to keep {core.max_payload_bytes:,}, or use a new "
            f"namespace)")
    return core.shards


def shards(core: ClientState) -> Op[int]:
    """The namespace's shard count (the one it will be created with, before its first
    write). A property of Client; `await client.shards()` in AsyncClient."""
    yield from ready(core)
    return core.shards


def now_ms(core: ClientState) -> Op[int]:
    """Redis time, as every transition sees it."""
    yield from ready(core)
    return core.clock.now_ms()


def retention(core: ClientState) -> Op[RetentionSettings]:
    """How long the namespace keeps finished work in Redis (`set_retention`); each setting
    never set is at its default."""
    return (yield from _retention(core))


def strict_tasks(core: ClientState) -> Op[bool]:
    """Whether the namespace refuses a submit of a task that no worker has registered
    (`set_strict_tasks`); off unless set."""
    pipe = Pipe()
    pipe.hget(core.keys.meta, STRICT_TASKS)
    return bool((yield pipe)[0] in (b"1", "1"))


def set_strict_tasks(core: ClientState, on: bool) -> Op[bool]:
    """Turn the namespace's `strict_tasks` setting on or off. On: a submit (by name: not
    through a TaskHandle) of a task the task catalog does not list is refused with a
    ValidationError naming the known tasks, closest first, and nothing is written; the
    outbox relay moves such a row to outbox_rejected. Off (the default): such a submit
    warns (UnknownTaskWarning, once per task name per client) and goes ahead. Clients
    apply a change within their clock's re-sync interval (RedisClock: 5 s). Returns the
    setting now in force."""
    if not isinstance(on, bool):
        raise ValidationError("strict_tasks", f"{on!r} is not allowed; must be True or False")
    yield from ready(core)
    yield from ensure_namespace(core)
    pipe = Pipe()
    pipe.hset(core.keys.meta, STRICT_TASKS, "1" if on else "0")
    yield pipe
    core.strict_tasks = on
    return on


def _retention(core: ClientState) -> Op[RetentionSettings]:
    pipe = Pipe()
    read_retention(pipe, core.keys)
    return parse_retention((yield pipe)[0])


def set_retention(core: ClientState, retention: float | str | None = None,
                  retain_max: int | None = None, dead_retention: float | str | None = None
                  ) -> Op[RetentionSettings]:
    """Bound the finished work the namespace keeps in Redis: a finished slot (and its job,
    with its last slot) leaves once it finished `retention` ago (seconds, or
    text such as "90s", "1h", "7d") or once `retain_max` finished slots are younger than it,
    whichever comes first; a dead-lettered slot leaves `dead_retention` after it died. Each
    one left None keeps its value. Every scheduler node applies a change at its next pass
    (about a second), without a restart. Returns the settings now in force
    (the docs' "Retention" page)."""
    current = yield from _retention(core)
    settings = check_retention(
        current.retention_s if retention is None else retention,
        current.retain_max if retain_max is None else retain_max,
        current.dead_retention_s if dead_retention is None else dead_retention)
    yield from ready(core)
    yield from ensure_namespace(core)
    pipe = Pipe()
    # Only the settings given are written: another caller's change of the others stands.
    write_retention(pipe, core.keys, settings, [name for name, value in (
        ("retention_s", retention), ("retain_max", retain_max),
        ("dead_retention_s", dead_retention)) if value is not None])
    yield pipe
    return settings
