"""Redis connections from a URL, with errors that say what to fix."""

from __future__ import annotations

import redis
import redis.asyncio

from .errors import ConfigError


def _check(url: str) -> None:
    try:
        redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigError(f"redis url {url!r}: {exc}") from None


def sync_redis(url: str) -> redis.Redis:
    _check(url)
    return redis.Redis.from_url(url)


def async_redis(url: str) -> redis.asyncio.Redis:
    _check(url)
    return redis.asyncio.Redis.from_url(url)
