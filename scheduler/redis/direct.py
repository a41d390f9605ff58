"""The worker's round trips on connections of its own: what a redis-py pipeline collected,
sent and read without the pool's bookkeeping around each round trip.

Why: redis-py's asyncio `Pipeline.execute()` costs ~220 us of client CPU per round trip on
the two-core box of bench/RESULTS.md, against ~80 us for the write and the reads themselves:
the pool's lock, its connection-count recording and its `can_read` check on every get and
release, the retry wrapper, the fieldset preflight. A worker at its default concurrency (100)
makes ~0.06 round trips per job (a claim per 50 entries, a commit per ~25 outcomes), so that
was close to half of its CPU per job.

How: the commands are still built by a redis-py Pipeline (`fill` and `tail` in scripts.py),
and each reply is parsed by the client's own response callback, so what comes back is what
`execute(raise_on_error=False)` returns: the replies in order, an error reply as its
exception. Only the I/O differs: one write of every command, then one read per reply, on a
connection kept here for the client (`enable`), outside its pool.

Why no check is needed: a connection carries one round trip at a time (it is taken from the
free list and put back only after its last reply was read), and any exception on it (a
broken or stalled connection, a timeout, a cancellation) disconnects it, so no reply is ever
left unread on a connection that is used again. A broken round trip is retried as the
client's own retry policy says, exactly as its pipeline would be (a worker's client retries
none: a call that may have run is not sent again behind the caller's back, connection.py).
More than MAX_LINKS round trips at once take the pipeline path, so the connections kept here
stay few.

`raw` is the same round trip for commands packed by the caller, its replies parsed by hiredis
straight from the socket: for a MULTI of thousands of commands (hash_read.py), whose QUEUED
replies redis-py would read one coroutine call each (~15 us of client CPU per command). Its
connections are apart and speak RESP2, whatever the client's protocol: hiredis builds a RESP3
map (an HGETALL's reply) ~4x slower than the flat array RESP2 sends (6.3 against 1.5 us per
13-field hash, measured).
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from typing import Any

import hiredis
import redis.asyncio
import redis.exceptions
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
from redis.client import EMPTY_RESPONSE, NEVER_DECODE

import scheduler.redis.cluster as cluster

MAX_LINKS = 8  # connections kept per client: the claim pipelines, the committer, a heartbeat
_NOT_OPTIONS = {"keys", EMPTY_RESPONSE, NEVER_DECODE}  # consumed by parse_response
_BASE_READ = redis.asyncio.connection.AbstractConnection.read_response
_HIREDIS = _AsyncHiredisParser
_PUSH = getattr(hiredis, "PushNotification", None)


class _Links:
    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.free: list[Any] = []
        self.raw_free: list[Any] = []  # raw()'s, RESP2
        self.busy = 0
        self.users = 0  # enable() calls not yet closed: workers sharing one client
        self.closed = False

    async def put_back(self, conn: Any, raw: bool = False) -> None:
        self.busy -= 1
        if self.closed:
            await conn.disconnect()
        else:
            (self.raw_free if raw else self.free).append(conn)

    def make_raw(self) -> Any:
        kwargs = {**self.pool.connection_kwargs, "protocol": 2}
        return self.pool.connection_class(**kwargs)


_LINKS: weakref.WeakKeyDictionary[Any, _Links] = weakref.WeakKeyDictionary()


def enable(client: Any) -> None:
    """Make `client`'s script round trips (scripts.run_async...) go through here. A Redis
    Cluster client, or anything but a plain redis-py asyncio client, keeps its pipelines."""
    if type(client) is not redis.asyncio.Redis:
        return
    links = _LINKS.get(client.connection_pool)
    if links is None:
        links = _LINKS[client.connection_pool] = _Links(client.connection_pool)
    links.users += 1


async def close(client: Any) -> None:
    """Undo one enable(); the last one closes the connections kept for `client` (one still
    in use closes when its round trip ends)."""
    links = _LINKS.get(client.connection_pool) if type(client) is redis.asyncio.Redis else None
    if links is None:
        return
    links.users -= 1
    if links.users > 0:
        return
    del _LINKS[client.connection_pool]
    links.closed = True
    free, links.free, links.raw_free = links.free + links.raw_free, [], []
    for conn in free:
        await conn.disconnect()


def enabled(client: Any) -> bool:
    return type(client) is redis.asyncio.Redis and client.connection_pool in _LINKS


class Stack:
    """The commands of one round trip, collected as a redis-py pipeline collects them
    (`execute_command`, `evalsha`: what scripts.py's fill and tails call) without building
    one. With the replies read in one loop (_read_all), a round trip of two script calls and
    a read cost ~7 us (~10%) less client CPU (bench/RESULTS.md, session 17)."""

    __slots__ = ("command_stack",)

    def __init__(self) -> None:
        self.command_stack: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def execute_command(self, *args: Any, **options: Any) -> None:
        self.command_stack.append((args, options))

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> None:
        self.command_stack.append((("EVALSHA", sha, numkeys, *keys_and_args), {}))

    def __len__(self) -> int:
        return len(self.command_stack)


def stack(client: Any) -> Any:
    """Where a round trip's commands go: a Stack for a client direct() serves, else the
    client's own non-transactional pipeline (cluster.pipeline). execute() runs either."""
    return Stack() if enabled(client) else cluster.pipeline(client)


async def execute(client: Any, pipe: Any) -> list[Any]:
    """`pipe.execute(raise_on_error=False)`, on a connection of our own when enabled."""
    links = _LINKS.get(getattr(client, "connection_pool", None)) \
        if type(client) is redis.asyncio.Redis else None
    stack = getattr(pipe, "command_stack", None)
    if links is None or not stack or (not links.free and links.busy >= MAX_LINKS):
        if isinstance(pipe, Stack):  # more round trips at once than MAX_LINKS
            pipe = client.pipeline(transaction=False)
            for args, options in stack or ():
                pipe.execute_command(*args, **options)
        return list(await pipe.execute(raise_on_error=False))
    conn = links.free.pop() if links.free else links.pool.make_connection()
    links.busy += 1
    try:
        # The client's retry policy, as its pipelines apply it: the whole round trip again
        # on a fresh connection (a worker's client retries nothing: connection.py).
        out: list[Any] = await conn.retry.call_with_retry(
            lambda: _round_trip(client, conn, stack), lambda error: conn.disconnect())
    except BaseException:
        await conn.disconnect()  # replies may still be on their way: out of step
        await links.put_back(conn)
        raise
    await links.put_back(conn)
    return out


async def _round_trip(client: Any, conn: Any, stack: list[Any]) -> list[Any]:
    """One write, then the replies, under one socket timeout for the whole exchange.

    redis-py's send and reads each open a timeout of their own (a wait_for, then one per
    reply: a timer armed and cancelled each time). One deadline for the exchange cut a round
    trip of three replies from ~200 to ~150 us of client CPU, and a worker at its default
    concurrency by ~2 us per job (bench/RESULTS.md, issue 18 session 15). The errors are
    the ones redis-py's send and read raise, so its retry policy tells them apart, and the
    connection is closed after any of them."""
    if not conn.is_connected:
        await conn.connect()
    packed = conn.pack_commands([args for args, _ in stack])
    try:
        if conn.socket_timeout:
            async with asyncio.timeout(conn.socket_timeout):
                return await _exchange(client, conn, packed, stack)
        return await _exchange(client, conn, packed, stack)
    except TimeoutError:  # asyncio's: redis-py's own TimeoutError is no subclass of it
        await conn.disconnect(nowait=True)
        raise redis.exceptions.TimeoutError(
            f"Timeout in a round trip with {conn._host_error()}") from None
    except OSError as exc:
        await conn.disconnect(nowait=True)
        raise redis.exceptions.ConnectionError(
            f"Error in a round trip with {conn._host_error()}: {exc}") from exc


async def _exchange(client: Any, conn: Any, packed: list[bytes], stack: list[Any]
                    ) -> list[Any]:
    conn._writer.writelines(packed)
    await conn._writer.drain()
    callbacks = client.response_callbacks
    found: dict[Any, Any] = {}  # command name -> its callback: a pipeline repeats a few
    if _readable_at_once(conn, stack):
        replies = await _read_all(conn._parser, len(stack))
    else:
        replies = await _read_each(conn, stack)
    out: list[Any] = []
    for (args, options), response in zip(stack, replies, strict=True):
        if isinstance(response, redis.exceptions.ResponseError):  # read, the next follows
            out.append(options[EMPTY_RESPONSE] if EMPTY_RESPONSE in options else response)
            continue
        command = args[0]
        callback = found[command] if command in found else found.setdefault(
            command, callbacks.get(command))
        if callback is None:
            out.append(response)
            continue
        value = callback(response,
                         **{k: v for k, v in options.items() if k not in _NOT_OPTIONS})
        out.append(await value if inspect.isawaitable(value) else value)
    return out


def _readable_at_once(conn: Any, stack: list[Any]) -> bool:
    """Whether every reply can come from the connection's hiredis reader in one loop: the
    connection class reads as redis-py's base does (Sentinel's turns a READONLY reply, its
    primary demoted, into a disconnect: it keeps its own read), and no reply asks to stay
    undecoded from a client that decodes."""
    if type(conn).read_response is not _BASE_READ or type(conn._parser) is not _HIREDIS:
        return False
    return not conn.encoder.decode_responses or not any(
        NEVER_DECODE in options for _, options in stack)


async def _read_all(parser: Any, n: int) -> list[Any]:
    """n replies, as redis-py's hiredis parser would return them one coroutine call each
    (an error reply as its exception; a connection error raised), in one loop."""
    reader = parser._reader
    out: list[Any] = []
    while len(out) < n:
        response = reader.gets()
        if response is NOT_ENOUGH_DATA:
            await parser.read_from_socket()
            continue
        if isinstance(response, redis.exceptions.ConnectionError):
            raise response
        if type(response) is list and response and isinstance(
                response[0], redis.exceptions.ConnectionError):
            raise response[0]
        if _PUSH is not None and isinstance(response, _PUSH):
            continue  # RESP3 out-of-band (no subscription here asks for any)
        out.append(response)
    return out


async def _read_each(conn: Any, stack: list[Any]) -> list[Any]:
    # A connection class with a read of its own keeps it: Sentinel's turns a READONLY
    # reply (its primary was demoted) into a disconnect, so the next connect asks anew.
    own = type(conn).read_response is not _BASE_READ
    read = conn.read_response if own else conn._read_response_from_parser
    out: list[Any] = []
    for _, options in stack:
        try:
            out.append(await read(disable_decoding=NEVER_DECODE in options))
        except redis.exceptions.ResponseError as exc:  # own's error reply, read: go on
            out.append(exc)
    return out


async def raw(client: Any, data: bytes, replies: int, encoding: str | None = None,
              errors: str = "strict") -> list[Any]:
    """Send `data` (commands in RESP, packed by the caller) on a connection of `client`'s own
    (enable() first: `enabled`) and return its first `replies` replies as hiredis parses
    them (RESP2: a hash as its flat field/value array), strings decoded with `encoding` when
    given (in C, cheaper than any decoding after; `errors` as bytes.decode takes it), an
    error reply as a redis ResponseError in its place. Never retried: the caller's commands
    may have run."""
    links = _LINKS[client.connection_pool]
    conn = links.raw_free.pop() if links.raw_free else links.make_raw()
    links.busy += 1
    try:
        if not conn.is_connected:
            await conn.connect()
        async with asyncio.timeout(conn.socket_timeout):
            out = await _raw_trip(conn, data, replies, encoding, errors)
    except BaseException:
        await conn.disconnect()
        await links.put_back(conn, raw=True)
        raise
    await links.put_back(conn, raw=True)
    return out


async def _raw_trip(conn: Any, data: bytes, replies: int, encoding: str | None,
                    errors: str) -> list[Any]:
    # The connection's own parser has nothing buffered: every round trip on it reads all it
    # sent for, and any failure disconnects it.
    conn._writer.write(data)
    await conn._writer.drain()
    reader = hiredis.Reader(encoding=encoding, errors=errors) if encoding else hiredis.Reader()
    out: list[Any] = []
    while len(out) < replies:
        reply = reader.gets()
        if reply is False:
            chunk = await conn._reader.read(1 << 20)
            if not chunk:
                raise redis.exceptions.ConnectionError("Redis closed the connection")
            reader.feed(chunk)
            continue
        out.append(_error(reply))
    if reader.has_data():
        raise redis.exceptions.ConnectionError("more replies than commands")
    return out


def _error(reply: Any) -> Any:
    if isinstance(reply, hiredis.ReplyError):
        return redis.exceptions.ResponseError(str(reply))
    if isinstance(reply, list):
        return [_error(r) if isinstance(r, hiredis.ReplyError) else r for r in reply]
    return reply
