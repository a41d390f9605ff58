"""A worker's runs in flight: the table the worker, its heartbeat and its watchdog share.

Each `Run` knows the latest moment (on the clock's `monotonic()`) at which its lease surely still
holds in Redis: `deadline`. A claim sets it to the claim's send time plus the lease; every
heartbeat that renewed the slot moves it to that heartbeat's send time plus the lease. Redis
extended the lease from a time no earlier than the send, so the real lease ends no sooner.
The watchdog stops a run a margin before its deadline when no heartbeat got through: a
worker cut off from Redis stops before any other worker can be given the slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import scheduler.observe.metrics as metrics
from scheduler.scripts.replies import Grant


class Run:
    """One claimed slot while this worker holds its lease."""

    __slots__ = ("shard", "slot_id", "token", "attempt", "task", "payload", "timeout_ms",
                 "delivery", "fire_ms", "started_ms", "handler", "stop_reason", "timer", "metrics",
                 "deadline", "begun", "ended", "on_stuck", "stuck_after_s", "ctx", "permit",
                 "on_end", "lane", "msg", "announced")

    def __init__(self, shard: int, slot_id: str, grant: Grant, deadline: float,
                 lane: str = "", msg: bytes | str = "") -> None:
        self.shard = shard
        self.slot_id = slot_id
        # The entry it was claimed from, pending until its outcome is committed ("" for an
        # at_most_once slot, acked at claim; "~<key>" for a keyed one, its key's running set):
        # complete.lua's fence (scripts.complete).
        self.lane = lane
        self.msg = msg
        self.announced = False  # a heartbeat told history it runs ("claimed", heartbeat.lua)
        # The attempt number is the fencing token.
        self.token = grant.token
        self.task = grant.task
        self.payload = grant.payload
        self.timeout_ms = grant.timeout_ms
        self.delivery = grant.delivery
        self.fire_ms = grant.fire_ms
        self.attempt = self.token
        self.started_ms = 0
        self.deadline = deadline
        self.begun = False  # the worker's task for it has started (it cancels only then)
        self.ended = False  # its outcome is recorded (by its task, or on giving up on it)
        # Called when a cancelled handler has not stopped `stuck_after_s` later.
        self.on_stuck: Callable[[Run], None] | None = None
        self.stuck_after_s = 1.0
        self.handler: asyncio.Task[None] | None = None  # the task running the handler
        self.stop_reason: str | None = None  # why we cancelled it: timeout, lost, cancel, release
        self.timer: asyncio.TimerHandle | None = None
        self.metrics: metrics.RunMetrics
        self.ctx: Any = None  # the handler's Context, once it started (its log lines)
        # A run of a queue with a queue-wide limit: (queue, permit), and what gives the
        # permit back when the run ends (limiter.py). ("", "") and None for every other run.
        self.permit: tuple[str, str] = ("", "")
        self.on_end: Callable[[Run], None] | None = None

    def stop(self, reason: str) -> bool:
        """Cancel the handler (once); False when it already ended or was stopped. A task not
        started yet is not cancelled (it would end without running its own cleanup, and the
        run would stay in the table, heartbeated forever): it sees the reason when it starts.
        A handler that ignores its cancellation (catches CancelledError and goes on) is
        reported to `on_stuck` after `stuck_after_s`, which gives up on it."""
        if self.stop_reason is None and self.handler is not None and not self.handler.done():
            self.stop_reason = reason
            if self.begun:
                self.handler.cancel()
                if self.on_stuck is not None:
                    asyncio.get_running_loop().call_later(self.stuck_after_s, self.on_stuck,
                                                          self)
            return True
        return False


Inflight = dict[str, Run]  # slot id -> its run
