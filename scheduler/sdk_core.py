"""The SDK without I/O: what `Client` and `AsyncClient` share (scheduler/operations.py holds
the operations themselves, scheduler/client.py the two drivers).

An operation is a generator: it yields a request (`Pipe`, `Scripts`, `Io`, `StoreCall`) and
is sent the reply, or thrown the redis-py error the request raised. So one function is both
the blocking and the asyncio method, and the two clients cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from . import scripts
from .clock import Clock, RedisClock
from .connection import REDIS_ERRORS, RedisErrors, translate
from .cronspec import CronSpec
from .errors import (
    DurabilityError,
    JobNotFound,
    RedisUnavailable,
    SubmitError,
    ValidationError,
    submit_error,
)
from .jobspec import DEFAULT_RETRY, IMMEDIATE, JobSpec, dedupe_job_id, random_ids, spec_of
from .keys import DEFAULT_SHARDS, Keys, check_job_id, shard_of, split_slot_id
from .models import (
    Job,
    RetryPolicy,
    Slot,
    check_dedupe_key,
    check_delivery,
    check_priority,
    check_queue,
    check_task,
    check_timeout,
    encode_payload,
    job_fields,
    job_from_hash,
)
from .namespace import Meta, NamespaceMissing, check_shards, write_config
from .namespace import create as create_namespace
from .namespace import parse as parse_meta
from .schedule import resolve
from .states import Delivery, Durability, SlotStatus

if TYPE_CHECKING:
    from .tracing import SubmitTracer

R = TypeVar("R")
SUBMIT_CHUNK = 500  # jobs per script call: bounds how long one call holds Redis


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


class Io(msgspec.Struct, frozen=True):
    """A request served by a reader that has a blocking and an asyncio form, both called
    with the driver's connection first (the status readers of scheduler/status.py)."""

    blocking: Callable[..., Any]
    asyncio: Callable[..., Any]
    args: tuple[Any, ...]


class StoreCall(msgspec.Struct, frozen=True):
    """A request to the history store: `method(*args, **kwargs)` on it (from a thread, for
    the asyncio client: the stores are blocking)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}


Request = Pipe | Scripts | Io | StoreCall
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
    """One client's state and every decision that needs no I/O: validation, the rows and
    Lua calls of a submit, key names, and the decoding of replies."""

    def __init__(self, namespace: str, shards: int | None, clock: Clock | None,
                 max_payload_bytes: int, events_maxlen: int,
                 durability: str = Durability.PRIMARY, replicas: int = 1,
                 replica_timeout_s: float = 1.0) -> None:
        self.durability = durability_of(durability)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            raise ValidationError("replicas", f"{replicas!r} is not allowed; must be an "
                                              "integer >= 1")
        if not isinstance(replica_timeout_s, int | float) or not replica_timeout_s > 0:
            raise ValidationError("replica_timeout_s", f"{replica_timeout_s!r} is not "
                                                       "allowed; must be a number > 0")
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
        self.known_queues: set[str] = set()
        self.registered: set[str] | None = None  # queues added to the index, once it wrote
        self.at = "redis"  # where Redis is, for error messages: the driver sets it
        # Job-hash fields of the options most jobs share, computed once per distinct set.
        self._fields: dict[tuple[Any, ...], list[Any]] = {}
        self._checked: dict[tuple[Any, Any, Any], tuple[str, str, Delivery]] = {}
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
            self.shards = self.requested_shards or DEFAULT_SHARDS
            return
        self.shards = meta.shards
        if meta.max_payload_bytes is not None:
            self.max_payload_bytes = meta.max_payload_bytes

    def row(self, spec: JobSpec, now_ms: int) -> tuple[int, tuple[str, str, str, int, list[Any]]]:
        """Validate one job; return its shard and its submit row. Raises ValidationError."""
        # Names repeat across a batch: each distinct (task, queue, delivery) of plain strings
        # is checked once (anything else, unhashable values included, every time).
        given = (spec.task, spec.queue, spec.delivery)
        plain = type(given[0]) is str and type(given[1]) is str and type(given[2]) is str
        names = self._checked.get(given) if plain else None
        if names is None:
            names = (check_task(spec.task), check_queue(spec.queue),
                     check_delivery(spec.delivery))
            if plain:
                if len(self._checked) >= 4096:
                    self._checked.clear()
                self._checked[given] = names
        task, queue, delivery = names
        options = spec.schedule_options()
        schedule = IMMEDIATE if options is None else resolve(now_ms, **options)
        timeout = check_timeout(spec.timeout)
        priority = check_priority(spec.priority)
        dedupe = check_dedupe_key(spec.dedupe_key)
        retry = spec.retry or DEFAULT_RETRY
        if not isinstance(retry, RetryPolicy):
            raise ValidationError("retry", "must be a RetryPolicy")
        payload = encode_payload(spec.payload, self.max_payload_bytes)
        job_id = dedupe_job_id(dedupe) if dedupe else random_ids.next()
        if dedupe is None and not schedule.fields:
            key = (timeout, retry, delivery, schedule.kind, priority)
            rest = self._fields.get(key)
            if rest is None:
                rest = self._fields[key] = job_fields(b"null", timeout, retry, delivery, None,
                                                      schedule.kind, None, priority)
            fields = ["payload", payload, *rest] if payload != b"null" else list(rest)
        else:
            fields = job_fields(payload, timeout, retry, delivery, dedupe, schedule.kind,
                                schedule.fields, priority)
        fire_ms = now_ms if schedule is IMMEDIATE else schedule.fire_ms
        return shard_of(job_id, self.shards), (job_id, task, queue, fire_ms, fields)

    def submit_calls(self, specs: Iterable[JobSpec | Mapping[str, Any]],
                     extra: tuple[Any, ...] = ()
                     ) -> tuple[list[str], list[scripts.Call], list[list[int]]]:
        """Validate every job first (bad input writes nothing), then group by shard. Returns
        the ids in input order, the calls, and which jobs (input indexes) each call holds.
        `extra` job-hash fields go with every job (tracing.py's traceparent)."""
        now = self.clock.now_ms()
        ids: list[str] = []
        by_shard: dict[int, list[tuple[str, str, str, int, list[Any]]]] = {}
        index: dict[int, list[int]] = {}
        for i, raw in enumerate(specs):
            spec = raw if isinstance(raw, JobSpec) else spec_of(raw)
            shard, row = self.row(spec, now)
            ids.append(row[0])
            by_shard.setdefault(shard, []).append(row)
            index.setdefault(shard, []).append(i)
            self.known_queues.add(row[2])
        if extra:
            for row in (row for rows in by_shard.values() for row in rows):
                row[4].extend(extra)
        calls, members = [], []
        for shard, rows in by_shard.items():
            for i in range(0, len(rows), SUBMIT_CHUNK):
                calls.append(scripts.submit(self.keys.prefix(shard), now, self.events_maxlen,
                                            rows[i:i + SUBMIT_CHUNK]))
                members.append(index[shard][i:i + SUBMIT_CHUNK])
        return ids, calls, members

    def namespace_writes(self, pipe: Any) -> None:
        """The first write of a client: create the namespace (the policy is namespace.py's)."""
        create_namespace(pipe, self.keys, self.shards, self.max_payload_bytes)

    def ask_exist(self, pipe: Any, ids: list[str]) -> None:
        """After a broken submit round trip: which of its jobs are there?"""
        for job_id in ids:
            pipe.exists(self.job_key(job_id))

    def config_writes(self, pipe: Any) -> None:
        """Each shard's copy of the namespace's limits, which its scripts enforce."""
        write_config(pipe, self.keys,
                               Meta(self.shards, self.max_payload_bytes))

    def submit_outcome(self, ids: list[str], members: list[list[int]], results: list[Any],
                       exists: list[Any] | None, at: str,
                       cause: BaseException | None = None) -> None:
        """Raise SubmitError unless every call succeeded. `results` has each call's reply or
        exception (None: unknown, the round trip broke with `cause`); `exists`, when Redis
        could be asked afterwards, whether each job id is there."""
        failures = [r for r in results if not isinstance(r, list)]
        if not failures:
            return
        written, not_written, unknown = [], [], []
        for call_members, result in zip(members, results, strict=True):
            for i in call_members:
                if isinstance(result, list) or (exists is not None and exists[i]):
                    written.append(i)
                elif isinstance(result, BaseException) or exists is not None:
                    not_written.append(i)
                else:
                    unknown.append(i)
        cause = cause or next((r for r in failures if isinstance(r, BaseException)), None)
        failure = (translate(cause, at) if isinstance(cause, REDIS_ERRORS)
                   else RedisUnavailable(f"the connection to {at} broke ({cause})", at))
        written.sort()
        raise submit_error(
            failure, f"{failure}; submit_many wrote {len(written)} of {len(ids)} jobs"
            + (f", {len(unknown)} unknown" if unknown else "")
            + " (SubmitError.written has their ids)", [ids[i] for i in written],
            not_written, unknown) from cause

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
                spec = CronSpec(job.cron, job.tz or "UTC")
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


def nothing_written(n: int, exc: RedisErrors, at: str) -> SubmitError:
    failure = translate(exc, at)
    return submit_error(failure, f"{failure}; submit_many wrote none of its {n} jobs", [],
                        list(range(n)), [])


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
