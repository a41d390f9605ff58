"""The worker's process pool: child processes (scheduler/worker/child.py) that run the
`pool="process"` handlers, each run in a child of its own, so CPU-bound work uses more than
the one core the worker's event loop and thread pool share, and a run that must stop can be
stopped.

The worker starts the pool only when its registry has a process task. A run goes to a child
holding fewer than DEPTH runs (or waits for one): each child has its next run at hand while
it runs one, and begins it without waiting for the worker to be scheduled (on a busy machine
that wait came once per run). Its timeout counts from when the child begins it. The worker
sends the run's context and payload, and serves what comes back: log lines into the run's
`ctx.logger`, `ctx.progress` reports onto its context (the heartbeat carries them),
`ctx.once` questions answered by the worker's own `ctx.once` (Execution._once), then the
outcome. The worker keeps the run's lease, heartbeat and commit throughout, as for any run.

A run stopped for its timeout, a cancel request, a lost lease or the worker's shutdown
SIGKILLs its child at once (a thread cannot be stopped; a process can), and the pool starts
another in its place (the runs that child held and had not begun go to another); so does a
child that died, and one that ran `max_tasks_per_child` runs. A run stopped while it waits in
a child is taken back (`Drop`); should the child begin it before the Drop arrives, it is
SIGKILLed as for a run going.

No run waits behind a long one while a child is free. When a child is started, or ends a run
with none other sent to it, and another child holds a run it has not begun behind one it has,
the pool takes that run back (`Drop`) and keeps the free child a place for it. The busy child
answers exactly one of two ways, in the order it did them: `Dropped` (it never will begin
it), and only then is the run sent to the free child; or that run's `Started` (it began it
before the Drop came), and the run stays where it is. A run never goes to two children.

Each child runs in a session of its own: Linux's autogroup scheduling shares a busy machine's
CPU between sessions, and in the worker's session the worker and all its children would get
one share between them.
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
    Drop,
    Dropped,
    Failed,
    FromChild,
    Job,
    Line,
    OnceAsk,
    OnceReply,
    Ready,
    Report,
    Setup,
    Started,
)
from scheduler.worker.execution import ChildFailed
from scheduler.worker.inflight import Run
from scheduler.worker.registry import Registry

log = logging.getLogger("scheduler.worker.pool")
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(FromChild).decode
DEPTH = 2  # runs sent to a child at once: the one it runs, and the next at hand
RESEND = object()  # an Item's result: its child went before it began; send it to another
START_S = 60.0  # how long a new child has to import the handlers and say it is ready
RETIRE_S = 5.0  # how long a retired child has to exit by itself


def cores() -> int:
    """The cores this process may run on (its CPU affinity, where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Item:
    """A run sent to a child: done when its outcome (or the word to send it again) comes."""

    __slots__ = ("run", "seq", "future", "child", "moving")

    def __init__(self, run: Run, seq: int, future: asyncio.Future[Any], child: Child) -> None:
        self.run = run
        self.seq = seq
        self.future = future
        self.child = child  # the one holding it
        self.moving: Child | None = None  # the free child it goes to once Dropped comes


class Child(asyncio.Protocol):
    """The worker's end of one child's socket. Messages are decoded as they arrive, every
    whole one of a read at once (the last run's outcome and the next one's start come in
    one write): no task per run, one wake-up for both."""

    def __init__(self, pool: ProcessPool, proc: subprocess.Popen[bytes]) -> None:
        self.pool = pool
        self.proc = proc
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.items: dict[int, Item] = {}  # sent and not ended, in the order sent
        self.current: Item | None = None  # the one it said it started
        self.ready: asyncio.Future[FromChild] = asyncio.get_running_loop().create_future()
        self.incoming: Item | None = None  # a run taken back from a busy child for this one
        self.sent = 0
        self.runs = 0
        self.gone = False  # retired, or its connection lost

    @property
    def pid(self) -> int:
        return self.proc.pid

    def held(self) -> int:
        """The runs it holds, and the place kept for one coming to it."""
        return len(self.items) + (self.incoming is not None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, message: Any) -> None:
        data = _encode(message)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(HEADER.pack(len(data)) + data)

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= HEADER.size:
                (size,) = HEADER.unpack_from(buf, pos)
                end = pos + HEADER.size + size
                if len(buf) < end:
                    break
                message = _decode(bytes(buf[pos + HEADER.size:end]))
                pos = end
                self.pool._received(self, message)
                if self.gone:
                    return
        except msgspec.DecodeError:
            self.pool._lost(self)
            return
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("closed"))
        self.pool._lost(self)


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
        self.children: list[Child] = []  # started and serving
        self.free = asyncio.Event()  # set when a child can take another run
        self.seq = 0
        self.procs: set[subprocess.Popen[bytes]] = set()  # every child alive or starting
        self.replacing: set[asyncio.Task[None]] = set()
        self.closed = False
        self.replaced = 0  # children started in place of one that stopped
        self.moved = 0  # runs taken back from a busy child and sent to a free one
        self.waiting = 0  # runs claimed that wait for a child to take them (the worker reads less)

    def startable(self) -> int:
        """Runs the children can take now or next: DEPTH per child, less those they hold,
        and one waiting per child (its next run is at hand when it ends one), less the runs
        waiting."""
        held = sum(c.held() for c in self.children)
        return DEPTH * len(self.children) - held + self.size - self.waiting

    def _pick(self) -> Child | None:
        """The child to send a run to: the one holding the fewest (an idle one first), none
        when each holds DEPTH or has been sent its max_tasks_per_child."""
        best: Child | None = None
        limit = self.max_tasks_per_child
        for child in self.children:
            n = child.held()
            if n < DEPTH and not (limit and child.sent >= limit) and (
                    best is None or n < best.held()):
                best = child
                if n == 0:
                    break
        return best

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
                self.children.append(child)
        self.free.set()
        for child in list(self.children):
            self._steal(child)
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
        child: Child | None = None
        try:
            child = Child(self, proc)
            await asyncio.get_running_loop().create_connection(lambda: child, sock=mine)
            child.send(self.setup)
            try:
                ready = await asyncio.wait_for(child.ready, START_S)
            except (ConnectionError, TimeoutError):
                raise ConfigError(f"a process-pool child did not start ({_ended(proc)})"
                                  ) from None
            if not isinstance(ready, Ready) or ready.error:
                raise ConfigError("a process-pool child cannot load the handlers: "
                                  f"{getattr(ready, 'error', ready)}")
            return child
        except BaseException:
            self._kill(proc)
            if child is not None:
                child.gone = True
                if child.transport is not None:
                    child.transport.close()
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
        """Stop a child and start another in its place; the runs it held and had not begun
        go to another child. One that served its max_tasks_per_child runs is not killed: it
        exits at the end of file (its atexit hooks run), SIGKILLed only if it has not within
        RETIRE_S."""
        if child.gone:
            return
        child.gone = True
        with contextlib.suppress(ValueError):
            self.children.remove(child)
        for item in list(child.items.values()):
            self._unmove(item)
            if item is not child.current and not item.future.done():
                item.future.set_result(RESEND)
        child.items.clear()
        if child.incoming is not None:  # it goes to another once Dropped comes
            child.incoming.moving = None
            child.incoming = None
        if child.transport is not None:
            child.transport.close()
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
                self.children.append(child)
                self.free.set()
                self._steal(child)
            return

    async def run(self, run: Run) -> Any:
        """Run a process task's handler in a child; its return value, or what it raised
        (Retry, Cancel, LeaseLost, ChildFailed), as the thread pool would give them.

        The run goes to a child that holds fewer than DEPTH runs, so a busy child has its
        next run at hand when it ends one. The timeout counts from when the child begins it
        (its `Started`): no timer until then (a placeholder keeps Execution.start from
        arming one)."""
        loop = asyncio.get_running_loop()
        if run.timer is not None:
            run.timer.cancel()
        run.timer = loop.call_later(0, _nothing)
        run.timer.cancel()
        while True:
            child = self._pick() or await self._wait()
            self.seq += 1
            item = Item(run, self.seq, loop.create_future(), child)
            self._send(child, item)
            try:
                message = await item.future
            except asyncio.CancelledError:  # stopped: timeout, cancel, lost lease, shutdown
                child = item.child  # it may have moved
                self._unmove(item)
                if child.current is item:
                    self._retire(child)  # it runs this one: SIGKILL
                elif child.items.pop(item.seq, None) is not None:
                    child.send(Drop(item.seq))  # not begun: it never will (or is killed)
                    self.free.set()
                raise
            if message is not RESEND:
                break
        if isinstance(message, Done):
            if message.unkept:
                log.warning("task %s (slot %s) returned a value that is not kept: %s",
                            run.task, run.slot_id, message.unkept)
            return decode_payload(message.value)
        if isinstance(message, Failed):
            raise _raised(message)
        if isinstance(message, BaseException):
            raise message
        raise ChildFailed(f"the process-pool child sent {type(message).__name__}")

    def _send(self, child: Child, item: Item) -> None:
        run = item.run
        item.child = child
        child.items[item.seq] = item
        child.sent += 1
        child.send(Job(item.seq, run.task, run.slot_id, run.slot_id.rpartition(":")[0],
                       run.attempt, run.fire_ms, run.delivery,
                       msgspec.Raw(run.payload or b"null"), self.result_limit))

    def _steal(self, free: Child) -> None:
        """Take back for `free` (started, or just idle) a run another child holds behind
        one it has begun; it goes to `free` once that child says Dropped."""
        limit = self.max_tasks_per_child
        if (free.gone or free.items or free.incoming is not None
                or (limit and free.sent >= limit) or free not in self.children):
            return
        for busy in self.children:
            if busy is free or busy.current is None:
                continue
            for item in busy.items.values():
                if item is not busy.current and item.moving is None and not item.future.done():
                    item.moving, free.incoming = free, item
                    busy.send(Drop(item.seq))
                    return

    def _unmove(self, item: Item) -> None:
        """Give up moving `item`: its child began it, or it is stopped, or a child went."""
        if item.moving is not None:
            item.moving.incoming = None
            item.moving = None

    def _received(self, child: Child, message: FromChild) -> None:
        """One message from a child, as it arrives."""
        current = child.current
        if isinstance(message, Started):
            self._started(child, message)
        elif isinstance(message, Dropped):
            self._dropped(child, message)
        elif current is None:
            if isinstance(message, Ready) and not child.ready.done():
                child.ready.set_result(message)
        elif isinstance(message, Line):
            current.run.ctx.logger.log(message.level, message.text)
        elif isinstance(message, OnceAsk):
            task = asyncio.get_running_loop().create_task(
                self._answer(child, current.run, message.name))
            self.replacing.add(task)
            task.add_done_callback(self.replacing.discard)
        elif isinstance(message, Report):
            current.run.ctx.progress(message.fraction, message.message)
        else:  # its outcome
            child.current = None
            child.items.pop(current.seq, None)
            child.runs += 1
            if not current.future.done():
                current.future.set_result(message)
            if self.max_tasks_per_child and child.runs >= self.max_tasks_per_child:
                self._retire(child, kill=False)
            self.free.set()
            self._steal(child)

    def _started(self, child: Child, message: Started) -> None:
        """A child begins a run: its timer starts."""
        item = child.items.get(message.seq)
        if item is None:  # a run stopped before it began, begun before the Drop came
            self._retire(child)
            return
        child.current = item
        if item.moving is not None:  # begun before the Drop came: it stays
            free = item.moving
            self._unmove(item)
            self._steal(free)
        run = item.run
        if run.timeout_ms:
            run.timer = asyncio.get_running_loop().call_later(
                run.timeout_ms / 1000, run.stop, "timeout")

    def _dropped(self, child: Child, message: Dropped) -> None:
        """A child took back a run before it began: it goes to the free child kept for it."""
        item = child.items.pop(message.seq, None)
        if item is None:  # a stopped run's Drop: popped when it was sent
            return
        child.sent -= 1
        free = item.moving
        self._unmove(item)
        if item.future.done():
            pass
        elif free is None or free.gone or free.held() >= DEPTH:  # that child went
            item.future.set_result(RESEND)
        else:
            self._send(free, item)
            self.moved += 1
        self.free.set()

    def _lost(self, child: Child) -> None:
        """A child's socket closed under it: it died (or was killed by the OOM killer, a
        segfault). The run it began fails once its exit status is known; the others go to
        another child."""
        if child.gone:
            return
        current = child.current
        with contextlib.suppress(ValueError):
            self.children.remove(child)  # no run is sent to it any more
        if current is None or current.future.done():
            self._retire(child)
            return
        task = asyncio.get_running_loop().create_task(self._died(child, current))
        self.replacing.add(task)
        task.add_done_callback(self.replacing.discard)

    async def _died(self, child: Child, item: Item) -> None:
        try:
            with contextlib.suppress(subprocess.TimeoutExpired):  # its own exit status
                await asyncio.to_thread(child.proc.wait, 1.0)
            ended = _ended(child.proc)
        finally:
            self._retire(child)
        if not item.future.done():
            item.future.set_result(ChildFailed(
                f"the process-pool child running this handler died ({ended})"))

    async def _answer(self, child: Child, run: Run, name: str) -> None:
        child.send(await self._once(run, name))

    async def _wait(self) -> Child:
        """A child that can take a run, once there is one."""
        self.waiting += 1
        try:
            while (child := self._pick()) is None:
                self.free.clear()
                await self.free.wait()
        finally:
            self.waiting -= 1
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
        for child in self.children:
            child.gone = True
            if child.transport is not None:
                child.transport.close()
        for proc in list(self.procs):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        for proc in list(self.procs):
            proc.wait()
        self.procs.clear()


def _start(theirs: socket.socket) -> subprocess.Popen[bytes]:
    """A fresh interpreter (not a fork of the worker, its event loop and its threads), which
    inherits the worker's stdout and stderr: what a handler prints shows where it would. In
    a session of its own (autogroup: a scheduling group of its own; it ignores the terminal's
    signals anyway, and dies with the worker by PR_SET_PDEATHSIG)."""
    # The child runs this very scheduler package, wherever the worker found it.
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    return subprocess.Popen([sys.executable, "-m", "scheduler.worker.child",
                             str(theirs.fileno()), str(os.getpid())],
                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                            start_new_session=True,
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
