"""The SDK: `Client` (blocking) and `AsyncClient` (asyncio) share `_Core`, which validates
input, builds the Lua calls and decodes replies; the two classes only do the I/O.

Every Redis failure leaves the SDK as a `scheduler.errors.RedisFailure` (`RedisUnavailable`:
unreachable, too slow, not Redis; `RedisRefused`: out of memory, read-only, no such
database...), with the redis-py exception chained as its cause; never as a redis-py one.
`submit_many` writes a batch as one atomic script per shard chunk: it either wrote every job,
or raises `SubmitError`, whose `written` holds exactly the ids that are in Redis.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import msgspec
import redis

from . import admin, scripts
from .clock import Clock, RedisClock
from .connection import SDK_TIMEOUT_S, async_redis, sync_redis, translate, where
from .cronspec import CronSpec
from .errors import (
    JobNotFound,
    RedisUnavailable,
    SlotNotFound,
    StoreUnavailable,
    SubmitError,
    ValidationError,
    submit_error,
)
from .keys import DEFAULT_SHARDS, Keys, check_job_id, shard_of, slot_id, split_slot_id
from .models import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    Job,
    RetryPolicy,
    Slot,
    check_dedupe_key,
    check_delivery,
    check_queue,
    check_task,
    check_timeout,
    encode_payload,
    job_fields,
    job_from_hash,
    slot_from_hash,
)
from .namespace import (
    EVENTS_MAXLEN,
    META_FIELDS,
    Meta,
    NamespaceMissing,
    check_shards,
    write_config,
)
from .namespace import create as create_namespace
from .namespace import parse as parse_meta
from .schedule import Schedule, resolve
from .states import Delivery, SlotStatus
from .status import (
    Status,
    WorkerStatus,
    read_status,
    read_status_async,
    read_workers,
    read_workers_async,
)

if TYPE_CHECKING:
    from .store import HistoryStore

P = ParamSpec("P")
R = TypeVar("R")
SUBMIT_CHUNK = 500  # jobs per script call: bounds how long one call holds Redis


class JobSpec(msgspec.Struct, kw_only=True):
    """One job for `submit_many`; the fields are `submit`'s arguments.

    At most one of `delay` (seconds or timedelta), `at` (timezone-aware datetime) and `cron`
    (5 fields, or 6 with seconds first); the rest apply to `cron` only: `tz` (IANA zone,
    default UTC), `catchup` (all | latest | none, default all) with `catchup_limit` (default
    1000), `overlap` (allow | skip, default allow), `start_at` / `end_at` (aware datetimes).
    """

    task: str
    payload: Any = None
    queue: str = "default"
    timeout: float | None = None
    retry: RetryPolicy | None = None
    delivery: str = "at_least_once"
    dedupe_key: str | None = None
    delay: Any = None
    at: Any = None
    cron: str | None = None
    tz: str | None = None
    catchup: str | None = None
    catchup_limit: int | None = None
    overlap: str | None = None
    start_at: Any = None
    end_at: Any = None

    def schedule_options(self) -> dict[str, Any] | None:
        """The schedule arguments given, or None for a plain immediate job (the common case
        of submit_many, kept off the slower path)."""
        if (self.delay is None and self.at is None and self.cron is None and self.tz is None
                and self.catchup is None and self.catchup_limit is None and self.overlap is None
                and self.start_at is None and self.end_at is None):
            return None  # a quarter of submit_many's CPU went to building and testing a dict
        return {name: getattr(self, name) for name in _SCHEDULE_OPTIONS}


DEFAULT_RETRY = RetryPolicy()
IMMEDIATE = Schedule(kind="immediate", fire_ms=0, fields={})  # fire_ms: the submit's now
_SCHEDULE_OPTIONS = ("delay", "at", "cron", "tz", "catchup", "catchup_limit", "overlap",
                     "start_at", "end_at")


class _RandomIds:
    """128-bit random job ids (32 hex digits) from os.urandom, drawn 4,096 at a time (181 ns
    an id instead of 439 for a call each). A forked child drops the bytes it inherited, so it
    never repeats its parent's ids."""

    def __init__(self) -> None:
        self._hex = ""
        self._at = 0
        os.register_at_fork(after_in_child=self._drop)

    def _drop(self) -> None:
        self._hex, self._at = "", 0

    def next(self) -> str:
        at = self._at
        if at >= len(self._hex):
            self._hex, at = os.urandom(16 * 4096).hex(), 0
        self._at = at + 32
        return self._hex[at:at + 32]


_random_ids = _RandomIds()


def dedupe_job_id(key: str) -> str:
    """A dedupe key maps to one job id, so a repeat submit finds the first job."""
    return "k" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


class _Core:
    def __init__(self, namespace: str, shards: int | None, clock: Clock | None,
                 max_payload_bytes: int, events_maxlen: int) -> None:
        self.keys = Keys(namespace)
        self.namespace = namespace
        self.requested_shards = check_shards(shards)
        self.shards = 0
        self.clock: Clock = clock or RedisClock()
        self.max_payload_bytes = max_payload_bytes
        self.events_maxlen = events_maxlen
        self.known_queues: set[str] = set()
        # Job-hash fields of the options most jobs share, computed once per distinct set.
        self._fields: dict[tuple[Any, ...], list[Any]] = {}
        self._checked: dict[tuple[Any, Any, Any], tuple[str, str, Delivery]] = {}

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
        dedupe = check_dedupe_key(spec.dedupe_key)
        retry = spec.retry or DEFAULT_RETRY
        if not isinstance(retry, RetryPolicy):
            raise ValidationError("retry", "must be a RetryPolicy")
        payload = encode_payload(spec.payload, self.max_payload_bytes)
        job_id = dedupe_job_id(dedupe) if dedupe else _random_ids.next()
        if dedupe is None and not schedule.fields:
            key = (timeout, retry, delivery, schedule.kind)
            rest = self._fields.get(key)
            if rest is None:
                rest = self._fields[key] = job_fields(b"null", timeout, retry, delivery, None,
                                                      schedule.kind)
            fields = ["payload", payload, *rest] if payload != b"null" else list(rest)
        else:
            fields = job_fields(payload, timeout, retry, delivery, dedupe, schedule.kind,
                                schedule.fields)
        fire_ms = now_ms if schedule is IMMEDIATE else schedule.fire_ms
        return shard_of(job_id, self.shards), (job_id, task, queue, fire_ms, fields)

    def submit_calls(self, specs: Iterable[JobSpec | Mapping[str, Any]]
                     ) -> tuple[list[str], list[scripts.Call], list[list[int]]]:
        """Validate every job first (bad input writes nothing), then group by shard. Returns
        the ids in input order, the calls, and which jobs (input indexes) each call holds."""
        now = self.clock.now_ms()
        ids: list[str] = []
        by_shard: dict[int, list[tuple[str, str, str, int, list[Any]]]] = {}
        index: dict[int, list[int]] = {}
        for i, raw in enumerate(specs):
            spec = raw if isinstance(raw, JobSpec) else _spec(raw)
            shard, row = self.row(spec, now)
            ids.append(row[0])
            by_shard.setdefault(shard, []).append(row)
            index.setdefault(shard, []).append(i)
            self.known_queues.add(row[2])
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
        failure = (translate(cause, at) if isinstance(cause, redis.exceptions.RedisError)
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
        if job.cron:
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


def _history_query(namespace: str, job_id: str | None, status: str | None,
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
            "since_ms": _ms(since, 0), "until_ms": _ms(until, 2**62), "limit": limit}


def _merge_runs(job_id: str, live: list[Slot], past: list[Slot]) -> list[Slot]:
    have = {s.slot_id for s in live}
    merged = live + [s for s in past if s.slot_id not in have]
    if not merged:
        raise JobNotFound(job_id)
    return sorted(merged, key=lambda s: s.fire_ms)


def _open_history(source: str | HistoryStore | None) -> HistoryStore:
    if source is not None and not isinstance(source, str):
        return source
    from .store import open_store

    store = open_store(source)
    store.check()
    return store


def _ms(value: datetime | int | None, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError("since/until", "datetimes must be timezone-aware (UTC)")
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValidationError("since/until", f"{value!r} is not a datetime or a time in ms")


def _spec(raw: Mapping[str, Any]) -> JobSpec:
    try:
        return JobSpec(**raw)
    except TypeError as exc:
        raise ValidationError("jobs", f"each item must be a JobSpec or a mapping of submit "
                                      f"arguments: {exc}") from None


def _specs(task: str, payload: Any, queue: str, timeout: float | None,
           retry: RetryPolicy | None, delivery: str, dedupe_key: str | None,
           schedule: dict[str, Any]) -> list[JobSpec]:
    return [JobSpec(task=task, payload=payload, queue=queue, timeout=timeout, retry=retry,
                    delivery=delivery, dedupe_key=dedupe_key, **schedule)]


def _options(arguments: dict[str, Any]) -> dict[str, Any]:
    """The schedule options among a submit call's arguments."""
    return {name: arguments[name] for name in _SCHEDULE_OPTIONS}


def _translated(method: Callable[P, R]) -> Callable[P, R]:
    """A Client method whose redis-py errors leave as the library's (RedisFailure)."""
    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except redis.exceptions.RedisError as exc:
            raise translate(exc, where(args[0].redis)) from exc  # type: ignore[attr-defined]
    return wrapper


def _translated_async(method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """The same for an AsyncClient coroutine."""
    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except redis.exceptions.RedisError as exc:
            raise translate(exc, where(args[0].redis)) from exc  # type: ignore[attr-defined]
    return wrapper


def _nothing_written(n: int, exc: redis.exceptions.RedisError, at: str) -> SubmitError:
    failure = translate(exc, at)
    return submit_error(failure, f"{failure}; submit_many wrote none of its {n} jobs", [],
                        list(range(n)), [])


class Client:
    """Blocking SDK. `Client("redis://localhost:6379/0", namespace="sched")`."""

    def __init__(self, redis_url: str = "redis://127.0.0.1:6379/0", namespace: str = "sched", *,
                 shards: int | None = None, clock: Clock | None = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 events_maxlen: int = EVENTS_MAXLEN,
                 history: str | HistoryStore | None = None,
                 timeout_s: float = SDK_TIMEOUT_S) -> None:
        """`history`: the history store (a Postgres DSN, a SQLite path, or a store); None
        is the embedded default file, opened on first use. `max_payload_bytes` is the
        namespace's limit if this client creates it (its scripts enforce it); a client of an
        existing namespace follows the limit stored there. `timeout_s`: how long one call
        waits for Redis (to connect, and for each reply) before RedisUnavailable."""
        self._core = _Core(namespace, shards, clock, max_payload_bytes, events_maxlen)
        self.redis = sync_redis(redis_url, timeout_s=timeout_s)
        self.keys = self._core.keys
        self._registered: set[str] | None = None
        self._history_source = history
        self._store: HistoryStore | None = None

    @property
    @_translated
    def shards(self) -> int:
        self._ready()
        return self._core.shards

    def _ready(self) -> None:
        core = self._core
        if not core.shards:
            core.adopt(self.redis.hmget(self.keys.meta, *META_FIELDS), written=False)
        if core.clock.stale():
            core.clock.anchor(self.redis.time())

    def _ensure_namespace(self) -> None:
        """Fix the namespace's shard count and limits the first time this client writes."""
        self._ready()
        if self._registered is None:
            core = self._core
            pipe = self.redis.pipeline(transaction=False)
            core.namespace_writes(pipe)
            core.adopt(pipe.execute()[-1], written=True)
            pipe = self.redis.pipeline(transaction=False)
            core.config_writes(pipe)
            pipe.execute()
            self._registered = set()

    @_translated
    def submit(self, task: str, payload: Any = None, *, queue: str = "default",
               timeout: float | None = None, retry: RetryPolicy | None = None,
               delivery: str = "at_least_once", dedupe_key: str | None = None,
               delay: float | timedelta | None = None, at: datetime | None = None,
               cron: str | None = None, tz: str | None = None, catchup: str | None = None,
               catchup_limit: int | None = None, overlap: str | None = None,
               start_at: datetime | None = None, end_at: datetime | None = None) -> str:
        """Submit one job; returns its id (the first job's id for a repeated dedupe key).

        Runs now unless one of delay=, at=, cron= is given (with cron: tz=, catchup=,
        catchup_limit=, overlap=, start_at=, end_at=); see JobSpec."""
        return self.submit_many(_specs(task, payload, queue, timeout, retry, delivery,
                                       dedupe_key, _options(locals())))[0]

    def submit_many(self, jobs: Iterable[JobSpec | Mapping[str, Any]]) -> list[str]:
        """Submit a batch in one pipelined round trip; ids in input order. Every job is
        validated before anything is written. Each shard's part (up to 500 jobs) is written
        atomically; if a Redis failure leaves any job unwritten, or its fate unknown,
        SubmitError says which (`written` holds exactly the ids that are in Redis)."""
        jobs = list(jobs)
        core, at = self._core, where(self.redis)
        try:
            self._ready()
            ids, calls, members = core.submit_calls(jobs)  # validates all before any write
            before = (core.shards, core.max_payload_bytes)
            self._ensure_namespace()
            assert self._registered is not None
            if (core.shards, core.max_payload_bytes) != before:  # another client made it first
                ids, calls, members = core.submit_calls(jobs)
            new_queues = core.known_queues - self._registered
            if new_queues:
                self.redis.sadd(self.keys.queues, *new_queues)
                self._registered |= new_queues
        except redis.exceptions.RedisError as exc:
            raise _nothing_written(len(jobs), exc, at) from exc
        exists: list[bool] | None = None
        cause: redis.exceptions.RedisError | None = None
        try:
            results: list[Any] = scripts.run_sync(self.redis, calls, raise_errors=False)
        except redis.exceptions.RedisError as exc:  # unknown which calls ran: ask
            results, cause = [None] * len(calls), exc
            try:
                pipe = self.redis.pipeline(transaction=False)
                core.ask_exist(pipe, ids)
                exists = [bool(x) for x in pipe.execute()]
            except redis.exceptions.RedisError:
                pass
        core.submit_outcome(ids, members, results, exists, at, cause)
        return ids

    @_translated
    def get_job(self, job_id: str) -> Job:
        self._ready()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self._core.job_key(job_id))
        pipe.zscore(self._core.cron_key(job_id), job_id)
        raw, watermark = pipe.execute()
        return self._core.job(job_id, raw, watermark)

    @_translated
    def list_jobs(self, limit: int = 100) -> list[Job]:
        """Jobs with a schedule (delayed, at, cron), newest first, with their next fire
        time. Immediate jobs are not indexed (see `sched runs` / `slots` for those)."""
        self._ready()
        core = self._core
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(core.shards):
            pipe.zrevrange(self.keys.jobs(shard), 0, limit - 1, withscores=True)
        ids = core.list_order(pipe.execute(), limit)
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(core.job_key(job_id))
            pipe.zscore(core.cron_key(job_id), job_id)
        out = pipe.execute()
        return [core.job(j, out[2 * i], out[2 * i + 1]) for i, j in enumerate(ids)]

    @_translated
    def slots(self, job_id: str) -> list[Slot]:
        """Every slot of the job in fire-time order (one for a job that is not recurring)."""
        job = self.get_job(job_id)
        if not job.cron:
            return [self.get_slot(slot_id(job_id, job.fire_ms))]
        ids: Any = self.redis.zrange(self._core.runs_key(job_id), 0, -1)
        pipe = self.redis.pipeline(transaction=False)
        for s in ids:
            pipe.hgetall(self._core.slot_key(s.decode()))
        return [slot_from_hash(s.decode(), raw)
                for s, raw in zip(ids, pipe.execute(), strict=True) if raw]

    @_translated
    def get_slot(self, slot: str) -> Slot:
        self._ready()
        raw: Any = self.redis.hgetall(self._core.slot_key(slot))
        if not raw:
            raise SlotNotFound(slot)
        return slot_from_hash(slot, raw)

    # --- history (scheduler/store.py) ---------------------------------------------------

    @property
    def store(self) -> HistoryStore:
        if self._store is None:
            self._store = _open_history(self._history_source)
        return self._store

    def history(self, *, job_id: str | None = None, status: str | None = None,
                since: datetime | int | None = None, until: datetime | int | None = None,
                limit: int = 100) -> list[Slot]:
        """Slots from the history store, newest fire time first. since/until bound the fire
        time (aware datetimes or ms); status is a slot status."""
        query = _history_query(self._core.namespace, job_id, status, since, until, limit)
        return self.store.history(query.pop("namespace"), **query)

    @_translated
    def runs(self, job_id: str) -> list[Slot]:
        """A job's slots: those still in Redis, and from the history store those that have
        left it (retention); JobNotFound when neither knows the job."""
        try:
            live = self.slots(job_id)
        except JobNotFound:
            live = []
        try:
            past = self.history(job_id=job_id, limit=10_000)
        except StoreUnavailable:
            if not live:
                raise
            past = []  # Redis alone still answers for the slots it holds
        return _merge_runs(job_id, live, past)

    # --- operator actions (scheduler/admin.py) ------------------------------------------

    @property
    def events_maxlen(self) -> int:
        return self._core.events_maxlen

    @_translated
    def now_ms(self) -> int:
        """Redis time, as every transition sees it."""
        self._ready()
        return self._core.clock.now_ms()

    @_translated
    def cancel(self, ids: str | Iterable[str], reason: str = "cancelled by operator"
               ) -> dict[str, str]:
        """Cancel slots (or every slot of a job id); returns what happened to each slot."""
        return admin.cancel(self, [ids] if isinstance(ids, str) else ids, reason)

    @_translated
    def dead_letters(self, limit: int = 100) -> list[admin.DeadLetter]:
        return admin.dead_letters(self, limit)

    @_translated
    def replay(self, slot_ids: Iterable[str] | None = None) -> int:
        """Dispatch dead slots again as new attempts of the same slots (None: all)."""
        return admin.replay(self, slot_ids)

    @_translated
    def purge(self, slot_ids: Iterable[str] | None = None) -> int:
        """Remove slots from the dead-letter queue (None: all); their history stays."""
        return admin.purge(self, slot_ids)
    @_translated
    def status(self) -> Status:
        """The namespace at a glance: queues (depth, lag, rates), due backlog, dead letters,
        workers, shard owners. Read-only; a few pipelined round trips (scheduler/status.py)."""
        return read_status(self.redis, self.keys, self._core.clock)[0]

    @_translated
    def workers(self) -> list[WorkerStatus]:
        """The most recently seen workers (alive first), with heartbeats and in-flight counts."""
        return read_workers(self.redis, self.keys, self._core.clock)

    def close(self) -> None:
        self.redis.close()
        if self._store is not None and self._store is not self._history_source:
            self._store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """asyncio SDK with the same methods as `Client`, as coroutines."""

    def __init__(self, redis_url: str = "redis://127.0.0.1:6379/0", namespace: str = "sched", *,
                 shards: int | None = None, clock: Clock | None = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 events_maxlen: int = EVENTS_MAXLEN,
                 history: str | HistoryStore | None = None,
                 timeout_s: float = SDK_TIMEOUT_S) -> None:
        """As `Client`; store calls run in a thread, off the event loop."""
        self._core = _Core(namespace, shards, clock, max_payload_bytes, events_maxlen)
        self.redis = async_redis(redis_url, timeout_s=timeout_s)
        self.keys = self._core.keys
        self._registered: set[str] | None = None
        self._history_source = history
        self._store: HistoryStore | None = None

    async def _ready(self) -> None:
        core = self._core
        if not core.shards:
            core.adopt(await self.redis.hmget(self.keys.meta, *META_FIELDS),
                       written=False)
        if core.clock.stale():
            core.clock.anchor(await self.redis.time())

    async def _ensure_namespace(self) -> None:
        await self._ready()
        if self._registered is None:
            core = self._core
            pipe = self.redis.pipeline(transaction=False)
            core.namespace_writes(pipe)
            core.adopt((await pipe.execute())[-1], written=True)
            pipe = self.redis.pipeline(transaction=False)
            core.config_writes(pipe)
            await pipe.execute()
            self._registered = set()

    @_translated_async
    async def submit(self, task: str, payload: Any = None, *, queue: str = "default",
                     timeout: float | None = None, retry: RetryPolicy | None = None,
               delivery: str = "at_least_once", dedupe_key: str | None = None,
                     delay: float | timedelta | None = None, at: datetime | None = None,
                     cron: str | None = None, tz: str | None = None, catchup: str | None = None,
                     catchup_limit: int | None = None, overlap: str | None = None,
                     start_at: datetime | None = None, end_at: datetime | None = None) -> str:
        return (await self.submit_many(_specs(task, payload, queue, timeout, retry, delivery,
                                              dedupe_key, _options(locals()))))[0]

    async def submit_many(self, jobs: Iterable[JobSpec | Mapping[str, Any]]) -> list[str]:
        """As Client.submit_many."""
        jobs = list(jobs)
        core, at = self._core, where(self.redis)
        try:
            await self._ready()
            ids, calls, members = core.submit_calls(jobs)  # validates all before any write
            before = (core.shards, core.max_payload_bytes)
            await self._ensure_namespace()
            assert self._registered is not None
            if (core.shards, core.max_payload_bytes) != before:
                ids, calls, members = core.submit_calls(jobs)
            new_queues = core.known_queues - self._registered
            if new_queues:
                await self.redis.sadd(self.keys.queues, *new_queues)
                self._registered |= new_queues
        except redis.exceptions.RedisError as exc:
            raise _nothing_written(len(jobs), exc, at) from exc
        exists: list[bool] | None = None
        cause: redis.exceptions.RedisError | None = None
        try:
            results: list[Any] = await scripts.run_async(self.redis, calls, raise_errors=False)
        except redis.exceptions.RedisError as exc:
            results, cause = [None] * len(calls), exc
            try:
                pipe = self.redis.pipeline(transaction=False)
                core.ask_exist(pipe, ids)
                exists = [bool(x) for x in await pipe.execute()]
            except redis.exceptions.RedisError:
                pass
        core.submit_outcome(ids, members, results, exists, at, cause)
        return ids

    @_translated_async
    async def get_job(self, job_id: str) -> Job:
        await self._ready()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self._core.job_key(job_id))
        pipe.zscore(self._core.cron_key(job_id), job_id)
        raw, watermark = await pipe.execute()
        return self._core.job(job_id, raw, watermark)

    @_translated_async
    async def list_jobs(self, limit: int = 100) -> list[Job]:
        await self._ready()
        core = self._core
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(core.shards):
            pipe.zrevrange(self.keys.jobs(shard), 0, limit - 1, withscores=True)
        ids = core.list_order(await pipe.execute(), limit)
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(core.job_key(job_id))
            pipe.zscore(core.cron_key(job_id), job_id)
        out = await pipe.execute()
        return [core.job(j, out[2 * i], out[2 * i + 1]) for i, j in enumerate(ids)]

    @_translated_async
    async def slots(self, job_id: str) -> list[Slot]:
        job = await self.get_job(job_id)
        if not job.cron:
            return [await self.get_slot(slot_id(job_id, job.fire_ms))]
        ids: Any = await self.redis.zrange(self._core.runs_key(job_id), 0, -1)
        pipe = self.redis.pipeline(transaction=False)
        for s in ids:
            pipe.hgetall(self._core.slot_key(s.decode()))
        return [slot_from_hash(s.decode(), raw)
                for s, raw in zip(ids, await pipe.execute(), strict=True) if raw]

    @_translated_async
    async def get_slot(self, slot: str) -> Slot:
        await self._ready()
        raw: Any = await self.redis.hgetall(self._core.slot_key(slot))
        if not raw:
            raise SlotNotFound(slot)
        return slot_from_hash(slot, raw)

    @_translated_async
    async def status(self) -> Status:
        return await read_status_async(self.redis, self.keys, self._core.clock)

    async def history(self, *, job_id: str | None = None, status: str | None = None,
                      since: datetime | int | None = None, until: datetime | int | None = None,
                      limit: int = 100) -> list[Slot]:
        query = _history_query(self._core.namespace, job_id, status, since, until, limit)
        if self._store is None:
            self._store = await asyncio.to_thread(_open_history, self._history_source)
        return await asyncio.to_thread(self._store.history, query.pop("namespace"), **query)

    @_translated_async
    async def runs(self, job_id: str) -> list[Slot]:
        try:
            live = await self.slots(job_id)
        except JobNotFound:
            live = []
        try:
            past = await self.history(job_id=job_id, limit=10_000)
        except StoreUnavailable:
            if not live:
                raise
            past = []
        return _merge_runs(job_id, live, past)

    @_translated_async
    async def workers(self) -> list[WorkerStatus]:
        return await read_workers_async(self.redis, self.keys, self._core.clock)

    async def aclose(self) -> None:
        await self.redis.aclose()
        if self._store is not None and self._store is not self._history_source:
            await asyncio.to_thread(self._store.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
