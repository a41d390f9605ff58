"""The task catalog a worker runs from, and the context each handler receives."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from scheduler.core.canary import RESERVED_PREFIX, is_reserved
from scheduler.core.models import RetryPolicy, check_progress, check_task, decode_payload
from scheduler.sdk.declared import DeclaredSchedule, declare_schedule
from scheduler.worker.handles import TaskHandle, check_defaults, check_payload, payload_type

Handler = Callable[["Context", Any], Any]
P = TypeVar("P")
R = TypeVar("R")
_log = logging.getLogger("scheduler.task")
LOG_LINES = 100  # a run's ctx.logger lines kept with its attempt (the first ones)
LOG_LINE_CHARS = 1000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def stamp(ms: int) -> str:
    """A run-log line's time of day (UTC), to the millisecond: 04:01:00.012."""
    return f"{time.strftime('%H:%M:%S', time.gmtime(ms // 1000))}.{ms % 1000:03d}"


class RunLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """ctx.logger: logs as any logger does, and keeps the run's lines at INFO and above, the
    first LOG_LINES (each cut to LOG_LINE_CHARS), to be stored with its attempt whatever the
    worker's log level: `sched runs` and the console show them. Each kept line is stamped by
    `now_ms`, the worker's clock (Redis TIME, scheduler/redis/clock.py), the one its attempt's
    started_ms comes from: a line never reads earlier than the run that logged it."""

    def __init__(self, logger: logging.Logger, extra: dict[str, Any],
                 now_ms: Callable[[], int] = _wall_ms) -> None:
        super().__init__(logger, extra)
        self.lines: list[str] = []
        self.dropped = 0
        self.now_ms = now_ms

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level >= logging.INFO:
            if len(self.lines) < LOG_LINES:
                try:
                    text = str(msg) % args if args else str(msg)
                except (TypeError, ValueError):
                    text = f"{msg} {args}"
                self.lines.append(f"{stamp(self.now_ms())} {logging.getLevelName(level)} "
                                  f"{' '.join(text.split())[:LOG_LINE_CHARS]}")
            else:
                self.dropped += 1
        super().log(level, msg, *args, **kwargs)


POOLS = ("thread", "process")


class Task:
    """A registered handler as the worker runs it. `payload_type`: the Struct or dataclass
    its payload is decoded into (None: as JSON decodes it), with its `decoder`; `defaults`:
    the submit options it was registered with."""

    __slots__ = ("name", "fn", "is_async", "process", "payload_type", "decoder", "defaults")

    def __init__(self, name: str, fn: Handler, process: bool = False,
                 defaults: dict[str, Any] | None = None) -> None:
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.process = process  # runs in the worker's process pool (worker/pool.py)
        self.payload_type = payload_type(name, fn)
        self.decoder: msgspec.json.Decoder[Any] | None = (
            None if self.payload_type is None else msgspec.json.Decoder(self.payload_type))
        self.defaults = defaults or {}

    def decode(self, data: bytes | None) -> Any:
        """A run's payload as the handler takes it: into its type when it has one (a
        payload that does not fit fails the attempt, naming the field)."""
        if self.decoder is None:
            return decode_payload(data)
        return self.decoder.decode(data or b"null")

    @property
    def where(self) -> tuple[str, str]:
        """(module, qualname): how a pool's child finds this handler (it imports it by name;
        no code or closure crosses the pipe)."""
        return self.fn.__module__, self.fn.__qualname__


class Registry:
    """`registry = Registry()`, then `@registry.task("emails.send")` on `async def
    handler(ctx, payload)` or a plain `def` (run in the worker's thread pool), or
    `@registry.task("reports.build", pool="process")` on a plain `def` that runs in a child
    process of the worker (CPU-bound work: the docs' "Concurrency" guide)."""

    def __init__(self, *, canary: bool = True) -> None:
        """`canary=False`: workers of this registry do not serve the canary task that
        `sched verify` submits (by default every worker does, as a no-op)."""
        self.canary = canary
        self.tasks: dict[str, Task] = {}
        self.schedules: dict[str, DeclaredSchedule] = {}  # by name: registry.schedule

    def task(self, name: str, pool: str = "thread", *, queue: str | None = None,
             timeout: float | None = None, retry: RetryPolicy | None = None,
             delivery: str | None = None, priority: int | None = None,
             dedupe_ttl: float | None = None, debounce: float | None = None
             ) -> Callable[[Callable[[Any, P], R]], TaskHandle[P, R]]:
        """Register the decorated handler as task `name`; returns its TaskHandle, which
        calls like the handler and submits jobs of the task (`send.submit(client,
        payload)`). `queue`, `timeout`, `retry`, `delivery`, `priority`, `dedupe_ttl`,
        `debounce`: the task's defaults, for what a submit through the handle does not
        give (the submit's own win; `dedupe_ttl` and `debounce` hold for a job with a
        dedupe key). Each is checked now as a submit checks it (ValueError naming the
        task). A handler whose payload parameter is annotated with a msgspec Struct or a
        dataclass gets a typed payload, decoded into that type for the handler. `pool`:
        "thread" (the default: an `async def` runs on the worker's event loop, a plain `def`
        in its thread pool) or "process" (a plain `def` at the top level of a module, run in
        a child process). ValueError on a name not allowed, an unknown pool, or a name
        already registered to another handler; TypeError on a handler the process pool
        cannot run."""
        check_task(name)
        if is_reserved(name):
            raise ValueError(f"task {name!r}: names starting with {RESERVED_PREFIX!r} are kept "
                             f"for the scheduler's own tasks; choose another name")
        if pool not in POOLS:
            raise ValueError(f"task {name!r}: pool must be \"thread\" or \"process\", "
                             f"not {pool!r}")
        defaults = check_defaults(name, {
            "queue": queue, "timeout": timeout, "retry": retry, "delivery": delivery,
            "priority": priority, "dedupe_ttl": dedupe_ttl, "debounce": debounce})

        def register(fn: Callable[[Any, P], R]) -> TaskHandle[P, R]:
            if isinstance(fn, TaskHandle):
                fn = fn.fn
            if name in self.tasks and self.tasks[name].fn is not fn:
                raise ValueError(f"task {name!r} is already registered to "
                                 f"{self.tasks[name].fn.__qualname__}")
            if pool == "process":
                _check_importable(name, fn)
            task = self.tasks[name] = Task(name, fn, pool == "process", defaults)
            return TaskHandle(name, fn, defaults, task.payload_type)

        return register

    def schedule(self, name: str, task: TaskHandle[Any, Any] | str, payload: Any = None, *,
                 cron: str, queue: str | None = None, timeout: float | None = None,
                 retry: RetryPolicy | None = None, delivery: str | None = None,
                 priority: int | None = None, concurrency_key: str | None = None,
                 tz: str | None = None, catchup: str | None = None,
                 catchup_limit: int | None = None, overlap: str | None = None,
                 start_at: datetime | None = None, end_at: datetime | None = None,
                 on_time_within: float | None = None) -> DeclaredSchedule:
        """Declare the named schedule `name` with the code: `Client.schedule`'s arguments,
        `task` a TaskHandle or a task name. A handle, or the name of a task of this
        registry, has the task's defaults fill the options left at None and a typed payload
        checked against its type. Nothing is written now: each `sched scheduler`, `sched
        worker` and `sched dev` start with this app applies its declarations (creates or
        updates each by name, deletes those it declared before and no longer does:
        the docs' "Schedules" guide), and TestScheduler applies them when it starts. The options
        are checked now (ValidationError naming one); a name declared twice is a
        ValueError."""
        if name in self.schedules:
            raise ValueError(f"schedule {name!r} is already declared in this registry; give "
                             f"each declared schedule its own name")
        # The task's defaults and typed payload, as a submit through its handle takes them,
        # known here whether or not a worker has published them to the catalog yet.
        task_name = task.name if isinstance(task, TaskHandle) else task
        source: TaskHandle[Any, Any] | Task | None = (
            task if isinstance(task, TaskHandle) else self.tasks.get(task_name))
        if source is not None:
            if source.payload_type is not None:
                payload = check_payload(task_name, source.payload_type, payload)
            d = source.defaults
            queue = d.get("queue") if queue is None else queue
            timeout = d.get("timeout") if timeout is None else timeout
            retry = d.get("retry") if retry is None else retry
            delivery = d.get("delivery") if delivery is None else delivery
            priority = d.get("priority") if priority is None else priority
        declared = declare_schedule(
            name, task_name, payload, cron=cron,
            queue=queue, timeout=timeout, retry=retry, delivery=delivery, priority=priority,
            concurrency_key=concurrency_key, tz=tz, catchup=catchup,
            catchup_limit=catchup_limit, overlap=overlap, start_at=start_at, end_at=end_at,
            on_time_within=on_time_within)
        self.schedules[name] = declared
        return declared

    def has_process_tasks(self) -> bool:
        """Whether any task runs in the process pool (the worker starts one only then)."""
        return any(t.process for t in self.tasks.values())

    def get(self, name: str) -> Task | None:
        """The task registered as `name` (None: none is)."""
        return self.tasks.get(name)

    def names(self) -> list[str]:
        """The registered task names, sorted."""
        return sorted(self.tasks)


def _check_importable(name: str, fn: Handler) -> None:
    """A process-pool handler is found in the child by its module and name: a plain `def`
    at the top level of a module. An `async def` has no place there (it would hold a child
    while it waits: it belongs on the event loop)."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"task {name!r}: pool=\"process\" takes a plain def, not an async def "
                        f"({fn.__qualname__}); an async def runs on the worker's event loop: "
                        f"drop pool=\"process\"")
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if not inspect.isfunction(fn) or not module or "<" in qualname:
        raise TypeError(f"task {name!r}: pool=\"process\" takes a function defined at the top "
                        f"level of a module (its child process imports it by name), not "
                        f"{qualname or type(fn).__name__!r}")


class Context:
    """What a handler knows about the run it is doing. `idempotency_key` is the slot id:
    stable across every attempt of this slot, distinct for every other slot. `now_ms` stamps
    ctx.logger's lines (the worker passes its clock's)."""

    # _progress and _sent are set only by a run that reports progress (ctx.progress and the
    # heartbeat): a run that does not pays nothing for them.
    __slots__ = ("slot_id", "job_id", "attempt", "fire_ms", "task", "delivery", "_logger",
                 "_once", "_now_ms", "_progress", "_sent")

    def __init__(self, slot_id: str, job_id: str, attempt: int, fire_ms: int, task: str,
                 delivery: str, once: Callable[[str], Awaitable[bool]] | None = None,
                 now_ms: Callable[[], int] = _wall_ms) -> None:
        self.slot_id = slot_id
        self.job_id = job_id
        self.attempt = attempt
        self.fire_ms = fire_ms
        self.task = task
        self.delivery = delivery
        self._logger: RunLogger | None = None
        self._once = once
        self._now_ms = now_ms

    async def once(self, name: str) -> bool:
        """True only the first time the side effect `name` is recorded for this slot, across
        all its attempts: `if await ctx.once("charge"): charge(...)`. Raises LeaseLost when
        this attempt no longer owns the slot (it was reclaimed); stop without the effect.

        The record and the effect are not one transaction: a crash between them loses the
        effect (at most once per name). For exactly-once effects in another system, pass
        `ctx.idempotency_key` to it as well."""
        if self._once is None:
            raise RuntimeError("ctx.once needs a running worker")
        return await self._once(name)

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the run is: `fraction` done (0..1) and an optional one-line
        message, as `client.progress(job_id)`, `sched runs` and the console show them. A
        plain call in every handler, async or not; it writes nothing: the worker's next
        heartbeat carries the latest report (at most one write per run per heartbeat
        interval, however often it is called). ValueError on a fraction outside 0..1 or a
        message that is not a string."""
        fraction, message = check_progress(fraction, message)
        self._progress = (fraction, message, self._now_ms())

    def reported(self) -> tuple[float, str | None, int] | None:
        """The latest progress not yet sent by a heartbeat (None: nothing new)."""
        latest = getattr(self, "_progress", None)
        return None if latest is None or latest is getattr(self, "_sent", None) else latest

    def sent(self, report: tuple[float, str | None, int]) -> None:
        """Mark `report` (from `reported`) as carried by a heartbeat: the worker calls it."""
        self._sent = report

    @property
    def idempotency_key(self) -> str:
        """The slot id: the same in every attempt of this slot, distinct for every other
        slot. Pass it to another system as its idempotency key."""
        return self.slot_id

    @property
    def logger(self) -> RunLogger:
        """A logger whose lines name the run (slot, task, attempt); its lines at INFO and
        above are also kept with the attempt (the first LOG_LINES, each cut at
        LOG_LINE_CHARS), which `sched runs` and the console show."""
        # Built on first use: most handlers never log, and this is the hot path.
        if self._logger is None:
            self._logger = RunLogger(
                _log, {"slot_id": self.slot_id, "task": self.task, "attempt": self.attempt},
                self._now_ms)
        return self._logger

    def run_log(self) -> list[str] | None:
        """The lines this run logged (None: it logged none), for its attempt's record."""
        lg = self._logger
        if lg is None or not lg.lines:
            return None
        more = [f"({lg.dropped} more line(s) not kept)"] if lg.dropped else []
        return [*lg.lines, *more]


class SyncContext(Context):
    """The context of a process-pool handler (a plain `def`, which cannot await): the same
    fields, and `ctx.once(name)` a plain call that returns the same answer
    (`if ctx.once("charge"): ...`). `once` here blocks until the worker has the answer."""

    __slots__ = ()

    def once(self, name: str) -> bool:  # type: ignore[override]
        """As `Context.once`, a plain call: True only the first time the side effect
        `name` is recorded for this slot, across all its attempts."""
        if self._once is None:
            raise RuntimeError("ctx.once needs a running worker")
        return self._once(name)  # type: ignore[return-value]
