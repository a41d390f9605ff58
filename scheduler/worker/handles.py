"""Task handles: what `@registry.task(...)` returns. A handle calls like the handler it wraps
(the worker runs it, tests call it), and submits jobs of its task: `send.submit(client,
payload)`, `await send.asubmit(aclient, payload)`, `send.outbox_submit(conn, payload)`, with
the task's name (a misspelt handle is an AttributeError at import, not a job no worker
knows) and the task's defaults for the options the call does not give.

A handler whose payload parameter is annotated with a msgspec Struct or a dataclass has a
typed payload: a submit through its handle validates the payload against that type before
anything is written (ValidationError naming the field), and the worker decodes the payload
into that type for the handler. The type is resolved once, when the task is registered.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from scheduler.core.errors import ValidationError
from scheduler.core.jobspec import SUBMIT_OPTIONS, TASK_OPTIONS
from scheduler.core.models import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    RetryPolicy,
    check_delivery,
    check_priority,
    check_queue,
    check_timeout,
    check_window_seconds,
)

if TYPE_CHECKING:
    from scheduler.sdk.client import AsyncClient, Client

P = TypeVar("P")
R = TypeVar("R")
# Options whose defaults hold only for a job that has a dedupe key (they are its window).
_WITH_A_DEDUPE_KEY = ("dedupe_ttl", "debounce")
_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`")


def payload_type(task: str, fn: Callable[..., Any]) -> type | None:
    """The msgspec Struct or dataclass that `fn`'s payload parameter (its second) is
    annotated with, or None (any other annotation, or none: the payload stays as JSON
    decodes it). A string annotation (`from __future__ import annotations`) is evaluated in
    the handler's module now, so the type must be defined before the handler; TypeError
    otherwise, naming the task."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if len(params) < 2 or params[1].annotation is inspect.Parameter.empty:
        return None
    annotation = params[1].annotation
    if isinstance(annotation, str):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", annotation):
            return None  # a generic or a union (dict[str, Any], X | None): not a typed payload
        resolved = _resolve(annotation, getattr(fn, "__globals__", {}))
        if resolved is None:
            raise TypeError(f"task {task!r}: the payload annotation {annotation!r} of "
                            f"{getattr(fn, '__qualname__', fn)!r} does not resolve when the "
                            f"task is registered; define or import it before the handler")
        annotation = resolved
    if isinstance(annotation, type) and (issubclass(annotation, msgspec.Struct)
                                         or dataclasses.is_dataclass(annotation)):
        return annotation
    return None


def _resolve(dotted: str, names: Mapping[str, Any]) -> Any:
    """A dotted name (`Email`, `models.Email`) looked up in a module's globals; None when it
    is not there (yet)."""
    head, *rest = dotted.split(".")
    obj = names.get(head, getattr(builtins, head, None))
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def check_payload(task: str, kind: type, payload: Any) -> Any:
    """`payload` (an instance of `kind`, or its fields as a mapping) as the JSON-ready value
    to submit, validated against `kind`: ValidationError naming the field otherwise."""
    try:
        value = msgspec.to_builtins(payload)
        msgspec.convert(value, kind)
    except (msgspec.ValidationError, TypeError) as exc:
        message = str(exc)
        found = _PATH.search(message)
        path = found["path"] if found else ""
        missing = _MISSING.match(message)
        field = "payload" + path + (f".{missing['name']}" if missing else "")
        problem = message[:found.start()] if found else message
        raise ValidationError(field, f"{problem} (task {task!r} takes a "
                                     f"{kind.__name__})") from None
    return value


def check_defaults(task: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A task's defaults, each checked as a submit checks it (ValueError naming the task
    and the option); the ones left at None dropped."""
    checks: dict[str, Callable[[Any], Any]] = {
        "queue": check_queue, "timeout": check_timeout, "delivery": check_delivery,
        "priority": check_priority,
        "dedupe_ttl": lambda v: check_window_seconds("dedupe_ttl", v),
        "debounce": lambda v: check_window_seconds("debounce", v),
        "retry": _check_retry,
    }
    out: dict[str, Any] = {}
    for option in TASK_OPTIONS:
        value = defaults.get(option)
        if value is None:
            continue
        try:
            checks[option](value)
        except ValidationError as exc:
            raise ValueError(f"task {task!r}: {exc}") from None
        out[option] = value
    return out


def _check_retry(value: Any) -> None:
    if not isinstance(value, RetryPolicy):
        raise ValidationError("retry", "must be a RetryPolicy")


class TaskHandle(Generic[P, R]):
    """A registered task: call it as its handler, submit jobs of it through it. `name` is
    the task's name, `defaults` the options it was registered with (queue, timeout, retry,
    delivery, priority, dedupe_ttl, debounce), `payload_type` its typed payload's class
    (None: untyped)."""

    def __init__(self, name: str, fn: Callable[[Any, P], R], defaults: Mapping[str, Any],
                 kind: type | None) -> None:
        self.name = name
        self.fn = fn
        self.defaults = dict(defaults)
        self.payload_type = kind
        self._decoder: msgspec.json.Decoder[Any] | None = None if kind is None else msgspec.json.Decoder(kind)
        functools.update_wrapper(self, fn)  # its module, name and docstring: the handler's
        mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
        if mark is not None and inspect.iscoroutinefunction(fn):
            mark(self)  # inspect sees the handle of an async handler as a coroutine function

    def __getattr__(self, name: str) -> Any:
        # The rest of the handler's attributes (__code__, __defaults__...): the handle
        # stands where the function stood in its module.
        if name == "fn":
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __call__(self, ctx: Any, payload: P) -> R:
        return self.fn(ctx, payload)

    def __repr__(self) -> str:
        return f"<task {self.name!r} of {getattr(self.fn, '__qualname__', self.fn)!r}>"

    def decode(self, data: bytes | None) -> Any:
        """A payload's JSON as the handler takes it (into its type when it has one)."""
        if self._decoder is None:
            return msgspec.json.decode(data) if data else None
        return self._decoder.decode(data or b"null")

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The submit options of a call: what it gives, else the task's default, else
        JobSpec's. `dedupe_ttl` and `debounce` defaults hold for a job with a dedupe key
        only."""
        out = {name: given[name] for name in SUBMIT_OPTIONS if given[name] is not None}
        for name, value in self.defaults.items():
            if name not in out and (name not in _WITH_A_DEDUPE_KEY
                                    or given["dedupe_key"] is not None):
                out[name] = value
        return out

    def payload(self, payload: Any) -> Any:
        """The payload to submit: validated against the task's type when it has one."""
        if self.payload_type is None:
            return payload
        return check_payload(self.name, self.payload_type, payload)

    def submit(self, client: Client, payload: P | Mapping[str, Any] | None = None, *,
               queue: str | None = None, timeout: float | None = None,
               retry: RetryPolicy | None = None, delivery: str | None = None,
               priority: int | None = None, dedupe_key: str | None = None,
               dedupe_ttl: float | None = None, debounce: float | None = None,
               concurrency_key: str | None = None, delay: float | timedelta | None = None,
               at: datetime | None = None, cron: str | None = None, tz: str | None = None,
               catchup: str | None = None, catchup_limit: int | None = None,
               overlap: str | None = None, start_at: datetime | None = None,
               end_at: datetime | None = None, on_time_within: float | None = None,
               durability: str | None = None) -> str:
        """`client.submit(<this task>, payload, ...)`: an option left at None takes the
        task's default (registry.task's), else submit's. A typed payload (an instance of
        the handler's type, or its fields as a mapping) is validated first: ValidationError
        naming the field, nothing written. Returns the job's id."""
        options = self.options(locals())
        client._core.vouched.add(self.name)  # the name comes from code: no catalog check
        return client.submit(self.name, self.payload(payload), durability=durability,
                             **options)

    async def asubmit(self, client: AsyncClient, payload: P | Mapping[str, Any] | None = None,
                      *, queue: str | None = None, timeout: float | None = None,
                      retry: RetryPolicy | None = None, delivery: str | None = None,
                      priority: int | None = None, dedupe_key: str | None = None,
                      dedupe_ttl: float | None = None, debounce: float | None = None,
                      concurrency_key: str | None = None,
                      delay: float | timedelta | None = None, at: datetime | None = None,
                      cron: str | None = None, tz: str | None = None,
                      catchup: str | None = None, catchup_limit: int | None = None,
                      overlap: str | None = None, start_at: datetime | None = None,
                      end_at: datetime | None = None, on_time_within: float | None = None,
                      durability: str | None = None) -> str:
        """`submit` with an AsyncClient."""
        options = self.options(locals())
        client._core.vouched.add(self.name)  # the name comes from code: no catalog check
        return await client.submit(self.name, self.payload(payload), durability=durability,
                                   **options)

    def outbox_submit(self, conn: Any, payload: P | Mapping[str, Any] | None = None, *,
                      queue: str | None = None, timeout: float | None = None,
                      retry: RetryPolicy | None = None, delivery: str | None = None,
                      priority: int | None = None, dedupe_key: str | None = None,
                      dedupe_ttl: float | None = None, debounce: float | None = None,
                      concurrency_key: str | None = None,
                      delay: float | timedelta | None = None, at: datetime | None = None,
                      cron: str | None = None, tz: str | None = None,
                      catchup: str | None = None, catchup_limit: int | None = None,
                      overlap: str | None = None, start_at: datetime | None = None,
                      end_at: datetime | None = None, on_time_within: float | None = None,
                      schema: str = "scheduler",
                      max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                      shards: int | None = None,
                      namespace: str | None = None) -> str:
        """`scheduler.outbox.submit(conn, <this task>, payload, ...)`: a job in `conn`'s
        transaction, with the task's defaults and its payload checked as `submit` does;
        `schema`, `max_payload_bytes`, `shards` and `namespace` as there."""
        import scheduler.outbox.writer as outbox  # psycopg comes with it: only when used

        options = self.options(locals())
        return outbox.submit(conn, self.name, self.payload(payload), schema=schema,
                             max_payload_bytes=max_payload_bytes, shards=shards,
                             namespace=namespace, **options)
