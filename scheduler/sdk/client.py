"""The SDK: `Client` (blocking) and `AsyncClient` (asyncio). Both drive the same
operations, written once without I/O (scheduler/sdk/requests.py says how): each public
method is its operation, of the same name, in the scheduler/sdk/ module of its topic
(jobs.py, schedules.py, fires.py, queues.py, results.py, history.py, status.py, browse.py,
catalog.py, and state.py for the namespace).
The two classes only perform the requests an operation yields. A method states its
parameters and takes its operation's docstring; tests/sdk/test_signatures.py checks that
every method's parameters are its operation's, in both classes.

Every Redis failure leaves the SDK as a `scheduler.core.errors.RedisFailure` (`RedisUnavailable`:
unreachable, too slow, not Redis; `RedisRefused`: out of memory, read-only, no such
database...), with the redis-py exception chained as its cause; never as a redis-py one.
`submit_many` writes a batch as one atomic script per shard chunk: it either wrote every job,
or raises `SubmitError`, whose `written` holds exactly the ids that are in Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import redis.asyncio

import scheduler.redis.cluster as cluster
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
import scheduler.sdk.browse as browse
import scheduler.sdk.catalog as catalog_ops
import scheduler.sdk.declared as declared_ops
import scheduler.sdk.fires as fire_ops
import scheduler.sdk.history as history_ops
import scheduler.sdk.jobs as job_ops
import scheduler.sdk.queues as queue_ops
import scheduler.sdk.results as result_ops
import scheduler.sdk.schedules as schedule_ops
import scheduler.sdk.state as state
import scheduler.sdk.status as status_ops
from scheduler.core.canary import RUNS_KEPT, VerifyRun
from scheduler.core.catalog import TaskInfo
from scheduler.core.errors import ValidationError
from scheduler.core.finite import finite_number
from scheduler.core.jobspec import JobSpec
from scheduler.core.ledger import FirePage
from scheduler.core.limits import QueueLimit
from scheduler.core.models import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_EVENTS_MAXLEN,
    MAX_SECONDS,
    Job,
    Progress,
    RetryPolicy,
    Slot,
)
from scheduler.core.namespace import EVENTS_MAXLEN, RetentionSettings
from scheduler.observe.keyed import TOP_KEYS
from scheduler.observe.records import QueueKeys
from scheduler.observe.status import Status, Supervisor, WorkerStatus
from scheduler.redis.clients import SDK_TIMEOUT_S, async_redis, sync_redis, where
from scheduler.redis.clock import Clock
from scheduler.sdk.browse import SlotPage, SubmissionPage
from scheduler.sdk.declared import Declared, DeclaredSchedule
from scheduler.sdk.jobs import DeadLetter
from scheduler.sdk.queues import QueueInfo
from scheduler.sdk.requests import (
    Done,
    Io,
    Op,
    Pipe,
    Request,
    Scripts,
    ScriptStream,
    StoreCall,
    advance,
    translated,
)
from scheduler.sdk.schedules import Forgotten, JobDeleted
from scheduler.sdk.state import ClientState

if TYPE_CHECKING:
    from scheduler.history.store import HistoryStore

__all__ = ["AsyncClient", "Client", "JobSpec"]

# Aliases: inside the classes, `redis` is the connection attribute.
_SyncRedis = redis.Redis
_AsyncRedis = redis.asyncio.Redis
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


def _open_history(source: str | HistoryStore | None) -> HistoryStore:
    if source is not None and not isinstance(source, str):
        return source
    from scheduler.history.store import open_store

    store = open_store(source)
    store.check()
    return store


class _Driver:
    """What both clients hold: the operations' state, the connection, the history store."""

    redis: Any

    def __init__(self, redis_url: str = "redis://127.0.0.1:6379/0", namespace: str = "sched", *,
                 shards: int | None = None, clock: Clock | None = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 events_maxlen: int = EVENTS_MAXLEN,
                 history: str | HistoryStore | None = None,
                 timeout_s: float = SDK_TIMEOUT_S, durability: str = "primary",
                 replicas: int = 1, replica_timeout_s: float = 1.0,
                 tracing: Any = False) -> None:
        """`history`: the history store (a Postgres DSN, a SQLite path, or a store); None
        is the embedded default file, opened on first use. `max_payload_bytes` is the
        namespace's limit if this client creates it (its scripts enforce it); a client of an
        existing namespace follows the limit stored there. `timeout_s`: how long one call
        waits for Redis (to connect, and for each reply) before RedisUnavailable.
        `durability`: when a submit returns, unless the call says otherwise: "primary" (the
        primary has the jobs), "replicated" (and `replicas` replicas confirmed them within
        `replica_timeout_s`, else DurabilityError) or "fsynced" (the primary's AOF fsynced
        them: Redis 7.2+). `tracing`: an OpenTelemetry span per submit call, its traceparent
        stored with the jobs (the `otel` extra; scheduler/observe/tracing.py): True for the global
        TracerProvider, or the provider to use."""
        if not finite_number(timeout_s) or not 0 < timeout_s <= MAX_SECONDS:
            raise ValidationError("timeout_s", f"{timeout_s!r} is not allowed; must be a "
                                               f"finite number of seconds > 0 and at most "
                                               f"{MAX_SECONDS:,} (a year)")
        if type(events_maxlen) is not int or not 1 <= events_maxlen <= MAX_EVENTS_MAXLEN:
            raise ValidationError("events_maxlen", f"{events_maxlen!r} is not allowed; must be "
                                                   f"an integer from 1 to "
                                                   f"{MAX_EVENTS_MAXLEN:,}")
        self._core = ClientState(namespace, shards, clock, max_payload_bytes, events_maxlen,
                                 durability, replicas, replica_timeout_s)
        if tracing:
            from scheduler.observe.tracing import SubmitTracer

            self._core.tracer = SubmitTracer(None if tracing is True else tracing)
        self.keys = self._core.keys
        self._history_source = history
        self._store: HistoryStore | None = None
        self.redis = self._connect(redis_url, timeout_s)
        self._core.at = where(self.redis)
        self._core.on_cluster = cluster.is_cluster(self.redis)

    def _connect(self, redis_url: str, timeout_s: float) -> Any:
        raise NotImplementedError

    @property
    def namespace(self) -> str:
        """The namespace this client works in."""
        return self._core.keys.ns

    @property
    def events_maxlen(self) -> int:
        """The length this client's transitions trim the namespace's event streams to."""
        return self._core.events_maxlen

    @property
    def max_payload_bytes(self) -> int:
        """The payload limit this client enforces: the namespace's once a call has read it,
        the client's own `max_payload_bytes` before."""
        return self._core.max_payload_bytes

    @property
    def store(self) -> HistoryStore:
        """The history store, opened on first use (for AsyncClient too: opening blocks)."""
        if self._store is None:
            self._store = _open_history(self._history_source)
        return self._store

    def _owned_store(self) -> HistoryStore | None:
        """The store to close with the client: one it opened, not one it was given."""
        return self._store if self._store is not self._history_source else None


def _drives(op: Callable[..., Op[Any]]) -> Callable[[F], F]:
    """The method performs `op`: it takes the operation's docstring (help(), IDEs)."""
    def take(method: F) -> F:
        method.__doc__ = op.__doc__
        return method
    return take


class Client(_Driver):
    """Blocking SDK. `Client("redis://localhost:6379/0", namespace="sched")`."""

    redis: _SyncRedis

    def _connect(self, redis_url: str, timeout_s: float) -> _SyncRedis:
        return sync_redis(redis_url, timeout_s=timeout_s)

    def _drive(self, op: Op[R]) -> R:
        """Run an operation: perform each request it yields and hand it the outcome."""
        with translated(self._core.at):
            step = advance(op)
            while not isinstance(step, Done):
                try:
                    reply = self._perform(step)
                except Exception as exc:
                    step = advance(op, error=exc)
                else:
                    step = advance(op, reply)
            return step.value  # type: ignore[no-any-return]

    def _perform(self, request: Request) -> Any:
        if isinstance(request, Pipe):
            pipe = transport.pipeline(self.redis)
            for name, args, kwargs in request.commands:
                getattr(pipe, name)(*args, **kwargs)
            return transport.send_sync(pipe, raise_on_error=request.raise_on_error)
        if isinstance(request, Scripts):
            if request.wait is not None:
                return scripts.run_sync_waiting(self.redis, request.calls, request.raise_errors,
                                                request.wait)
            return scripts.run_sync(self.redis, request.calls, raise_errors=request.raise_errors)
        if isinstance(request, ScriptStream):
            return scripts.stream_sync(self.redis, request.calls, request.wait)
        if isinstance(request, Io):
            return request.blocking(self.redis, *request.args)
        assert isinstance(request, StoreCall)
        return getattr(self.store, request.method)(*request.args, **request.kwargs)

    # The namespace: scheduler/sdk/state.py

    @property
    @_drives(state.shards)
    def shards(self) -> int:
        return self._drive(state.shards(self._core))

    @_drives(state.now_ms)
    def now_ms(self) -> int:
        return self._drive(state.now_ms(self._core))

    @_drives(state.create_namespace)
    def create_namespace(self, max_payload_bytes: int | None = None) -> int:
        return self._drive(state.create_namespace(self._core, max_payload_bytes))

    @_drives(state.retention)
    def retention(self) -> RetentionSettings:
        return self._drive(state.retention(self._core))

    @_drives(state.set_retention)
    def set_retention(self, retention: float | str | None = None,
                      retain_max: int | None = None,
                      dead_retention: float | str | None = None) -> RetentionSettings:
        return self._drive(state.set_retention(self._core, retention, retain_max,
                                               dead_retention))

    @_drives(state.strict_tasks)
    def strict_tasks(self) -> bool:
        return self._drive(state.strict_tasks(self._core))

    @_drives(state.set_strict_tasks)
    def set_strict_tasks(self, on: bool) -> bool:
        return self._drive(state.set_strict_tasks(self._core, on))

    # Jobs, their slots, the dead-letter queue: scheduler/sdk/jobs.py

    @_drives(job_ops.submit)
    def submit(self, task: str, payload: Any = None, *, queue: str | None = None,
               timeout: float | None = None, retry: RetryPolicy | None = None,
               delivery: str | None = None, priority: int | None = None,
               dedupe_key: str | None = None, delay: float | timedelta | None = None,
               at: datetime | None = None, cron: str | None = None, tz: str | None = None,
               catchup: str | None = None, catchup_limit: int | None = None,
               overlap: str | None = None, start_at: datetime | None = None,
               end_at: datetime | None = None, durability: str | None = None,
               dedupe_ttl: float | None = None, debounce: float | None = None,
               concurrency_key: str | None = None,
               on_time_within: float | None = None) -> str:
        return self._drive(job_ops.submit(self._core, task, payload, queue, timeout, retry,
                                          delivery, priority, dedupe_key, delay, at, cron, tz,
                                          catchup, catchup_limit, overlap, start_at, end_at,
                                          durability, dedupe_ttl, debounce, concurrency_key,
                                          on_time_within))

    @_drives(job_ops.submit_many)
    def submit_many(self, jobs: Iterable[JobSpec | Mapping[str, Any]], *,
                    durability: str | None = None, ids: Sequence[str] | None = None
                    ) -> list[str]:
        return self._drive(job_ops.submit_many(self._core, jobs, durability=durability,
                                               ids=ids))

    @_drives(job_ops.get_job)
    def get_job(self, job_id: str) -> Job:
        return self._drive(job_ops.get_job(self._core, job_id))

    @_drives(job_ops.list_jobs)
    def list_jobs(self, limit: int = 100) -> list[Job]:
        return self._drive(job_ops.list_jobs(self._core, limit))

    @_drives(job_ops.get_slot)
    def get_slot(self, slot: str) -> Slot:
        return self._drive(job_ops.get_slot(self._core, slot))

    @_drives(job_ops.progress)
    def progress(self, job_or_slot_id: str) -> Progress | None:
        return self._drive(job_ops.progress(self._core, job_or_slot_id))

    @_drives(job_ops.slots)
    def slots(self, job_id: str, last: int | None = None) -> list[Slot]:
        return self._drive(job_ops.slots(self._core, job_id, last))

    @_drives(job_ops.latest_slots)
    def latest_slots(self, job_ids: Iterable[str], last: int = 1) -> dict[str, list[Slot]]:
        return self._drive(job_ops.latest_slots(self._core, job_ids, last))

    @_drives(job_ops.cancel)
    def cancel(self, ids: str | Iterable[str],
               reason: str = "cancelled by operator") -> dict[str, str]:
        return self._drive(job_ops.cancel(self._core, ids, reason))

    @_drives(job_ops.dead_letters)
    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return self._drive(job_ops.dead_letters(self._core, limit))

    @_drives(job_ops.replay)
    def replay(self, slot_ids: Iterable[str] | None = None) -> int:
        return self._drive(job_ops.replay(self._core, slot_ids))

    @_drives(job_ops.purge)
    def purge(self, slot_ids: Iterable[str] | None = None) -> int:
        return self._drive(job_ops.purge(self._core, slot_ids))

    # Runs, from Redis and the history store: scheduler/sdk/history.py

    @_drives(history_ops.history)
    def history(self, *, job_id: str | None = None, status: str | None = None,
                since: datetime | int | None = None, until: datetime | int | None = None,
                limit: int = 100) -> list[Slot]:
        return self._drive(history_ops.history(self._core, job_id=job_id, status=status,
                                               since=since, until=until, limit=limit))

    @_drives(history_ops.runs)
    def runs(self, job_id: str) -> list[Slot]:
        return self._drive(history_ops.runs(self._core, job_id))

    # The namespace at a glance: scheduler/sdk/status.py

    @_drives(status_ops.status)
    def status(self) -> Status:
        return self._drive(status_ops.status(self._core))

    @_drives(status_ops.workers)
    def workers(self) -> list[WorkerStatus]:
        return self._drive(status_ops.workers(self._core))

    @_drives(status_ops.supervisors)
    def supervisors(self) -> list[Supervisor]:
        return self._drive(status_ops.supervisors(self._core))

    @_drives(status_ops.verify_runs)
    def verify_runs(self, limit: int = RUNS_KEPT) -> list[VerifyRun]:
        return self._drive(status_ops.verify_runs(self._core, limit))

    # The task catalog: scheduler/sdk/catalog.py

    @_drives(catalog_ops.tasks)
    def tasks(self) -> list[TaskInfo]:
        return self._drive(catalog_ops.tasks(self._core))

    # A job's series, named schedules: scheduler/sdk/schedules.py

    @_drives(schedule_ops.delete_job)
    def delete_job(self, job_id: str, reason: str = "deleted by operator") -> JobDeleted:
        return self._drive(schedule_ops.delete_job(self._core, job_id, reason))

    @_drives(schedule_ops.forget)
    def forget(self, job_ids: list[str]) -> Forgotten:
        return self._drive(schedule_ops.forget(self._core, job_ids))

    @_drives(schedule_ops.next_fires)
    def next_fires(self, job_id: str, n: int = 10) -> list[datetime]:
        return self._drive(schedule_ops.next_fires(self._core, job_id, n))

    @_drives(fire_ops.fires)
    def fires(self, name_or_job_id: str, since: datetime | timedelta | None = None,
              until: datetime | None = None, limit: int = 1000,
              cursor: int | None = None) -> FirePage:
        return self._drive(fire_ops.fires(self._core, name_or_job_id, since, until, limit,
                                          cursor))

    @_drives(schedule_ops.trigger)
    def trigger(self, job_id: str) -> str:
        return self._drive(schedule_ops.trigger(self._core, job_id))

    @_drives(schedule_ops.schedule)
    def schedule(self, name: str, task: str, payload: Any = None, *, cron: str,
             queue: str | None = None, timeout: float | None = None,
             retry: RetryPolicy | None = None, delivery: str | None = None,
             priority: int | None = None, concurrency_key: str | None = None,
             tz: str | None = None, catchup: str | None = None,
             catchup_limit: int | None = None, overlap: str | None = None,
             start_at: datetime | None = None, end_at: datetime | None = None,
             on_time_within: float | None = None) -> str:
        return self._drive(schedule_ops.schedule(
            self._core, name, task, payload, cron=cron, queue=queue, timeout=timeout,
            retry=retry, delivery=delivery, priority=priority,
            concurrency_key=concurrency_key, tz=tz, catchup=catchup,
            catchup_limit=catchup_limit, overlap=overlap, start_at=start_at, end_at=end_at,
            on_time_within=on_time_within))

    @_drives(declared_ops.declare)
    def declare(self, app: str, schedules: Iterable[DeclaredSchedule]) -> Declared:
        return self._drive(declared_ops.declare(self._core, app, schedules))

    # A run's result: scheduler/sdk/results.py

    @_drives(result_ops.result)
    def result(self, job_or_slot_id: str, timeout: float | None = None) -> Any:
        return self._drive(result_ops.result(self._core, job_or_slot_id, timeout))

    # Queues and their limits: scheduler/sdk/queues.py

    @_drives(queue_ops.set_queue_limit)
    def set_queue_limit(self, queue: str, concurrency: int | None = None,
                        rate: float | str | None = None,
                        per_key_concurrency: int | None = None,
                        per_key_rate: float | str | None = None) -> QueueLimit | None:
        return self._drive(queue_ops.set_queue_limit(self._core, queue, concurrency, rate,
                                                     per_key_concurrency, per_key_rate))

    @_drives(queue_ops.set_key_weight)
    def set_key_weight(self, queue: str, key: str, weight: int | None) -> int:
        return self._drive(queue_ops.set_key_weight(self._core, queue, key, weight))

    @_drives(queue_ops.key_weight)
    def key_weight(self, queue: str, key: str) -> int:
        return self._drive(queue_ops.key_weight(self._core, queue, key))

    @_drives(queue_ops.queue_limits)
    def queue_limits(self) -> dict[str, QueueLimit]:
        return self._drive(queue_ops.queue_limits(self._core))

    @_drives(queue_ops.queues)
    def queues(self, now: Status | None = None) -> list[QueueInfo]:
        return self._drive(queue_ops.queues(self._core, now))

    @_drives(queue_ops.queue_keys)
    def queue_keys(self, queue: str, top: int = TOP_KEYS) -> QueueKeys:
        return self._drive(queue_ops.queue_keys(self._core, queue, top))

    # Paged lists: scheduler/sdk/browse.py

    @_drives(browse.queued)
    def queued(self, queue: str, *, after: str | None = None, limit: int = browse.PAGE) -> SlotPage:
        return self._drive(browse.queued(self._core, queue, after=after, limit=limit))

    @_drives(browse.scheduled)
    def scheduled(self, queue: str | None = None, *, retrying: bool = False,
                  after: str | None = None, limit: int = browse.PAGE) -> SlotPage:
        return self._drive(browse.scheduled(self._core, queue, retrying=retrying, after=after,
                                            limit=limit))

    @_drives(browse.running)
    def running(self, queue: str | None = None, *, after: str | None = None,
                limit: int = browse.PAGE) -> SlotPage:
        return self._drive(browse.running(self._core, queue, after=after, limit=limit))

    @_drives(browse.recent_jobs)
    def recent_jobs(self, *, after: str | None = None, limit: int = browse.PAGE) -> SubmissionPage:
        return self._drive(browse.recent_jobs(self._core, after=after, limit=limit))

    def close(self) -> None:
        """Close the connection, and the history store if this client opened it."""
        self.redis.close()
        store = self._owned_store()
        if store is not None:
            store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Driver):
    """asyncio SDK with the same methods as `Client`, as coroutines (`aclose` for `close`,
    and `await client.shards()` for the `shards` property)."""

    redis: _AsyncRedis  # store calls run in a thread, off the event loop

    def _connect(self, redis_url: str, timeout_s: float) -> _AsyncRedis:
        return async_redis(redis_url, timeout_s=timeout_s)

    async def _drive(self, op: Op[R]) -> R:
        """As Client._drive."""
        with translated(self._core.at):
            step = advance(op)
            while not isinstance(step, Done):
                try:
                    reply = await self._perform(step)
                except Exception as exc:
                    step = advance(op, error=exc)
                else:
                    step = advance(op, reply)
            return step.value  # type: ignore[no-any-return]

    async def _perform(self, request: Request) -> Any:
        if isinstance(request, Pipe):
            pipe = transport.pipeline(self.redis)
            for name, args, kwargs in request.commands:
                getattr(pipe, name)(*args, **kwargs)
            return await transport.send(pipe, raise_on_error=request.raise_on_error)
        if isinstance(request, Scripts):
            if request.wait is not None:
                return await scripts.run_async_waiting(self.redis, request.calls,
                                                       request.raise_errors, request.wait)
            return await scripts.run_async(self.redis, request.calls,
                                           raise_errors=request.raise_errors)
        if isinstance(request, ScriptStream):
            return await scripts.stream_async(self.redis, request.calls, request.wait)
        if isinstance(request, Io):
            return await request.asyncio(self.redis, *request.args)
        assert isinstance(request, StoreCall)
        if self._store is None:
            self._store = await asyncio.to_thread(_open_history, self._history_source)
        return await asyncio.to_thread(getattr(self._store, request.method), *request.args,
                                       **request.kwargs)

    # The namespace: scheduler/sdk/state.py

    @_drives(state.shards)
    async def shards(self) -> int:
        return await self._drive(state.shards(self._core))

    @_drives(state.now_ms)
    async def now_ms(self) -> int:
        return await self._drive(state.now_ms(self._core))

    @_drives(state.create_namespace)
    async def create_namespace(self, max_payload_bytes: int | None = None) -> int:
        return await self._drive(state.create_namespace(self._core, max_payload_bytes))

    @_drives(state.retention)
    async def retention(self) -> RetentionSettings:
        return await self._drive(state.retention(self._core))

    @_drives(state.set_retention)
    async def set_retention(self, retention: float | str | None = None,
                            retain_max: int | None = None,
                            dead_retention: float | str | None = None) -> RetentionSettings:
        return await self._drive(state.set_retention(self._core, retention, retain_max,
                                                     dead_retention))

    @_drives(state.strict_tasks)
    async def strict_tasks(self) -> bool:
        return await self._drive(state.strict_tasks(self._core))

    @_drives(state.set_strict_tasks)
    async def set_strict_tasks(self, on: bool) -> bool:
        return await self._drive(state.set_strict_tasks(self._core, on))

    # Jobs, their slots, the dead-letter queue: scheduler/sdk/jobs.py

    @_drives(job_ops.submit)
    async def submit(self, task: str, payload: Any = None, *, queue: str | None = None,
                     timeout: float | None = None, retry: RetryPolicy | None = None,
                     delivery: str | None = None, priority: int | None = None,
                     dedupe_key: str | None = None, delay: float | timedelta | None = None,
                     at: datetime | None = None, cron: str | None = None, tz: str | None = None,
                     catchup: str | None = None, catchup_limit: int | None = None,
                     overlap: str | None = None, start_at: datetime | None = None,
                     end_at: datetime | None = None, durability: str | None = None,
                     dedupe_ttl: float | None = None, debounce: float | None = None,
                     concurrency_key: str | None = None,
                     on_time_within: float | None = None) -> str:
        return await self._drive(job_ops.submit(self._core, task, payload, queue,
                                                timeout, retry, delivery, priority, dedupe_key,
                                                delay, at, cron, tz, catchup, catchup_limit,
                                                overlap, start_at, end_at, durability,
                                                dedupe_ttl, debounce, concurrency_key,
                                                on_time_within))

    @_drives(job_ops.submit_many)
    async def submit_many(self, jobs: Iterable[JobSpec | Mapping[str, Any]], *,
                          durability: str | None = None, ids: Sequence[str] | None = None
                          ) -> list[str]:
        return await self._drive(job_ops.submit_many(self._core, jobs, durability=durability,
                                                     ids=ids))

    @_drives(job_ops.get_job)
    async def get_job(self, job_id: str) -> Job:
        return await self._drive(job_ops.get_job(self._core, job_id))

    @_drives(job_ops.list_jobs)
    async def list_jobs(self, limit: int = 100) -> list[Job]:
        return await self._drive(job_ops.list_jobs(self._core, limit))

    @_drives(job_ops.get_slot)
    async def get_slot(self, slot: str) -> Slot:
        return await self._drive(job_ops.get_slot(self._core, slot))

    @_drives(job_ops.progress)
    async def progress(self, job_or_slot_id: str) -> Progress | None:
        return await self._drive(job_ops.progress(self._core, job_or_slot_id))

    @_drives(job_ops.slots)
    async def slots(self, job_id: str, last: int | None = None) -> list[Slot]:
        return await self._drive(job_ops.slots(self._core, job_id, last))

    @_drives(job_ops.latest_slots)
    async def latest_slots(self, job_ids: Iterable[str], last: int = 1) -> dict[str, list[Slot]]:
        return await self._drive(job_ops.latest_slots(self._core, job_ids, last))

    @_drives(job_ops.cancel)
    async def cancel(self, ids: str | Iterable[str],
                     reason: str = "cancelled by operator") -> dict[str, str]:
        return await self._drive(job_ops.cancel(self._core, ids, reason))

    @_drives(job_ops.dead_letters)
    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return await self._drive(job_ops.dead_letters(self._core, limit))

    @_drives(job_ops.replay)
    async def replay(self, slot_ids: Iterable[str] | None = None) -> int:
        return await self._drive(job_ops.replay(self._core, slot_ids))

    @_drives(job_ops.purge)
    async def purge(self, slot_ids: Iterable[str] | None = None) -> int:
        return await self._drive(job_ops.purge(self._core, slot_ids))

    # Runs, from Redis and the history store: scheduler/sdk/history.py

    @_drives(history_ops.history)
    async def history(self, *, job_id: str | None = None, status: str | None = None,
                      since: datetime | int | None = None, until: datetime | int | None = None,
                      limit: int = 100) -> list[Slot]:
        return await self._drive(history_ops.history(self._core, job_id=job_id, status=status,
                                                     since=since, until=until, limit=limit))

    @_drives(history_ops.runs)
    async def runs(self, job_id: str) -> list[Slot]:
        return await self._drive(history_ops.runs(self._core, job_id))

    # The namespace at a glance: scheduler/sdk/status.py

    @_drives(status_ops.status)
    async def status(self) -> Status:
        return await self._drive(status_ops.status(self._core))

    @_drives(status_ops.workers)
    async def workers(self) -> list[WorkerStatus]:
        return await self._drive(status_ops.workers(self._core))

    @_drives(status_ops.supervisors)
    async def supervisors(self) -> list[Supervisor]:
        return await self._drive(status_ops.supervisors(self._core))

    @_drives(status_ops.verify_runs)
    async def verify_runs(self, limit: int = RUNS_KEPT) -> list[VerifyRun]:
        return await self._drive(status_ops.verify_runs(self._core, limit))

    # The task catalog: scheduler/sdk/catalog.py

    @_drives(catalog_ops.tasks)
    async def tasks(self) -> list[TaskInfo]:
        return await self._drive(catalog_ops.tasks(self._core))

    # A job's series, named schedules: scheduler/sdk/schedules.py

    @_drives(schedule_ops.delete_job)
    async def delete_job(self, job_id: str, reason: str = "deleted by operator") -> JobDeleted:
        return await self._drive(schedule_ops.delete_job(self._core, job_id, reason))

    @_drives(schedule_ops.forget)
    async def forget(self, job_ids: list[str]) -> Forgotten:
        return await self._drive(schedule_ops.forget(self._core, job_ids))

    @_drives(schedule_ops.next_fires)
    async def next_fires(self, job_id: str, n: int = 10) -> list[datetime]:
        return await self._drive(schedule_ops.next_fires(self._core, job_id, n))

    @_drives(fire_ops.fires)
    async def fires(self, name_or_job_id: str, since: datetime | timedelta | None = None,
                    until: datetime | None = None, limit: int = 1000,
                    cursor: int | None = None) -> FirePage:
        return await self._drive(fire_ops.fires(self._core, name_or_job_id, since, until,
                                                limit, cursor))

    @_drives(schedule_ops.trigger)
    async def trigger(self, job_id: str) -> str:
        return await self._drive(schedule_ops.trigger(self._core, job_id))

    @_drives(schedule_ops.schedule)
    async def schedule(self, name: str, task: str, payload: Any = None, *, cron: str,
                   queue: str | None = None, timeout: float | None = None,
                   retry: RetryPolicy | None = None, delivery: str | None = None,
                   priority: int | None = None, concurrency_key: str | None = None,
                   tz: str | None = None, catchup: str | None = None,
                   catchup_limit: int | None = None, overlap: str | None = None,
                   start_at: datetime | None = None, end_at: datetime | None = None,
                   on_time_within: float | None = None) -> str:
        return await self._drive(schedule_ops.schedule(
            self._core, name, task, payload, cron=cron, queue=queue, timeout=timeout,
            retry=retry, delivery=delivery, priority=priority,
            concurrency_key=concurrency_key, tz=tz, catchup=catchup,
            catchup_limit=catchup_limit, overlap=overlap, start_at=start_at, end_at=end_at,
            on_time_within=on_time_within))

    @_drives(declared_ops.declare)
    async def declare(self, app: str, schedules: Iterable[DeclaredSchedule]) -> Declared:
        return await self._drive(declared_ops.declare(self._core, app, schedules))

    # A run's result: scheduler/sdk/results.py

    @_drives(result_ops.result)
    async def result(self, job_or_slot_id: str, timeout: float | None = None) -> Any:
        return await self._drive(result_ops.result(self._core, job_or_slot_id, timeout))

    # Queues and their limits: scheduler/sdk/queues.py

    @_drives(queue_ops.set_queue_limit)
    async def set_queue_limit(self, queue: str, concurrency: int | None = None,
                              rate: float | str | None = None,
                              per_key_concurrency: int | None = None,
                              per_key_rate: float | str | None = None) -> QueueLimit | None:
        return await self._drive(queue_ops.set_queue_limit(self._core, queue, concurrency, rate,
                                                           per_key_concurrency, per_key_rate))

    @_drives(queue_ops.set_key_weight)
    async def set_key_weight(self, queue: str, key: str, weight: int | None) -> int:
        return await self._drive(queue_ops.set_key_weight(self._core, queue, key, weight))

    @_drives(queue_ops.key_weight)
    async def key_weight(self, queue: str, key: str) -> int:
        return await self._drive(queue_ops.key_weight(self._core, queue, key))

    @_drives(queue_ops.queue_limits)
    async def queue_limits(self) -> dict[str, QueueLimit]:
        return await self._drive(queue_ops.queue_limits(self._core))

    @_drives(queue_ops.queues)
    async def queues(self, now: Status | None = None) -> list[QueueInfo]:
        return await self._drive(queue_ops.queues(self._core, now))

    @_drives(queue_ops.queue_keys)
    async def queue_keys(self, queue: str, top: int = TOP_KEYS) -> QueueKeys:
        return await self._drive(queue_ops.queue_keys(self._core, queue, top))

    # Paged lists: scheduler/sdk/browse.py

    @_drives(browse.queued)
    async def queued(self, queue: str, *, after: str | None = None,
                     limit: int = browse.PAGE) -> SlotPage:
        return await self._drive(browse.queued(self._core, queue, after=after, limit=limit))

    @_drives(browse.scheduled)
    async def scheduled(self, queue: str | None = None, *, retrying: bool = False,
                        after: str | None = None, limit: int = browse.PAGE) -> SlotPage:
        return await self._drive(browse.scheduled(self._core, queue, retrying=retrying,
                                                  after=after, limit=limit))

    @_drives(browse.running)
    async def running(self, queue: str | None = None, *, after: str | None = None,
                      limit: int = browse.PAGE) -> SlotPage:
        return await self._drive(browse.running(self._core, queue, after=after, limit=limit))

    @_drives(browse.recent_jobs)
    async def recent_jobs(self, *, after: str | None = None,
                          limit: int = browse.PAGE) -> SubmissionPage:
        return await self._drive(browse.recent_jobs(self._core, after=after, limit=limit))

    async def aclose(self) -> None:
        """Close the connection, and the history store if this client opened it."""
        await self.redis.aclose()
        store = self._owned_store()
        if store is not None:
            await asyncio.to_thread(store.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
