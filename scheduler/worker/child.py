"""A process-pool child: a fresh interpreter that runs `pool="process"` handlers, one run at a
time, for the worker that started it (scheduler/worker/pool.py), and the messages the two
exchange.

The worker starts it as `python -m scheduler.worker.child FD PARENT_PID` with one end of a
socket pair. Everything crosses that socket as length-prefixed msgspec JSON: the handlers'
names (the child imports each by module and qualified name; no code, closure or pickle
crosses), each run's context and its payload (the JSON bytes the slot holds) in, its log
lines, its `ctx.once` questions and its outcome (the return value as JSON, or the error
line) out. The child holds no lease and talks to no Redis: the worker keeps the run.

The worker sends a child its next run while it runs one (pipelined: the child starts the
next without waiting for the worker to be scheduled), so the child keeps the runs it was
sent in order and says `Started` as it begins each; a `Drop` takes back one not begun (its
run was stopped meanwhile, or another child is free for it), answered `Dropped` when it was
not begun. A thread of its own reads what the worker sends, so a Drop is answered while a
run goes. The outcome of one run and the start of the next go out in one write.

It dies with its worker (PR_SET_PDEATHSIG on Linux, and the socket's end of file when it
waits), ignores SIGINT and SIGTERM (a terminal's Ctrl-C reaches the whole process group: the
worker decides when its runs stop), and is stopped by SIGKILL when its run must stop.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import signal
import socket
import struct
import sys
import threading
import traceback
from typing import Any

import msgspec

from scheduler.core.errors import Cancel, LeaseLost, Retry, ValidationError
from scheduler.core.models import check_progress, encode_payload
from scheduler.worker.execution import _one_line, clean
from scheduler.worker.handles import TaskHandle
from scheduler.worker.registry import Handler, RunLogger, SyncContext

HEADER = struct.Struct(">I")
MAIN = "__mp_main__"  # the worker's __main__ module, loaded again under this name


class Setup(msgspec.Struct, tag=True):
    path: list[str]
    tasks: dict[str, tuple[str, str]]  # task -> (module, qualname)
    main: str | None = None  # the file of the worker's __main__, for handlers defined there
    log_level: int = logging.INFO


class Job(msgspec.Struct, tag=True):
    seq: int  # the worker's number for this run on this child
    task: str
    slot_id: str
    job_id: str
    attempt: int
    fire_ms: int
    delivery: str
    payload: msgspec.Raw
    result_limit: int


class Drop(msgspec.Struct, tag=True):
    """Do not begin run `seq` (stopped before this child took it, or moved to another)."""

    seq: int


class Dropped(msgspec.Struct, tag=True):
    """Run `seq` was taken back before it began: it never will here."""

    seq: int


class OnceReply(msgspec.Struct, tag=True):
    ok: bool = False
    stale: bool = False
    error: str = ""


class Ready(msgspec.Struct, tag=True):
    pid: int
    error: str = ""


class Started(msgspec.Struct, tag=True):
    """The child begins run `seq`: what it says next is that run's, until its outcome."""

    seq: int


class Line(msgspec.Struct, tag=True):
    level: int
    text: str


class OnceAsk(msgspec.Struct, tag=True):
    name: str


class Report(msgspec.Struct, tag=True):
    """ctx.progress in a child, checked there: the worker records it on the run."""

    fraction: float
    message: str | None = None


class Done(msgspec.Struct, tag=True):
    value: msgspec.Raw  # the return value's JSON (null for None)
    unkept: str = ""  # why the return value is not kept (not JSON, too large)


class Failed(msgspec.Struct, tag=True):
    kind: str  # error, retry, cancel, lost
    text: str
    after: float | None = None  # Retry(after=...)
    trace: str = ""  # the traceback, for the worker's log


ToChild = Setup | Job | Drop | OnceReply
FromChild = Ready | Started | Dropped | Line | OnceAsk | Report | Done | Failed
_encode = msgspec.json.Encoder().encode


def frame(message: Any) -> bytes:
    data = _encode(message)
    return HEADER.pack(len(data)) + data


class Parent:
    """The child's end of the socket: one message out at a time (a handler's threads may
    log at once), the runs sent and not begun (`jobs`, in order), and a `ctx.once` question
    that waits for its answer. A thread of its own reads the socket (`read`), so a Drop is
    answered while a run goes; `cond` guards what it takes in."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()  # writes
        self.cond = threading.Condition()  # jobs, setup, reply, eof
        self.asking = threading.Lock()  # one ctx.once question at a time
        self.decoder = msgspec.json.Decoder(ToChild)
        self.jobs: list[Job] = []
        self.setup: Setup | None = None
        self.reply: OnceReply | None = None
        self.eof = False

    def read(self) -> None:
        """Take in what the worker sends, until end of file (or what is not the worker's)."""
        buf = bytearray()
        try:
            while data := self.sock.recv(1 << 16):
                buf += data
                pos = 0
                while len(buf) - pos >= HEADER.size:
                    (size,) = HEADER.unpack_from(buf, pos)
                    end = pos + HEADER.size + size
                    if len(buf) < end:
                        break
                    self._take(self.decoder.decode(bytes(buf[pos + HEADER.size:end])))
                    pos = end
                del buf[:pos]
        except (OSError, msgspec.DecodeError):
            pass
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def _take(self, message: Any) -> None:
        with self.cond:
            if isinstance(message, Job):
                self.jobs.append(message)
            elif isinstance(message, Drop):
                kept = [j for j in self.jobs if j.seq != message.seq]
                if len(kept) < len(self.jobs):
                    self.jobs = kept
                    # Said under `cond`: `next` cannot begin it meanwhile, so the worker
                    # hears either this or the run's Started, never both.
                    self.send(Dropped(message.seq))
            elif isinstance(message, OnceReply):
                self.reply = message
            else:
                self.setup = message
            self.cond.notify_all()

    def next(self, outcome: bytes) -> Job | None:
        """The next run, its Started sent (with the last run's `outcome` in one write when
        one waits); None at end of file."""
        with self.cond:
            if not self.jobs and outcome:
                self.write(outcome)
                outcome = b""
            while not self.jobs and not self.eof:
                self.cond.wait()
            if not self.jobs:
                return None
            job = self.jobs.pop(0)
            self.write(outcome + frame(Started(job.seq)))
            return job

    def write(self, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(data)

    def send(self, message: Any) -> None:
        self.write(frame(message))

    def once(self, name: str) -> bool:
        with self.asking:
            with self.cond:
                self.reply = None
            self.send(OnceAsk(name))
            with self.cond:
                while self.reply is None and not self.eof:
                    self.cond.wait()
                reply = self.reply
        if not isinstance(reply, OnceReply):
            raise RuntimeError("ctx.once: the worker did not answer")
        if reply.stale:
            raise LeaseLost(reply.error or "this attempt lost its lease")
        if reply.error:
            raise RuntimeError(f"ctx.once: {reply.error}")
        return reply.ok


class ShippedLogger(RunLogger):
    """ctx.logger in a child: each line goes to the worker, which logs and keeps it as it
    does any handler's (stamped by the worker's clock)."""

    def __init__(self, parent: Parent, level: int, extra: dict[str, Any]) -> None:
        super().__init__(logging.getLogger("scheduler.task"), extra)
        self.parent = parent
        self.level = level

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level < self.level:
            return
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            text = f"{msg} {args}"
        if kwargs.get("exc_info"):
            text = f"{text}\n{traceback.format_exc()}"
        self.parent.send(Line(level, text))


class ChildContext(SyncContext):
    __slots__ = ("_parent", "_level")

    def __init__(self, job: Job, parent: Parent, level: int) -> None:
        super().__init__(job.slot_id, job.job_id, job.attempt, job.fire_ms, job.task,
                         job.delivery, parent.once)  # type: ignore[arg-type]
        self._parent = parent
        self._level = level

    def progress(self, fraction: float, message: str | None = None) -> None:
        # Checked here, so a bad value raises in the handler, as it does in the worker.
        self._parent.send(Report(*check_progress(fraction, message)))

    @property
    def logger(self) -> RunLogger:
        if self._logger is None:
            self._logger = ShippedLogger(
                self._parent, self._level,
                {"slot_id": self.slot_id, "task": self.task, "attempt": self.attempt})
        return self._logger


def resolve(setup: Setup) -> dict[str, Handler]:
    """Each task's handler, imported by name as the worker's registry holds it."""
    sys.path[:] = setup.path
    if setup.main is not None and any(m == "__main__" for m, _ in setup.tasks.values()):
        spec = importlib.util.spec_from_file_location(MAIN, setup.main)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {setup.main}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[MAIN] = module
        spec.loader.exec_module(module)
    handlers: dict[str, Handler] = {}
    for task, (module_name, qualname) in setup.tasks.items():
        if module_name == "__main__":
            if setup.main is None:
                raise ImportError(f"task {task!r}: its handler {qualname} is defined in a "
                                  f"__main__ that has no file; define it in a module")
            module_name = MAIN
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise ImportError(f"task {task!r}: {module_name} has no {qualname}")
        handlers[task] = obj
    return handlers


def run(handler: Handler, job: Job, parent: Parent, level: int) -> Done | Failed:
    ctx = ChildContext(job, parent, level)
    try:
        # A handle (what @registry.task returns) decodes a typed payload into its type.
        payload = (handler.decode(job.payload) if isinstance(handler, TaskHandle)
                   else msgspec.json.decode(job.payload))
        value = handler(ctx, payload)
    except Retry as exc:
        return Failed("retry", clean(exc.reason), exc.after)
    except Cancel as exc:
        return Failed("cancel", clean(exc.reason))
    except LeaseLost as exc:
        return Failed("lost", str(exc))
    except BaseException as exc:  # SystemExit too: it ends the attempt, not the child
        return Failed("error", _one_line(exc), None,
                      "".join(traceback.format_exception(exc)))
    try:
        return Done(msgspec.Raw(encode_payload(value, job.result_limit)))
    except ValidationError as exc:
        return Done(msgspec.Raw(b"null"), str(exc).replace("payload", "result", 1))


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this child when the worker dies, even SIGKILLed itself (Linux; elsewhere the
    socket's end of file, seen between runs)."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # it died before the line above took effect
        os._exit(1)


def main(argv: list[str]) -> None:
    fd, parent_pid = int(argv[0]), int(argv[1])
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = Parent(socket.socket(fileno=fd))
    threading.Thread(target=parent.read, name="reader", daemon=True).start()
    with parent.cond:
        while parent.setup is None and not parent.eof:
            parent.cond.wait()
    setup = parent.setup
    if setup is None:
        return
    try:
        handlers = resolve(setup)
    except BaseException as exc:
        parent.send(Ready(os.getpid(), f"{type(exc).__name__}: {exc}"))
        return
    parent.send(Ready(os.getpid()))
    outcome = b""  # the last run's, sent with the next one's start
    while (job := parent.next(outcome)) is not None:
        outcome = frame(run(handlers[job.task], job, parent, setup.log_level))


if __name__ == "__main__":
    main(sys.argv[1:])
