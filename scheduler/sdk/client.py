"""The SDK: `Client` (blocking) and `AsyncClient` (asyncio). Both are drivers of the same
operations (scheduler/sdk/operations.py), which validate input, build the Lua calls and decode
replies without doing I/O (scheduler/sdk/core.py); the two classes only do the I/O. Each
method is the operation of the same name, so the two have the same methods by construction.

Every Redis failure leaves the SDK as a `scheduler.core.errors.RedisFailure` (`RedisUnavailable`:
unreachable, too slow, not Redis; `RedisRefused`: out of memory, read-only, no such
database...), with the redis-py exception chained as its cause; never as a redis-py one.
`submit_many` writes a batch as one atomic script per shard chunk: it either wrote every job,
or raises `SubmitError`, whose `written` holds exactly the ids that are in Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import redis
import redis.asyncio

import scheduler.redis.cluster as cluster
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
import scheduler.sdk.browse as browse
import scheduler.sdk.operations as operations
import scheduler.sdk.queues as queue_ops
import scheduler.sdk.results as results
import scheduler.sdk.schedules as schedules
from scheduler.core.errors import ValidationError
from scheduler.core.finite import finite_number
from scheduler.core.jobspec import JobSpec
from scheduler.core.models import DEFAULT_MAX_PAYLOAD_BYTES
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.redis.clients import SDK_TIMEOUT_S, async_redis, sync_redis, where
from scheduler.redis.clock import Clock
from scheduler.sdk.core import (
    Core,
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

if TYPE_CHECKING:
    from scheduler.history.store import HistoryStore

__all__ = ["AsyncClient", "Client", "JobSpec"]

# Aliases: inside the classes, `redis` is the connection attribute.
_SyncRedis = redis.Redis
_AsyncRedis = redis.asyncio.Redis
P = ParamSpec("P")
R = TypeVar("R")
DeadLetter = operations.DeadLetter


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
        if not finite_number(timeout_s) or not timeout_s > 0:
            raise ValidationError("timeout_s", f"{timeout_s!r} is not allowed; must be a "
                                               f"finite number of seconds > 0")
        self._core = Core(namespace, shards, clock, max_payload_bytes, events_maxlen,
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
        return self._core.keys.ns

    @property
    def events_maxlen(self) -> int:
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


def _named(method: Any, op: Callable[..., Any]) -> None:
    """The method takes the operation's name and docstring (help(), IDEs)."""
    method.__name__ = method.__qualname__ = op.__name__
    method.__doc__ = op.__doc__


def _blocking(op: Callable[Concatenate[Core, P], Op[R]]
              ) -> Callable[Concatenate[Client, P], R]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._drive(op(self._core, *args, **kwargs))
    _named(method, op)
    return method


def _awaitable(op: Callable[Concatenate[Core, P], Op[R]]
               ) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._drive(op(self._core, *args, **kwargs))
    _named(method, op)
    return method


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

    @property
    def shards(self) -> int:
        """The namespace's shard count (AsyncClient: `await client.shards()`)."""
        return self._shards()

    _shards = _blocking(operations.shards)
    now_ms = _blocking(operations.now_ms)
    create_namespace = _blocking(operations.create_namespace)
    submit = _blocking(operations.submit)
    submit_many = _blocking(operations.submit_many)
    get_job = _blocking(operations.get_job)
    list_jobs = _blocking(operations.list_jobs)
    slots = _blocking(operations.slots)
    latest_slots = _blocking(operations.latest_slots)
    get_slot = _blocking(operations.get_slot)
    history = _blocking(operations.history)
    runs = _blocking(operations.runs)
    status = _blocking(operations.status)
    workers = _blocking(operations.workers)
    cancel = _blocking(operations.cancel)
    dead_letters = _blocking(operations.dead_letters)
    replay = _blocking(operations.replay)
    purge = _blocking(operations.purge)
    delete_job = _blocking(schedules.delete_job)
    next_fires = _blocking(schedules.next_fires)
    trigger = _blocking(schedules.trigger)
    schedule = _blocking(schedules.schedule)
    result = _blocking(results.result)
    set_queue_limit = _blocking(queue_ops.set_queue_limit)
    queue_limits = _blocking(queue_ops.queue_limits)
    queues = _blocking(queue_ops.queues)
    queued = _blocking(browse.queued)
    scheduled = _blocking(browse.scheduled)
    running = _blocking(browse.running)
    recent_jobs = _blocking(browse.recent_jobs)

    def close(self) -> None:
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

    shards = _awaitable(operations.shards)
    now_ms = _awaitable(operations.now_ms)
    create_namespace = _awaitable(operations.create_namespace)
    submit = _awaitable(operations.submit)
    submit_many = _awaitable(operations.submit_many)
    get_job = _awaitable(operations.get_job)
    list_jobs = _awaitable(operations.list_jobs)
    slots = _awaitable(operations.slots)
    latest_slots = _awaitable(operations.latest_slots)
    get_slot = _awaitable(operations.get_slot)
    history = _awaitable(operations.history)
    runs = _awaitable(operations.runs)
    status = _awaitable(operations.status)
    workers = _awaitable(operations.workers)
    cancel = _awaitable(operations.cancel)
    dead_letters = _awaitable(operations.dead_letters)
    replay = _awaitable(operations.replay)
    purge = _awaitable(operations.purge)
    delete_job = _awaitable(schedules.delete_job)
    next_fires = _awaitable(schedules.next_fires)
    trigger = _awaitable(schedules.trigger)
    schedule = _awaitable(schedules.schedule)
    result = _awaitable(results.result)
    set_queue_limit = _awaitable(queue_ops.set_queue_limit)
    queue_limits = _awaitable(queue_ops.queue_limits)
    queues = _awaitable(queue_ops.queues)
    queued = _awaitable(browse.queued)
    scheduled = _awaitable(browse.scheduled)
    running = _awaitable(browse.running)
    recent_jobs = _awaitable(browse.recent_jobs)

    async def aclose(self) -> None:
        await self.redis.aclose()
        store = self._owned_store()
        if store is not None:
            await asyncio.to_thread(store.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
