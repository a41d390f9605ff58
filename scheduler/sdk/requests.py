"""What an SDK operation is and how a client runs one, without I/O.

An operation is a generator: it yields a request (`Pipe`, `Scripts`, `ScriptStream`, `Io`,
`StoreCall`) and is sent the reply, or thrown the redis-py error the request raised. So one
function serves both the blocking and the asyncio client (scheduler/sdk/client.py), each of
which only performs the requests (`advance` steps an operation, `translated` turns the
redis-py errors that leave it into the library's own).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import msgspec

import scheduler.scripts.calls as scripts
from scheduler.redis.failures import REDIS_ERRORS, translate

R = TypeVar("R")


class Pipe:
    """A request: commands for one pipelined round trip, recorded as a redis-py pipeline
    would take them (`pipe.hgetall(key)`); the reply is the list of their replies."""

    def __init__(self, raise_on_error: bool = True) -> None:
        self.commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.raise_on_error = raise_on_error

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            self.commands.append((name, args, kwargs))
        return record


class Scripts(msgspec.Struct, frozen=True):
    """A request: Lua calls in one round trip (scripts.run_*); the reply is their replies.
    With `wait` = (replicas, timeout_ms) the round trip ends with WAIT, and the reply is
    (their replies, the fewest replicas that confirmed a round trip's writes)."""

    calls: list[scripts.Call]
    raise_errors: bool = True
    wait: tuple[int, int] | None = None


class ScriptStream(msgspec.Struct, frozen=True):
    """A request: Lua calls in one pipelined round trip, each written to Redis as soon as
    the iterator makes it, so the client makes call k+1 while Redis runs call k
    (submit_many's batches). The reply is (their replies, each one's
    reply or exception; the fewest replicas that confirmed, -1 without `wait`), as for
    Scripts with `wait`."""

    calls: Iterator[scripts.Call]
    wait: tuple[Any, ...] | None = None


class Io(msgspec.Struct, frozen=True):
    """A request served by a reader that has a blocking and an asyncio form, both called
    with the driver's connection first (the status readers of scheduler/observe/status.py)."""

    blocking: Callable[..., Any]
    asyncio: Callable[..., Any]
    args: tuple[Any, ...]


class StoreCall(msgspec.Struct, frozen=True):
    """A request to the history store: `method(*args, **kwargs)` on it (from a thread, for
    the asyncio client: the stores are blocking)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}


Request = Pipe | Scripts | ScriptStream | Io | StoreCall
Op = Generator[Request, Any, R]


class Done(msgspec.Struct, frozen=True):
    """An operation's result."""

    value: Any


def advance(op: Op[Any], reply: Any = None, error: Exception | None = None) -> Request | Done:
    """One step of a driver: send the operation the reply to its last request, or throw it
    the error that request raised (the operation may handle it); its next request, or Done.
    An error the operation lets out leaves from here."""
    try:
        return op.send(reply) if error is None else op.throw(error)
    except StopIteration as stop:
        return Done(stop.value)


@contextmanager
def translated(at: str) -> Iterator[None]:
    """A redis-py error that leaves an operation leaves the SDK as the library's own
    (RedisFailure), naming where Redis is and what to do."""
    try:
        yield
    except REDIS_ERRORS as exc:
        raise translate(exc, at) from exc


