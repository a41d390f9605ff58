"""What the transport needs of redis-py that redis-py does not publish: an asyncio
connection's socket streams and hiredis parser, and the pipeline option names its reply
parsing consumes. Nothing else in the package imports `redis._...` (tests/test_layout.py
checks it) or touches a connection's underscored attributes.

These names move between redis-py releases, so this module says which releases it was
written for (`SUPPORTED`) and tests/redis/test_redispy_internals.py fails with a plain
message on any other. Each helper keeps redis-py's own behaviour: an error reply comes back
as its exception in its place, a broken connection raises redis-py's ConnectionError.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis
import redis.asyncio
import redis.exceptions
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
from redis.client import EMPTY_RESPONSE, NEVER_DECODE

# The redis-py releases this module was written against: [first, last) as (major, minor).
SUPPORTED = ((5, 3), (9, 0))

_NOT_OPTIONS = {"keys", EMPTY_RESPONSE, NEVER_DECODE}  # consumed by parse_response
_BASE_READ = redis.asyncio.connection.AbstractConnection.read_response
_PUSH = getattr(hiredis, "PushNotification", None)


def version() -> tuple[int, int]:
    major, minor = redis.__version__.split(".")[:2]
    return int(major), int(minor)


def supported() -> bool:
    return SUPPORTED[0] <= version() < SUPPORTED[1]


def empty_response(options: dict[str, Any], response: Any) -> Any:
    """What a pipeline returns for an error reply: the command's EMPTY_RESPONSE if it set one."""
    return options[EMPTY_RESPONSE] if EMPTY_RESPONSE in options else response


def callback_options(options: dict[str, Any]) -> dict[str, Any]:
    """A command's options as its response callback takes them."""
    return {k: v for k, v in options.items() if k not in _NOT_OPTIONS}


def host_error(conn: Any) -> str:
    """How redis-py names the server of a connection in its errors."""
    return str(conn._host_error())


async def write(conn: Any, packed: list[bytes] | bytes) -> None:
    """One write of packed commands to a connected asyncio connection, drained."""
    if isinstance(packed, bytes):
        conn._writer.write(packed)
    else:
        conn._writer.writelines(packed)
    await conn._writer.drain()


def readable_at_once(conn: Any, stack: list[Any]) -> bool:
    """Whether every reply can come from the connection's hiredis reader in one loop: the
    connection class reads as redis-py's base does (Sentinel's turns a READONLY reply, its
    primary demoted, into a disconnect: it keeps its own read), and no reply asks to stay
    undecoded from a client that decodes."""
    if type(conn).read_response is not _BASE_READ or type(conn._parser) is not \
            _AsyncHiredisParser:
        return False
    return not conn.encoder.decode_responses or not any(
        NEVER_DECODE in options for _, options in stack)


async def read_all(conn: Any, n: int) -> list[Any]:
    """n replies, as redis-py's hiredis parser would return them one coroutine call each
    (an error reply as its exception; a connection error raised), in one loop."""
    parser = conn._parser
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


async def read_each(conn: Any, stack: list[Any]) -> list[Any]:
    """The replies one read each, as a pipeline reads them."""
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


async def read_raw(conn: Any, replies: int, encoding: str | None, errors: str) -> list[Any]:
    """`replies` replies parsed by a fresh hiredis reader straight from the socket (the
    connection's own parser has nothing buffered: every round trip on it reads all it sent
    for, and any failure disconnects it)."""
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
