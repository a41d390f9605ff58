"""Commands packed by hiredis on the asyncio connections of ours.

redis-py's synchronous connections pack a command with hiredis when it is installed; its
asyncio connections (8.x) always pack in Python, joining bytes argument by argument, several
times slower per argument (`bench snapshot`). The snapshotter's acks and retention entries
and the worker's pipelined reads are such commands (a claim is not: its entries travel as one
msgpack argument). The bytes are the same (checked for str, bytes, int, float, bytearray,
memoryview and a first argument holding a space), and a value hiredis cannot pack raises
redis-py's DataError as before.

`adopt(pool)` gives a pool's connections (and the transport's own, made from the same class)
this packing; a pool whose connections encode other than UTF-8 keeps redis-py's. Without
hiredis nothing changes.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions

try:
    import hiredis
except ImportError:  # pragma: no cover - redis[hiredis] is a dependency
    hiredis = None  # type: ignore[assignment]

_FAST: dict[type, type] = {}


class _HiredisPacked:
    """Mixed in before a redis-py asyncio connection class."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if self.encoder.encoding != "utf-8" or self.encoder.encoding_errors != "strict":  # type: ignore[attr-defined]
            return super().pack_command(*args)  # type: ignore[misc, no-any-return]
        first = args[0]
        if isinstance(first, str):
            args = (*first.encode().split(), *args[1:])
        elif b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            try:
                args = tuple(bytes(a) if isinstance(a, bytearray | memoryview) else a
                             for a in args)
                return [hiredis.pack_command(args)]
            except TypeError as exc:
                raise redis.exceptions.DataError(str(exc)) from None


def fast(cls: type) -> type:
    """`cls` (a redis-py asyncio connection class) packing with hiredis."""
    if hiredis is None or issubclass(cls, _HiredisPacked):
        return cls
    made = _FAST.get(cls)
    if made is None:
        made = _FAST[cls] = type(cls.__name__, (_HiredisPacked, cls), {
            "__module__": __name__, "__doc__": cls.__doc__})
    return made


def adopt(pool: Any) -> None:
    """Before the pool makes its first connection."""
    pool.connection_class = fast(pool.connection_class)
