"""The SDK: `Client` (blocking) and `AsyncClient` (asyncio) share `_Core`, which validates
input, builds the Lua calls and decodes replies; the two classes only do the I/O."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from . import admin, scripts
from .clock import Clock, RedisClock
from .connection import async_redis, sync_redis
from .errors import (
    ConfigError,
    JobNotFound,
    NamespaceError,
    SlotNotFound,
    StoreUnavailable,
    ValidationError,
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
from .states import SlotStatus

if TYPE_CHECKING:
    from .store import HistoryStore

MAX_SHARDS = 1024
SUBMIT_CHUNK = 500  # jobs per script call: bounds how long one call holds Redis
EVENTS_MAXLEN = 1_000_000


class JobSpec(msgspec.Struct, kw_only=True):
    """One job for `submit_many`; the fields are `submit`'s arguments."""

    task: str
    payload: Any = None
    queue: str = "default"
    timeout: float | None = None
    retry: RetryPolicy | None = None
    delivery: str = "at_least_once"
    dedupe_key: str | None = None


def dedupe_job_id(key: str) -> str:
    """A dedupe key maps to one job id, so a repeat submit finds the first job."""
    return "k" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


class _Core:
    def __init__(self, namespace: str, shards: int | None, clock: Clock | None,
                 max_payload_bytes: int, events_maxlen: int) -> None:
        if shards is not None and not 1 <= shards <= MAX_SHARDS:
            raise ConfigError(f"shards must be between 1 and {MAX_SHARDS}, not {shards}")
        self.keys = Keys(namespace)
        self.namespace = namespace
        self.requested_shards = shards
        self.shards = 0
        self.clock: Clock = clock or RedisClock()
        self.max_payload_bytes = max_payload_bytes
        self.events_maxlen = events_maxlen
        self.known_queues: set[str] = set()

    def adopt_shards(self, stored: Any, *, written: bool) -> None:
        """Take the shard count stored in Redis. Before the namespace's first write nothing is
        stored yet and reads use the count it will be created with."""
        if stored is None and not written:
            self.shards = self.requested_shards or DEFAULT_SHARDS
            return
        count = int(stored or 0)
        if self.requested_shards and count != self.requested_shards:
            raise NamespaceError(
                f"namespace {self.namespace!r} has {count} shards in Redis; it was created with "
                f"that count and it cannot change (omit shards= or use a new namespace)"
            )
        self.shards = count

    def row(self, spec: JobSpec, fire_ms: int) -> tuple[int, tuple[str, str, str, int, list[Any]]]:
        """Validate one job; return its shard and its submit row. Raises ValidationError."""
        task = check_task(spec.task)
        queue = check_queue(spec.queue)
        timeout = check_timeout(spec.timeout)
        delivery = check_delivery(spec.delivery)
        dedupe = check_dedupe_key(spec.dedupe_key)
        retry = spec.retry or RetryPolicy()
        if not isinstance(retry, RetryPolicy):
            raise ValidationError("retry", "must be a RetryPolicy")
        payload = encode_payload(spec.payload, self.max_payload_bytes)
        job_id = dedupe_job_id(dedupe) if dedupe else uuid.uuid4().hex
        fields = job_fields(payload, timeout, retry, delivery, dedupe, "immediate")
        return shard_of(job_id, self.shards), (job_id, task, queue, fire_ms, fields)

    def submit_calls(self, specs: Iterable[JobSpec | Mapping[str, Any]]
                     ) -> tuple[list[str], list[scripts.Call]]:
        """Validate every job first (bad input writes nothing), then group by shard."""
        now = self.clock.now_ms()
        ids: list[str] = []
        by_shard: dict[int, list[tuple[str, str, str, int, list[Any]]]] = {}
        for raw in specs:
            spec = raw if isinstance(raw, JobSpec) else _spec(raw)
            shard, row = self.row(spec, now)
            ids.append(row[0])
            by_shard.setdefault(shard, []).append(row)
            self.known_queues.add(row[2])
        calls = []
        for shard, rows in by_shard.items():
            for i in range(0, len(rows), SUBMIT_CHUNK):
                calls.append(scripts.submit(self.keys.prefix(shard), now, self.events_maxlen,
                                            rows[i:i + SUBMIT_CHUNK]))
        return ids, calls

    def job_key(self, job_id: str) -> str:
        check_job_id(job_id)
        return self.keys.job(shard_of(job_id, self.shards), job_id)

    def slot_key(self, slot: str) -> str:
        job_id, _ = split_slot_id(slot)
        return self.keys.slot(shard_of(job_id, self.shards), slot)


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
           retry: RetryPolicy | None, delivery: str, dedupe_key: str | None) -> list[JobSpec]:
    return [JobSpec(task=task, payload=payload, queue=queue, timeout=timeout, retry=retry,
                    delivery=delivery, dedupe_key=dedupe_key)]


class Client:
    """Blocking SDK. `Client("redis://localhost:6379/0", namespace="sched")`."""

    def __init__(self, redis_url: str = "redis://127.0.0.1:6379/0", namespace: str = "sched", *,
                 shards: int | None = None, clock: Clock | None = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 events_maxlen: int = EVENTS_MAXLEN,
                 history: str | HistoryStore | None = None) -> None:
        """`history`: the history store (a Postgres DSN, a SQLite path, or a store); None
        is the embedded default file, opened on first use."""
        self._core = _Core(namespace, shards, clock, max_payload_bytes, events_maxlen)
        self.redis = sync_redis(redis_url)
        self.keys = self._core.keys
        self._registered: set[str] | None = None
        self._history_source = history
        self._store: HistoryStore | None = None

    @property
    def shards(self) -> int:
        self._ready()
        return self._core.shards

    def _ready(self) -> None:
        core = self._core
        if not core.shards:
            core.adopt_shards(self.redis.hget(self.keys.meta, "shards"), written=False)
        if core.clock.stale():
            core.clock.anchor(self.redis.time())

    def _ensure_namespace(self) -> None:
        """Fix the shard count the first time this client writes (HSETNX: the first writer
        of a namespace wins, everyone after adopts its count)."""
        self._ready()
        if self._registered is None:
            core = self._core
            self.redis.hsetnx(self.keys.meta, "shards", core.shards)
            core.adopt_shards(self.redis.hget(self.keys.meta, "shards"), written=True)
            self._registered = set()

    def submit(self, task: str, payload: Any = None, *, queue: str = "default",
               timeout: float | None = None, retry: RetryPolicy | None = None,
               delivery: str = "at_least_once", dedupe_key: str | None = None) -> str:
        """Submit one immediate job; returns its id (the first job's id for a repeated
        dedupe key)."""
        return self.submit_many(_specs(task, payload, queue, timeout, retry, delivery,
                                       dedupe_key))[0]

    def submit_many(self, jobs: Iterable[JobSpec | Mapping[str, Any]]) -> list[str]:
        """Submit a batch in one pipelined round trip; ids in input order. Every job is
        validated before anything is written."""
        jobs = list(jobs)
        self._ready()
        ids, calls = self._core.submit_calls(jobs)  # validates all before any write
        shards = self._core.shards
        self._ensure_namespace()
        assert self._registered is not None
        if self._core.shards != shards:  # another client created the namespace first
            ids, calls = self._core.submit_calls(jobs)
        new_queues = self._core.known_queues - self._registered
        if new_queues:
            self.redis.sadd(self.keys.queues, *new_queues)
            self._registered |= new_queues
        scripts.run_sync(self.redis, calls)
        return ids

    def get_job(self, job_id: str) -> Job:
        self._ready()
        raw: Any = self.redis.hgetall(self._core.job_key(job_id))
        if not raw:
            raise JobNotFound(job_id)
        return job_from_hash(job_id, raw)

    def slots(self, job_id: str) -> list[Slot]:
        job = self.get_job(job_id)
        return [self.get_slot(slot_id(job_id, job.fire_ms))]

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
            from .store import open_store

            source = self._history_source
            self._store = source if source is not None and not isinstance(source, str) \
                else open_store(source)
            self._store.check()
        return self._store

    def history(self, *, job_id: str | None = None, status: str | None = None,
                since: datetime | int | None = None, until: datetime | int | None = None,
                limit: int = 100) -> list[Slot]:
        """Slots from the history store, newest fire time first. since/until bound the fire
        time (aware datetimes or ms); status is a slot status."""
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
        return self.store.history(self._core.namespace, job_id=job_id, status=status,
                                  since_ms=_ms(since, 0), until_ms=_ms(until, 2**62),
                                  limit=limit)

    def runs(self, job_id: str) -> list[Slot]:
        """A job's slots: those still in Redis, and from the history store those that have
        left it (retention); JobNotFound when neither knows the job."""
        try:
            live = self.slots(job_id)
        except JobNotFound:
            live = []
        have = {s.slot_id for s in live}
        try:
            past = [s for s in self.history(job_id=job_id, limit=10_000)
                    if s.slot_id not in have]
        except StoreUnavailable:
            if not live:
                raise
            past = []  # Redis alone still answers for the slots it holds
        if not live and not past:
            raise JobNotFound(job_id)
        return sorted(live + past, key=lambda s: s.fire_ms)

    # --- operator actions (scheduler/admin.py) ------------------------------------------

    @property
    def events_maxlen(self) -> int:
        return self._core.events_maxlen

    def now_ms(self) -> int:
        """Redis time, as every transition sees it."""
        self._ready()
        return self._core.clock.now_ms()

    def cancel(self, ids: str | Iterable[str], reason: str = "cancelled by operator"
               ) -> dict[str, str]:
        """Cancel slots (or every slot of a job id); returns what happened to each slot."""
        return admin.cancel(self, [ids] if isinstance(ids, str) else ids, reason)

    def dead_letters(self, limit: int = 100) -> list[admin.DeadLetter]:
        return admin.dead_letters(self, limit)

    def replay(self, slot_ids: Iterable[str] | None = None) -> int:
        """Dispatch dead slots again as new attempts of the same slots (None: all)."""
        return admin.replay(self, slot_ids)

    def purge(self, slot_ids: Iterable[str] | None = None) -> int:
        """Remove slots from the dead-letter queue (None: all); their history stays."""
        return admin.purge(self, slot_ids)

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
                 events_maxlen: int = EVENTS_MAXLEN) -> None:
        self._core = _Core(namespace, shards, clock, max_payload_bytes, events_maxlen)
        self.redis = async_redis(redis_url)
        self.keys = self._core.keys
        self._registered: set[str] | None = None

    async def _ready(self) -> None:
        core = self._core
        if not core.shards:
            core.adopt_shards(await self.redis.hget(self.keys.meta, "shards"), written=False)
        if core.clock.stale():
            core.clock.anchor(await self.redis.time())

    async def _ensure_namespace(self) -> None:
        await self._ready()
        if self._registered is None:
            core = self._core
            await self.redis.hsetnx(self.keys.meta, "shards", core.shards)
            core.adopt_shards(await self.redis.hget(self.keys.meta, "shards"), written=True)
            self._registered = set()

    async def submit(self, task: str, payload: Any = None, *, queue: str = "default",
                     timeout: float | None = None, retry: RetryPolicy | None = None,
                     delivery: str = "at_least_once", dedupe_key: str | None = None) -> str:
        return (await self.submit_many(_specs(task, payload, queue, timeout, retry, delivery,
                                              dedupe_key)))[0]

    async def submit_many(self, jobs: Iterable[JobSpec | Mapping[str, Any]]) -> list[str]:
        jobs = list(jobs)
        await self._ready()
        ids, calls = self._core.submit_calls(jobs)  # validates all before any write
        shards = self._core.shards
        await self._ensure_namespace()
        assert self._registered is not None
        if self._core.shards != shards:  # another client created the namespace first
            ids, calls = self._core.submit_calls(jobs)
        new_queues = self._core.known_queues - self._registered
        if new_queues:
            await self.redis.sadd(self.keys.queues, *new_queues)
            self._registered |= new_queues
        await scripts.run_async(self.redis, calls)
        return ids

    async def get_job(self, job_id: str) -> Job:
        await self._ready()
        raw: Any = await self.redis.hgetall(self._core.job_key(job_id))
        if not raw:
            raise JobNotFound(job_id)
        return job_from_hash(job_id, raw)

    async def slots(self, job_id: str) -> list[Slot]:
        job = await self.get_job(job_id)
        return [await self.get_slot(slot_id(job_id, job.fire_ms))]

    async def get_slot(self, slot: str) -> Slot:
        await self._ready()
        raw: Any = await self.redis.hgetall(self._core.slot_key(slot))
        if not raw:
            raise SlotNotFound(slot)
        return slot_from_hash(slot, raw)

    async def aclose(self) -> None:
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
