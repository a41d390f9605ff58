"""The SDK without I/O: what `Client` and `AsyncClient` share (scheduler/sdk/operations.py holds
the operations themselves, scheduler/sdk/client.py the two drivers).

An operation is a generator: it yields a request (`Pipe`, `Scripts`, `ScriptStream`, `Io`,
`StoreCall`) and
is sent the reply, or thrown the redis-py error the request raised. So one function is both
the blocking and the asyncio method, and the two clients cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

import scheduler.scripts.calls as scripts
from scheduler.core.cron import CronSpec
from scheduler.core.errors import DurabilityError, JobNotFound, ValidationError
from scheduler.core.finite import finite_number
from scheduler.core.keys import (
    DEFAULT_CLUSTER_SHARDS,
    DEFAULT_SHARDS,
    Keys,
    check_job_id,
    shard_of,
    split_slot_id,
)
from scheduler.core.models import Job, Slot, job_from_hash
from scheduler.core.namespace import Meta, NamespaceMissing, check_shards, write_config
from scheduler.core.namespace import create as create_namespace
from scheduler.core.namespace import parse as parse_meta
from scheduler.core.states import Delivery, Durability, SlotStatus
from scheduler.redis.clock import Clock, RedisClock
from scheduler.redis.failures import REDIS_ERRORS, translate

if TYPE_CHECKING:
    from scheduler.observe.tracing import SubmitTracer

R = TypeVar("R")


class Pipe:
    """A request: commands for one pipelined round trip, recorded as a redis-py pipeline
    would take them (`pipe.hgetall(key)`); the reply is the list of their replies."""

    def __init__(self, raise_on_error: bool = True) -> None:
        self.commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.raise_on_error = raise_on_error

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            self.commands.append((name, args, kwargs))
        return record


class Scripts(msgspec.Struct, frozen=True):
    """A request: Lua calls in one round trip (scripts.run_*); the reply is their replies.
    With `wait` = (replicas, timeout_ms) the round trip ends with WAIT, and the reply is
    (their replies, the fewest replicas that confirmed a round trip's writes)."""

    calls: list[scripts.Call]
    raise_errors: bool = True
    wait: tuple[int, int] | None = None


class ScriptStream(msgspec.Struct, frozen=True):
    """A request: Lua calls in one pipelined round trip, each written to Redis as soon as
    the iterator makes it, so the client makes call k+1 while Redis runs call k
    (script_stream.py; submit_many's batches). The reply is (their replies, each one's
    reply or exception; the fewest replicas that confirmed, -1 without `wait`), as for
    Scripts with `wait`."""

    calls: Iterator[scripts.Call]
    wait: tuple[Any, ...] | None = None


class Io(msgspec.Struct, frozen=True):
    """A request served by a reader that has a blocking and an asyncio form, both called
    with the driver's connection first (the status readers of scheduler/observe/status.py)."""

    blocking: Callable[..., Any]
    asyncio: Callable[..., Any]
    args: tuple[Any, ...]


class StoreCall(msgspec.Struct, frozen=True):
    """A request to the history store: `method(*args, **kwargs)` on it (from a thread, for
    the asyncio client: the stores are blocking)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}


Request = Pipe | Scripts | ScriptStream | Io | StoreCall
Op = Generator[Request, Any, R]


class Done(msgspec.Struct, frozen=True):
    """An operation's result."""

    value: Any


def advance(op: Op[Any], reply: Any = None, error: Exception | None = None) -> Request | Done:
    """One step of a driver: send the operation the reply to its last request, or throw it
    the error that request raised (the operation may handle it); its next request, or Done.
    An error the operation lets out leaves from here."""
    try:
        return op.send(reply) if error is None else op.throw(error)
    except StopIteration as stop:
        return Done(stop.value)


@contextmanager
def translated(at: str) -> Iterator[None]:
    """A redis-py error that leaves an operation leaves the SDK as the library's own
    (RedisFailure), naming where Redis is and what to do."""
    try:
        yield
    except REDIS_ERRORS as exc:
        raise translate(exc, at) from exc


class Core:
    """One client's state and every decision that needs no I/O: key names, the decoding
    of replies, and (with submit_batch.py, which validates a submit and makes its Lua
    calls) the caches a submit keeps."""

    def __init__(self, namespace: str, shards: int | None, clock: Clock | None,
                 max_payload_bytes: int, events_maxlen: int,
                 durability: str = Durability.PRIMARY, replicas: int = 1,
                 replica_timeout_s: float = 1.0) -> None:
        self.durability = durability_of(durability)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            raise ValidationError("replicas", f"{replicas!r} is not allowed; must be an "
                                              "integer >= 1")
        if not finite_number(replica_timeout_s) or not replica_timeout_s > 0:
            raise ValidationError("replica_timeout_s", f"{replica_timeout_s!r} is not "
                                                       "allowed; must be a finite number > 0")
        self.replicas = replicas
        self.replica_timeout_ms = max(1, int(replica_timeout_s * 1000))
        self.fsync_checked = False  # durability="fsynced": the server can (operations.py)
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

    def adopt(self, reply: Any, *, written: bool) -> None:
        """Take the shard count and payload limit stored in Redis (namespace.read's reply).
        Before the namespace's first write nothing is stored yet: reads use the count it
        will be created with, and payloads this client's own limit (namespace.py)."""
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
        """The first write of a client: create the namespace (the policy is namespace.py's)."""
        create_namespace(pipe, self.keys, self.shards, self.max_payload_bytes)

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
                ahead = spec.next_after(max(now, job.start_ms or 0) - 1)
                next_ms = min(int(float(watermark)), ahead)
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


def history_query(namespace: str, job_id: str | None, status: str | None,
                   since: datetime | int | None, until: datetime | int | None,
                   limit: int) -> dict[str, Any]:
    """The store.history() arguments, validated (a bad one raises and nothing is read)."""
    if job_id is not None:
        check_job_id(job_id)
    if status is not None:
        try:
            status = SlotStatus(status).value
        except ValueError:
            raise ValidationError("status", f"{status!r} is not a slot status; use one of "
                                  + ", ".join(s.value for s in SlotStatus)) from None
    if not isinstance(limit, int) or limit < 1:
        raise ValidationError("limit", f"{limit!r} is not allowed; must be an integer >= 1")
    return {"namespace": namespace, "job_id": job_id, "status": status,
            "since_ms": ms_of(since, 0), "until_ms": ms_of(until, 2**62), "limit": limit}


def merge_runs(job_id: str, live: list[Slot], past: list[Slot]) -> list[Slot]:
    have = {s.slot_id for s in live}
    merged = live + [s for s in past if s.slot_id not in have]
    if not merged:
        raise JobNotFound(job_id)
    return sorted(merged, key=lambda s: s.fire_ms)


def ms_of(value: datetime | int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError("since/until", "datetimes must be timezone-aware (UTC)")
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValidationError("since/until", f"{value!r} is not a datetime or a time in ms")


def durability_of(value: str) -> Durability:
    try:
        return Durability(value)
    except ValueError:
        raise ValidationError("durability", f"{value!r} is not a durability; use one of "
                                            f"{', '.join(Durability)}") from None


def not_replicated(core: Core, ids: list[str], confirmed: int,
                   mode: Durability = Durability.REPLICATED) -> DurabilityError:
    if mode is Durability.FSYNCED:
        what, wanted, loss = "its AOF did not fsync them", 1, "a restart"
    else:
        what = f"only {confirmed} of the {core.replicas} replica(s) asked confirmed them"
        wanted, loss = core.replicas, "a failover"
    return DurabilityError(
        f"Redis at {core.at} wrote the {len(ids)} job(s) but {what} within "
        f"{core.replica_timeout_ms} ms: they may or may not survive {loss}; submitting "
        f"them again with the same dedupe keys is safe (DurabilityError.written has their ids)",
        core.at, ids, confirmed, wanted)
