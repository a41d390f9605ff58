"""The testing mode: `TestScheduler(registry)` runs the real scripts and services on an
in-memory Redis and a fake clock, in the test's process (`pip install 'redis-sched[testing]'`).
How to use it: the docs' "Testing" guide."""

from scheduler.core.errors import HandlerFailed
from scheduler.testing.harness import Ran, TestClient, TestScheduler

__all__ = ["HandlerFailed", "Ran", "TestClient", "TestScheduler"]
