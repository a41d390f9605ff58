"""The canary's handler (scheduler/core/canary.py): a no-op that records its start and end in
its verify run's log, with this worker's id and its attempt. Every worker serves it unless
its registry was made with `canary=False`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from scheduler.core import canary
from scheduler.core.keys import Keys
from scheduler.redis import transport
from scheduler.redis.failures import REDIS_ERRORS
from scheduler.worker.registry import Context, Task

RECORD_RETRY_S = 30.0  # how long a record waits for Redis to come back
RECORD_RETRY_PAUSE_S = 0.2


class CanaryFailed(Exception):
    """The planned failure of a canary's first attempt (its payload asked for it)."""


class Canary:
    """The canary of one worker: what it records names that worker."""

    def __init__(self, client: Any, keys: Keys, worker_id: str) -> None:
        self.redis = client
        self.keys = keys
        self.worker_id = worker_id

    def task(self) -> Task:
        """The canary as the worker runs it (a Task under the reserved name)."""
        return Task(canary.TASK, self.run)

    async def run(self, ctx: Context, asked: canary.Payload) -> None:
        """Record the start; fail the attempts asked to fail (recorded as "failed"), or
        record the end."""
        await self._record(asked.run, ctx, "start")
        if asked.hold_ms > 0:
            await asyncio.sleep(min(asked.hold_ms, canary.MAX_HOLD_MS) / 1000)
        if ctx.attempt <= max(asked.fail_attempts, 1 if asked.fail_first else 0):
            await self._record(asked.run, ctx, "failed")
            raise CanaryFailed(f"the canary fails attempt {ctx.attempt}, as its payload asks")
        await self._record(asked.run, ctx, "end")

    async def _record(self, run: str, ctx: Context, event: str) -> None:
        line = canary.encode_record(canary.Record(
            slot=ctx.slot_id, attempt=ctx.attempt, worker=self.worker_id, event=event,
            ms=int(time.time() * 1000)))
        key = self.keys.verify_log(run)
        deadline = time.monotonic() + RECORD_RETRY_S
        while True:
            pipe = transport.pipeline(self.redis)
            pipe.execute_command("RPUSH", key, line)
            pipe.execute_command("EXPIRE", key, canary.LOG_TTL_S)
            try:
                await transport.send(pipe)
                return
            except REDIS_ERRORS:
                # Redis away (a restart or failover under `--redis-restart`): the attempt
                # waits for it rather than fail, as a no-op never does. A record sent twice
                # is read once (verify counts each slot, attempt, worker and event once).
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(RECORD_RETRY_PAUSE_S)

