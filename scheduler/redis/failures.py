"""Redis failures: which exceptions mean "Redis did not serve this call", the Redis error code
of a reply, and the library's exception (RedisRefused, RedisUnavailable) for each, with what
the user can do about it.
"""

from __future__ import annotations

import redis
import redis.exceptions

from scheduler.core.errors import RedisFailure, RedisRefused, RedisUnavailable

# What redis-py raises: its RedisError, and on a cluster RedisClusterException, which is not one
# (no node reachable, a slot no node serves); both mean "Redis did not serve this call".
REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
RedisErrors = redis.exceptions.RedisError | redis.exceptions.RedisClusterException


# ResponseError prefixes (or texts) -> what the user can do about them.
_ADVICE = (
    ("OOM", "Redis is out of memory (used memory is over maxmemory and its policy evicts "
            "nothing): free memory or raise maxmemory"),
    ("READONLY", "this Redis is a read-only replica: point the URL at the primary"),
    ("MASTERDOWN", "this replica has lost its primary and refuses to serve stale data"),
    ("BUSY", "Redis is busy running a script; try again in a moment"),
    ("NOPERM", "the Redis user lacks a permission this library needs (see its ACL rules)"),
    ("WRONGPASS", "wrong Redis user name or password"),
    ("NOAUTH", "Redis needs a password: put it in the URL, redis://:PASSWORD@host:port/db"),
    ("MISCONF", "Redis cannot persist to disk and refuses writes (see its log)"),
    ("DB index is out of range", "this Redis has no such database: use an index below its "
                                 "`databases` setting (16 unless configured)"),
)


# redis-py strips the code of the errors it has a class for ("OOM command not allowed" reads
# "command not allowed"); the class says it again.
_CODES = {name: code for code, name in (
    ("OOM", "OutOfMemoryError"), ("READONLY", "ReadOnlyError"), ("LOADING", "BusyLoadingError"),
    ("NOSCRIPT", "NoScriptError"), ("NOPERM", "NoPermissionError"),
    ("TRYAGAIN", "TryAgainError"), ("CLUSTERDOWN", "ClusterDownError"),
    ("MASTERDOWN", "MasterDownError"), ("WRONGPASS", "AuthenticationError"))}


def error_code(exc: BaseException) -> str:
    """The Redis error code of a reply error ("OOM", "READONLY", "ERR", ...), "" for others."""
    code = getattr(exc, "status_code", None)
    if isinstance(code, str) and code:
        return code
    for cls in type(exc).__mro__:
        if cls.__name__ in _CODES:
            return _CODES[cls.__name__]
    if isinstance(exc, redis.exceptions.ResponseError):
        word = str(exc).lstrip("-").split(" ", 1)[0]
        return word if word.isupper() else ""
    return ""


def translate(exc: RedisErrors, at: str) -> RedisFailure:
    """The library's exception for a redis-py one (raise it `from exc`)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, redis.exceptions.RedisClusterException):
        return RedisUnavailable(f"Redis at {at} cannot serve the call now ({text[:200]}): "
                                f"is every master of the cluster up?", at)
    code = error_code(exc)
    if isinstance(exc, redis.exceptions.AuthenticationError | redis.exceptions.ResponseError):
        for prefix, advice in _ADVICE:
            if code == prefix or text.startswith(prefix) or prefix in text[:60]:
                return RedisRefused(f"Redis at {at}: {advice} ({text[:200]})", at)
    if isinstance(exc, redis.exceptions.BusyLoadingError):
        return RedisUnavailable(f"Redis at {at} is loading its data set; try again in a "
                                f"moment", at)
    if isinstance(exc, redis.exceptions.TimeoutError):
        return RedisUnavailable(f"Redis at {at} did not answer in time ({text[:200]}): is it "
                                f"overloaded, or is the network cut?", at)
    if isinstance(exc, redis.exceptions.InvalidResponse) or "Protocol error" in text:
        return RedisUnavailable(f"the server at {at} does not speak the Redis protocol "
                                f"({text[:200]}): check the URL's host and port", at)
    if isinstance(exc, redis.exceptions.ConnectionError):
        return RedisUnavailable(f"cannot reach Redis at {at} ({text[:200]})", at)
    return RedisRefused(f"Redis at {at} refused a call: {text[:300]}", at)
