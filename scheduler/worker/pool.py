"""The worker's process pool: child processes (scheduler/worker/child.py) that run the
`pool="process"` handlers, each run in a child of its own, so CPU-bound work uses more than
the one core the worker's event loop and thread pool share, and a run that must stop can be
stopped.

The worker starts the pool only when its registry has a process task. A run waits for an
idle child (its timeout counts from when one takes it), sends it its context and payload,
and serves what comes back: log lines into the run's `ctx.logger`, `ctx.progress` reports
onto its context (the heartbeat carries them), `ctx.once` questions
answered by the worker's own `ctx.once` (Execution._once), then the outcome. The worker
keeps the run's lease, heartbeat and commit throughout, as for any run.

A run stopped for its timeout, a cancel request, a lost lease or the worker's shutdown
SIGKILLs its child at once (a thread cannot be stopped; a process can), and the pool starts
another in its place; so does a child that died, and one that ran `max_tasks_per_child` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from scheduler.core.errors import Cancel, ConfigError, LeaseLost, Retry
from scheduler.core.models import DEFAULT_MAX_PAYLOAD_BYTES, decode_payload
from scheduler.redis.service import Backoff
from scheduler.worker.child import (
    HEADER,
    Done,
    Failed,
    FromChild,
    Job,
    Line,
    OnceAsk,
    OnceReply,
    Ready,
    Report,
    Setup,
)
from scheduler.worker.execution import ChildFailed
from scheduler.worker.inflight import Run
from scheduler.worker.registry import Registry

log = logging.getLogger("scheduler.worker.pool")
START_S = 60.0  # how long a new child has to import the handlers and say it is ready
RETIRE_S = 5.0  # how long a retired child has to exit by itself


def cores() -> int:
    """The cores this process may run on (its CPU affinity, where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Child:
    __slots__ = ("proc", "reader", "writer", "runs")

    def __init__(self, proc: subprocess.Popen[bytes], reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.proc = proc
        self.reader = reader
        self.writer = writer
        self.runs = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: Any) -> None:
        data = _encode(message)
        self.writer.write(HEADER.pack(len(data)) + data)

    async def read(self) -> FromChild:
        (size,) = HEADER.unpack(await self.reader.readexactly(HEADER.size))
        return _decode(await self.reader.readexactly(size))


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(FromChild).decode


class ProcessPool:
    def __init__(self, registry: Registry, size: int, max_tasks_per_child: int,
                 once: Callable[[Run, str], Awaitable[bool]]) -> None:
        self.size = size
        self.max_tasks_per_child = max_tasks_per_child
        self.once = once
        self.result_limit = DEFAULT_MAX_PAYLOAD_BYTES  # the worker sets the namespace's
        main = sys.modules.get("__main__")
        self.setup = Setup(
            path=list(sys.path),
            tasks={t.name: t.where for t in registry.tasks.values() if t.process},
            main=getattr(main, "__file__", None),
            log_level=min(logging.INFO, logging.getLogger("scheduler.task").getEffectiveLevel()))
        self.idle: asyncio.Queue[Child] = asyncio.Queue()
        self.procs: set[subprocess.Popen[bytes]] = set()  # every child alive or starting
        self.replacing: set[asyncio.Task[None]] = set()
        self.closed = False
        self.replaced = 0  # children started in place of one that stopped
        self.waiting = 0  # runs claimed that wait for an idle child (the worker reads less)

    def startable(self) -> int:
        """Runs the children can start now or next: one per idle child and one waiting per
        child (each child's next run is at hand when it ends one), less the runs waiting."""
        return self.idle.qsize() + self.size - self.waiting

    def pids(self) -> list[int]:
        return sorted(p.pid for p in self.procs)

    async def start(self, stop: asyncio.Event | None = None) -> bool:
        """Start every child and wait until each has imported the handlers; a child that
        cannot (a handler's module fails to import) is a ConfigError naming it. False when
        `stop` is set first (a SIGTERM while a slow module imports): every child is killed,
        rather than the worker's stop waiting up to START_S."""
        spawning = asyncio.gather(*(self._spawn() for _ in range(self.size)),
                                  return_exceptions=True)
        stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
        try:
            await asyncio.wait([spawning] + ([stopped] if stopped else []),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stopped is not None:
                stopped.cancel()
            if not spawning.done():  # stopped, or this start cancelled
                spawning.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await spawning
                self.close()
        if self.closed:
            return False
        started = spawning.result()
        for child in started:
            if isinstance(child, Child):
                self.idle.put_nowait(child)
        failed = [e for e in started if isinstance(e, BaseException)]
        if failed:
            self.close()
            raise failed[0]
        log.info("process pool: %d child process(es) for %s", self.size,
                 ", ".join(sorted(self.setup.tasks)))
        return True

    async def _spawn(self) -> Child:
        mine, theirs = socket.socketpair()
        try:
            proc = _start(theirs)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.procs.add(proc)
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection(sock=mine)
            child = Child(proc, reader, writer)
            child.send(self.setup)
            try:
                ready = await asyncio.wait_for(child.read(), START_S)
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                raise ConfigError(f"a process-pool child did not start ({_ended(proc)})"
                                  ) from None
            if not isinstance(ready, Ready) or ready.error:
                raise ConfigError("a process-pool child cannot load the handlers: "
                                  f"{getattr(ready, 'error', ready)}")
            return child
        except BaseException:
            self._kill(proc)
            if writer is not None:
                writer.close()
            mine.close()
            raise

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL a child and reap it (in a thread: SIGKILL ends it promptly, but a wait
        must not hold the event loop)."""
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        self.procs.discard(proc)
        if proc.poll() is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                proc.wait()
            else:
                loop.run_in_executor(None, proc.wait)

    def _retire(self, child: Child, kill: bool = True) -> None:
        """Stop a child and start another in its place. One that served its
        max_tasks_per_child runs is not killed: it exits at the end of file (its atexit
        hooks run), SIGKILLed only if it has not within RETIRE_S."""
        child.writer.close()
        if kill:
            self._kill(child.proc)
        else:
            asyncio.get_running_loop().run_in_executor(None, self._reap, child.proc)
        if self.closed:
            return
        task = asyncio.get_running_loop().create_task(self._replace())
        self.replacing.add(task)
        task.add_done_callback(self.replacing.discard)

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(RETIRE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.procs.discard(proc)

    async def _replace(self) -> None:
        backoff = Backoff()
        while not self.closed:
            try:
                child = await self._spawn()
            except Exception as exc:
                log.error("could not start a process-pool child (%s); trying again", exc)
                await asyncio.sleep(backoff.next())
                continue
            self.replaced += 1
            if self.closed:
                self._retire(child)
            else:
                self.idle.put_nowait(child)
            return

    async def run(self, run: Run) -> Any:
        """Run a process task's handler in a child; its return value, or what it raised
        (Retry, Cancel, LeaseLost, ChildFailed), as the thread pool would give them."""
        child = self.idle.get_nowait() if not self.idle.empty() else await self._wait(run)
        try:
            child.send(Job(run.task, run.slot_id, run.slot_id.rpartition(":")[0],
                           run.attempt, run.fire_ms, run.delivery,
                           msgspec.Raw(run.payload or b"null"), self.result_limit))
            while True:
                message = await child.read()
                if isinstance(message, Line):
                    run.ctx.logger.log(message.level, message.text)
                elif isinstance(message, OnceAsk):
                    child.send(await self._once(run, message.name))
                elif isinstance(message, Report):
                    run.ctx.progress(message.fraction, message.message)
                else:
                    break
        except asyncio.CancelledError:  # stopped: timeout, cancel, lost lease, shutdown
            self._retire(child)
            raise
        except (asyncio.IncompleteReadError, ConnectionError, msgspec.DecodeError):
            with contextlib.suppress(subprocess.TimeoutExpired):  # its own exit status
                await asyncio.to_thread(child.proc.wait, 1.0)
            ended = _ended(child.proc)
            self._retire(child)
            raise ChildFailed(f"the process-pool child running this handler died ({ended})"
                              ) from None
        child.runs += 1
        if self.max_tasks_per_child and child.runs >= self.max_tasks_per_child:
            self._retire(child, kill=False)
        else:
            self.idle.put_nowait(child)
        if isinstance(message, Done):
            if message.unkept:
                log.warning("task %s (slot %s) returned a value that is not kept: %s",
                            run.task, run.slot_id, message.unkept)
            return decode_payload(message.value)
        if isinstance(message, Failed):
            raise _raised(message)
        raise ChildFailed(f"the process-pool child sent {type(message).__name__}")

    async def _wait(self, run: Run) -> Child:
        """An idle child, once there is one. The timeout counts from when a child takes the
        run: no timer while it waits (a placeholder keeps Execution.start from arming one)."""
        loop = asyncio.get_running_loop()
        if run.timer is not None:
            run.timer.cancel()
        run.timer = loop.call_later(0, _nothing)
        run.timer.cancel()
        self.waiting += 1
        try:
            child = await self.idle.get()
        finally:
            self.waiting -= 1
        if run.timeout_ms:
            run.timer = loop.call_later(run.timeout_ms / 1000, run.stop, "timeout")
        return child

    async def _once(self, run: Run, name: str) -> OnceReply:
        try:
            return OnceReply(ok=await self.once(run, name))
        except LeaseLost as exc:
            return OnceReply(stale=True, error=str(exc))
        except Exception as exc:
            return OnceReply(error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Stop every child (at the worker's exit): none outlives the worker."""
        self.closed = True
        for task in self.replacing:
            task.cancel()
        while not self.idle.empty():
            self.idle.get_nowait().writer.close()
        for proc in list(self.procs):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        for proc in list(self.procs):
            proc.wait()
        self.procs.clear()


def _start(theirs: socket.socket) -> subprocess.Popen[bytes]:
    """A fresh interpreter (not a fork of the worker, its event loop and its threads), which
    inherits the worker's stdout and stderr: what a handler prints shows where it would."""
    # The child runs this very scheduler package, wherever the worker found it.
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    return subprocess.Popen([sys.executable, "-m", "scheduler.worker.child",
                             str(theirs.fileno()), str(os.getpid())],
                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                            env={**os.environ,
                                 "PYTHONPATH": here if not path else f"{here}{os.pathsep}{path}"})


def _nothing() -> None:
    pass


def _raised(failed: Failed) -> BaseException:
    if failed.kind == "retry":
        return Retry(failed.after, failed.text)
    if failed.kind == "cancel":
        return Cancel(failed.text)
    if failed.kind == "lost":
        return LeaseLost(failed.text)
    return ChildFailed(failed.text, failed.trace)


def _ended(proc: subprocess.Popen[bytes]) -> str:
    code = proc.poll()
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
