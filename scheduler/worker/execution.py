"""Runs the handlers of claimed slots and records, once, how each run ended.

`start()` creates a run's task and its timeout; the task calls the handler (an `async def`
as a task, a plain `def` in the thread pool, a `pool="process"` one in a child of the process
pool: scheduler/worker/pool.py) and hands its outcome to the committer. On
Python 3.12+ the task starts eagerly (`WorkerConfig.eager_start`, on by default): an `async
def` that returns without awaiting has ended within `start()`, never scheduled on the loop
(with it off, and always on 3.11, it runs on the next loop iteration). A run is stopped
(scheduler/worker/inflight.py, `Run.stop`) for its timeout, a lost lease, a cancel request
or the worker's shutdown; its outcome then follows from the reason. A handler that does not stop
within `stuck_after_s` of its cancellation (it caught CancelledError and went on) is given up
on: the slot moves on as if it had stopped, and the handler may go on in the background, as
a thread that cannot be stopped does. Nothing a handler does, raises or returns can take the
worker down: its error text is made one line of valid UTF-8 before it is sent to Redis.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import sys
import traceback
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

import redis.asyncio

import scheduler.observe.metrics as metrics
import scheduler.scripts.calls as scripts
import scheduler.scripts.replies as replies
from scheduler.core.errors import Cancel, LeaseLost, Retry, ValidationError
from scheduler.core.keys import Keys
from scheduler.core.models import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_SECONDS,
    decode_payload,
    encode_payload,
    retry_after_ms,
)
from scheduler.core.states import Outcome
from scheduler.redis.clients import where
from scheduler.redis.clock import Clock
from scheduler.redis.failures import REDIS_ERRORS, translate
from scheduler.redis.service import Backoff, transient
from scheduler.scripts.replies import Code
from scheduler.worker.committer import Committer
from scheduler.worker.inflight import Inflight, Run
from scheduler.worker.registry import Context, Registry, SyncContext, Task
from scheduler.worker.slots import Pace

if TYPE_CHECKING:
    from scheduler.observe.tracing import RunTracer

log = logging.getLogger("scheduler.worker.worker")
handler_log = logging.getLogger("scheduler.handler")


class Pool(Protocol):
    """The process pool as execution uses it (scheduler/worker/pool.py)."""

    async def run(self, run: Run) -> Any: ...

    def close(self) -> None: ...


class ChildFailed(Exception):
    """What a process-pool handler raised, as its child reported it: the attempt's error
    line (made in the child, as `_one_line` makes it here) and the traceback text."""

    def __init__(self, line: str, trace: str = "") -> None:
        super().__init__(f"{line}\n{trace}".rstrip())
        self.line = line


class HandlerErrors:
    """Logs failed handlers with their traceback (the slot keeps one line): the first
    failure of a task at once, then at most one per task every `every_s`, saying how many
    were held back meanwhile, so a task failing thousands of times a second costs a line,
    not the log. At most `tasks` task names are remembered (they come from Redis)."""

    def __init__(self, every_s: float = 10.0, tasks: int = 1000) -> None:
        self.every_s = every_s
        self.tasks = tasks
        self._last: dict[str, tuple[float, int]] = {}  # task -> (logged at, held back)

    def report(self, run: Run, exc: BaseException, now: float) -> None:
        last, held = self._last.get(run.task, (-1e18, 0))
        if now - last < self.every_s:
            self._last[run.task] = (last, held + 1)
            return
        if len(self._last) >= self.tasks:
            self._last.clear()
        self._last[run.task] = (now, 0)
        more = f" ({held} more failure(s) of this task not shown)" if held else ""
        handler_log.error("task %s failed: slot %s, attempt %d%s", run.task, run.slot_id,
                          run.attempt, more, exc_info=(type(exc), exc, exc.__traceback__),
                          extra={"slot_id": run.slot_id, "task": run.task,
                                 "attempt": run.attempt})


class Execution:
    def __init__(self, client: redis.asyncio.Redis, keys: Keys, clock: Clock,
                 registry: Registry, committer: Committer, running: Inflight,
                 capacity: asyncio.Event, *, lease_s: float, threads: int,
                 tracing: Any = False, eager: bool = False, pace: Pace | None = None) -> None:
        self.redis = client
        self.keys = keys
        self.clock = clock
        self.registry = registry
        self.reserved: dict[str, Task] = {}  # the scheduler's own tasks (the worker sets)
        self.committer = committer
        self.running = running
        self.capacity = capacity  # set whenever a run ends: the reader may claim again
        self.pace = pace or Pace()  # counts the runs that end (Claims.read_ahead reads it)
        self.tracer: RunTracer | None = None
        if tracing:  # True, or the TracerProvider to use
            from scheduler.observe.tracing import RunTracer

            self.tracer = RunTracer(None if tracing is True else tracing)
        pool = ThreadPoolExecutor if self.tracer is None else self.tracer.pool  # carries spans
        self.executor = pool(max_workers=threads, thread_name_prefix="sched-handler")
        # How long a cancelled handler has to stop before it is given up on: within the
        # watchdog's margin (a quarter of the lease), so even then before the lease ends.
        self.stuck_after_s = min(5.0, lease_s / 8)
        self.given_up: list[Run] = []  # their tasks may still be going
        # Runs stopped as lost while Redis may still hold their lease for this worker (the
        # watchdog stops them early): their entries are never taken back (slot -> when).
        self.abandoned: dict[str, float] = {}
        self.handler_errors = HandlerErrors()
        self.result_limit = DEFAULT_MAX_PAYLOAD_BYTES  # the namespace's, once the worker knows
        self._task = _eager_task if eager else _task  # WorkerConfig.eager_start
        self._on_stuck = self._stuck  # bound once: start() runs once per job
        self._now_ms = clock.now_ms  # stamps ctx.logger's lines, as started_ms is stamped
        self.pool: Pool | None = None  # started by Worker.run for pool="process" tasks

    def start(self, run: Run, loop: asyncio.AbstractEventLoop) -> None:
        """Start a claimed run (it is already in the table). With eager start (3.12+,
        `_eager_task`) the handler runs here up to its first await, and one that returns
        without awaiting has ended (left the table, outcome with the committer) before this
        returns, so its timer is never set."""
        run.on_stuck, run.stuck_after_s = self._on_stuck, self.stuck_after_s
        # Under tracing the handler runs inside its run's span.
        context = None if self.tracer is None else self.tracer.begin(run)
        run.handler = self._task(loop, self._execute(run), context)
        if run.timeout_ms and not run.ended and run.timer is None:  # (the pool may set it)
            run.timer = loop.call_later(run.timeout_ms / 1000, run.stop, "timeout")

    async def _execute(self, run: Run) -> None:
        run.begun = True
        try:
            if run.stop_reason is not None:  # stopped before this task could start
                raise asyncio.CancelledError
            task = (self.registry.tasks.get(run.task) or self.reserved.get(run.task)
                    or self._unknown(run))
            job_id = run.slot_id.rpartition(":")[0]
            ctx = run.ctx = Context(run.slot_id, job_id, run.attempt, run.fire_ms, run.task,
                                    run.delivery, lambda name: self._once(run, name),
                                    self._now_ms)
            # A typed payload is decoded into its type (Task.decode); the rest as before.
            payload = (decode_payload(run.payload) if task.decoder is None
                       else task.decode(run.payload))
            if task.is_async:
                value = await task.fn(ctx, payload)
            elif not task.process:
                value = await asyncio.get_running_loop().run_in_executor(
                    self.executor, task.fn, ctx, payload)
            else:
                value = await self._process(run, task, payload)
        except asyncio.CancelledError:
            if run.stop_reason is None:
                self.end(run, "lost")
                raise  # not ours: never swallow a cancellation we did not start
            self.end(run, *self._stopped(run))
        except LeaseLost:
            self.end(run, "lost")  # the slot was reclaimed (ctx.once found out)
        except Retry as exc:
            self.end(run, Outcome.RETRIED, clean(exc.reason), self._retry_ms(run, exc))
        except Cancel as exc:
            self.end(run, Outcome.CANCELLED, clean(exc.reason))
        except BaseException as exc:  # SystemExit from a handler too: it ends the attempt only
            self.handler_errors.report(run, exc, self.clock.monotonic())
            if self.tracer is not None:
                self.tracer.raised(run, exc)
            self.end(run, Outcome.FAILED, _one_line(exc))
        else:
            self.end(run, Outcome.SUCCEEDED, result=value)

    def _unknown(self, run: Run) -> Task:
        raise LookupError(
            f"unknown task {run.task!r}: no handler is registered for it in this worker's "
            f"registry (it has {', '.join(self.registry.names()) or 'none'})")

    async def _process(self, run: Run, task: Task, payload: Any) -> Any:
        """A `pool="process"` handler: in a child of the process pool, or, with no pool (the
        testing mode: Worker.run starts it, the harness does not), here in the thread pool
        with the same context, `ctx.once` a plain call as in a child."""
        if self.pool is not None:
            return await self.pool.run(run)
        loop = asyncio.get_running_loop()

        def once(name: str) -> bool:
            return asyncio.run_coroutine_threadsafe(self._once(run, name), loop).result()

        ctx = run.ctx = SyncContext(run.slot_id, run.ctx.job_id, run.attempt, run.fire_ms,
                                    run.task, run.delivery, once,  # type: ignore[arg-type]
                                    self._now_ms)
        return await loop.run_in_executor(self.executor, task.fn, ctx, payload)

    def _stopped(self, run: Run) -> tuple[str, str]:
        """How a run that this worker stopped ended, by the reason it stopped it."""
        reason = run.stop_reason
        if reason == "timeout":
            return Outcome.TIMED_OUT, f"timed out after {run.timeout_ms / 1000:g}s"
        if reason == "cancel":
            return Outcome.CANCELLED, "cancelled on request"
        return ("released", "") if reason == "release" else ("lost", "")

    def _result(self, run: Run, value: Any) -> bytes | None:
        """A succeeded handler's return value as stored with the slot: JSON, at most the
        namespace's payload limit. One that cannot be is logged and not kept (the run still
        succeeded: its effects happened)."""
        try:
            return encode_payload(value, self.result_limit)
        except ValidationError as exc:
            log.warning("task %s (slot %s) returned a value that is not kept: %s", run.task,
                        run.slot_id, str(exc).replace("payload", "result", 1))
            return None

    @staticmethod
    def _run_log(run: Run) -> bytes | None:
        """The lines the handler logged, as JSON for its attempt's record (None: none). The
        run lets go of its Context here: the context's ctx.once closure refers back to the
        run, and a cycle per run would leave every finished run to the cyclic GC, a cost a busy
        worker's throughput shows (`python -m bench burndown`)."""
        ctx, run.ctx = run.ctx, None
        # Most handlers never touch ctx.logger: no logger, nothing to read (the hot path).
        lines = ctx.run_log() if ctx is not None and ctx._logger is not None else None
        if lines is None:
            return None
        try:
            return encode_payload([clean(line) for line in lines])
        except ValidationError:
            return None

    @staticmethod
    def _retry_ms(run: Run, exc: Retry) -> int:
        if exc.after is None:
            return -1
        ms, cut = retry_after_ms(exc.after)
        if cut:
            log.warning("slot %s: Retry(after=%g) is past the longest delay, a year: it "
                        "retries in %d s", run.slot_id, exc.after, MAX_SECONDS)
        return ms

    def end(self, run: Run, kind: str, error: str = "", retry_ms: int = -1,
            result: Any = None) -> None:
        """Record how a run ended, once: it leaves the table, and its outcome goes to the
        committer. `kind` is an Outcome, "released" (handed back), or "lost" (the lease is
        gone or about to be: nothing to commit; its entry is never taken back)."""
        if run.ended:
            return
        run.ended = True
        if run.timer is not None:
            run.timer.cancel()
        if self.tracer is not None:
            self.tracer.end(run, kind, error)
        if self.running.get(run.slot_id) is run:
            del self.running[run.slot_id]
        if run.on_end is not None:
            run.on_end(run)
        self.pace.ended += 1
        self.capacity.set()
        finished = self.clock.now_ms()
        took = finished - run.started_ms
        logged = self._run_log(run)
        if kind == Outcome.SUCCEEDED:
            stored = None if result is None else self._result(run, result)
            self.committer.add_succeeded(run.shard, scripts.Succeeded(
                run.slot_id, run.token, run.started_ms, finished, run.lane, run.msg, stored,
                logged))
            run.metrics.succeeded(took)
        elif kind == "released":
            self.committer.add_released(run.shard, scripts.Released(run.slot_id, run.token,
                                                                    run.started_ms))
            run.metrics.ended("released", took)
        elif kind == "lost":
            self.abandoned[run.slot_id] = self.clock.monotonic()
            run.metrics.ended("lost", took)
        else:
            u = random.random()  # nosec B311 # the retry delay's jitter, not a secret
            self.committer.add_failed(run.shard, scripts.Failed(
                run.slot_id, run.token, kind, error, retry_ms, u, run.started_ms, finished,
                logged, run.task))
            run.metrics.ended(kind, took)

    def _stuck(self, run: Run) -> None:
        """A stopped handler still runs `stuck_after_s` after its cancellation (it caught
        CancelledError and went on): give up on it, as on a thread that cannot be stopped.
        The slot moves on by the reason it was stopped for; the handler may go on in the
        background, and whatever it returns is ignored."""
        if run.ended or run.handler is None or run.handler.done():
            return
        metrics.RUNS_ABANDONED.inc()
        self.given_up.append(run)
        log.warning("the handler of %s (%s) did not stop within %.1fs of its cancellation "
                    "(%s); giving up on it: it may go on in the background", run.slot_id,
                    run.task, run.stuck_after_s, run.stop_reason)
        kind, error = self._stopped(run)
        self.end(run, kind, f"{error}; the handler ignored its cancellation" if error else "")

    async def _once(self, run: Run, name: str) -> bool:
        """ctx.once: while Redis cannot take the record (down, out of memory...) it keeps
        trying; if that lasts, the watchdog stops the run before its lease can expire."""
        call = scripts.once(self.keys.prefix(run.shard), run.slot_id, run.token, name)
        backoff, retried = Backoff(), False
        while True:
            try:
                code = replies.code((await scripts.run_async(self.redis, [call]))[0], "once")
                break
            except REDIS_ERRORS as exc:
                if not transient(exc):
                    raise translate(exc, where(self.redis)) from exc
                retried = True
                await asyncio.sleep(backoff.next())
        if code is Code.STALE:
            raise LeaseLost(f"slot {run.slot_id} attempt {run.attempt} lost its lease")
        # REPEAT after a retry: the first try was recorded but its reply lost.
        return code is Code.OK or (code is Code.REPEAT and retried)

    def close(self) -> None:
        """At shutdown: handlers given up on would keep the event loop from closing (it waits
        for every task): close their coroutines (GeneratorExit where they wait), so the
        process can exit; threads still running are left to finish on their own."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.pool is not None:
            self.pool.close()
        for run in self.given_up:
            if run.handler is not None and not run.handler.done():
                run.handler.get_coro().close()
                run.handler.cancel()
        self.given_up.clear()


def _task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None],
          context: contextvars.Context | None) -> asyncio.Task[None]:
    """A handler's task, first run on the loop's next iteration."""
    return loop.create_task(coro, context=context)


if sys.version_info >= (3, 12):
    def _eager_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None],
                    context: contextvars.Context | None) -> asyncio.Task[None]:
        """A handler's task, started eagerly (as `asyncio.eager_task_factory` does, for these
        tasks only): a handler that never awaits is not scheduled on the loop at all. A loop
        with a task factory of its own gets its tasks from it."""
        if loop.get_task_factory() is not None:
            return loop.create_task(coro, context=context)
        return asyncio.Task(coro, loop=loop, context=context, eager_start=True)
else:  # 3.11 has no eager start
    _eager_task = _task


def clean(text: str, limit: int = 1000) -> str:
    """Error text fit for Redis: one line, at most `limit` characters, and valid UTF-8 (a lone
    surrogate, as os.fsdecode makes of undecodable bytes, cannot be encoded, and would make
    the commit that carries it fail)."""
    line = " ".join(str(text)[:4 * limit].split())[:limit]
    return line.encode("utf-8", "backslashreplace").decode("utf-8")


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ChildFailed):  # made in the child, from what the handler raised
        return exc.line
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose __str__ raises
        text = type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return clean(text)
    where = clean(f"(at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})")
    return f"{clean(text, 999 - len(where))} {where}"
