"""The testing mode: `TestScheduler(registry)` runs the real scripts and services on an
in-memory Redis and a fake clock, in the test's process (`pip install 'redis-sched[testing]'`).
How to use it: the docs' "Testing" guide."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler.core.errors import HandlerFailed

if TYPE_CHECKING:
    from scheduler.testing.harness import Ran, TestClient, TestScheduler

__all__ = ["HandlerFailed", "Ran", "TestClient", "TestScheduler"]


def __getattr__(name: str) -> Any:
    # The harness (and fakeredis under it) loads on first use: `sched verify` imports this
    # package's verify, chaos and restart modules, and every `sched` start would pay for it.
    if name in __all__:
        from scheduler.testing import harness
        return getattr(harness, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
