"""The task catalog a worker runs from, and the context each handler receives."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .models import check_task

Handler = Callable[["Context", Any], Any]
_log = logging.getLogger("scheduler.task")


class Task:
    __slots__ = ("name", "fn", "is_async")

    def __init__(self, name: str, fn: Handler) -> None:
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)


class Registry:
    """`registry = Registry()`, then `@registry.task("emails.send")` on `async def
    handler(ctx, payload)` or a plain `def` (run in the worker's thread pool)."""

    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}

    def task(self, name: str) -> Callable[[Handler], Handler]:
        check_task(name)

        def register(fn: Handler) -> Handler:
            if name in self.tasks and self.tasks[name].fn is not fn:
                raise ValueError(f"task {name!r} is already registered to "
                                 f"{self.tasks[name].fn.__qualname__}")
            self.tasks[name] = Task(name, fn)
            return fn

        return register

    def get(self, name: str) -> Task | None:
        return self.tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self.tasks)


class Context:
    """What a handler knows about the run it is doing. `idempotency_key` is the slot id:
    stable across every attempt of this slot, distinct for every other slot."""

    __slots__ = ("slot_id", "job_id", "attempt", "fire_ms", "task", "delivery", "_logger",
                 "_once")

    def __init__(self, slot_id: str, job_id: str, attempt: int, fire_ms: int, task: str,
                 delivery: str, once: Callable[[str], Awaitable[bool]] | None = None) -> None:
        self.slot_id = slot_id
        self.job_id = job_id
        self.attempt = attempt
        self.fire_ms = fire_ms
        self.task = task
        self.delivery = delivery
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None
        self._once = once

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

    @property
    def idempotency_key(self) -> str:
        return self.slot_id

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        # Built on first use: most handlers never log, and this is the hot path.
        if self._logger is None:
            self._logger = logging.LoggerAdapter(
                _log, {"slot_id": self.slot_id, "task": self.task, "attempt": self.attempt})
        return self._logger
