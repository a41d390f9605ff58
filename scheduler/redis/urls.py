"""Redis URLs: plain (redis://, rediss://, unix://), Sentinel (redis+sentinel://) and Cluster
(redis+cluster://, or a plain URL that names a cluster node), parsed and checked before any
client is built (clients.py), so a bad URL fails with what to fix.
"""

from __future__ import annotations

import inspect
import urllib.parse
from dataclasses import dataclass
from typing import Any

import redis
import redis.connection

import scheduler.redis.transport as transport
from scheduler.core.errors import ConfigError
from scheduler.core.masking import masked, unencoded

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
# Query options of a sentinel URL that go to the connections (TLS files and checks).
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs",
                "ssl_check_hostname")


@dataclass(frozen=True)
class SentinelUrl:
    """redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB][?options]
    (rediss+sentinel:// for TLS to the sentinels and the primary). The credentials are the
    primary's; `sentinel_username` / `sentinel_password` options are the sentinels' own."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None
    tls: bool
    tls_options: tuple[tuple[str, str], ...]
    sentinel_username: str | None
    sentinel_password: str | None


def _hosts(text: str, what: str, advice: str) -> list[tuple[str, int]]:
    """host:port[,host:port...] of a sentinel or cluster URL ([IPv6] allowed)."""
    out = []
    for item in text.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit():
            raise ConfigError(f"redis url: {what} {item!r} is not host:port ({advice}, "
                              f"separated by commas)")
        out.append((host.strip("[]"), int(port)))
    return out


def parse_sentinel(url: str) -> SentinelUrl | None:
    """The parts of a sentinel URL; None for any other URL; ConfigError for a bad one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SENTINEL_SCHEMES:
        return None
    parts = urllib.parse.urlsplit("x://" + rest)
    query = dict(urllib.parse.parse_qsl(parts.query))
    unknown = set(query) - {*_TLS_OPTIONS, "sentinel_username", "sentinel_password"}
    if unknown:
        raise ConfigError(f"redis url: unknown option(s) {', '.join(sorted(unknown))} in a "
                          f"sentinel URL")
    sentinels = _hosts(parts.netloc.rpartition("@")[2], "sentinel address",
                       "give each sentinel as host:port")
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigError("redis url: a sentinel URL names its service after the hosts, "
                          "redis+sentinel://host:port,host:port/SERVICE[/DB]")
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, password = userinfo.partition(":")
    return SentinelUrl(
        tuple(sentinels), path[0], int(path[1]) if len(path) == 2 else 0,
        urllib.parse.unquote(user) or None,
        urllib.parse.unquote(password) if userinfo and ":" in userinfo else None,
        scheme.startswith("rediss"),
        tuple((k, v) for k, v in query.items() if k in _TLS_OPTIONS),
        query.get("sentinel_username"), query.get("sentinel_password"))


CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


@dataclass(frozen=True)
class ClusterUrl:
    """redis+cluster://[user:password@]host:port[,host:port...][/0][?options] (rediss+cluster://
    for TLS): any nodes of a Redis Cluster, which tell the client of the others. A plain
    redis:// URL that names a cluster node becomes one of these (`find_cluster`)."""

    nodes: tuple[tuple[str, int], ...]
    options: tuple[tuple[str, Any], ...]  # username, password, TLS: what every node gets


def parse_cluster(url: str) -> ClusterUrl | None:
    """The parts of a cluster URL; None for any other URL; ConfigError for a bad one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in CLUSTER_SCHEMES:
        return None
    parts = urllib.parse.urlsplit("x://" + rest)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    nodes = _hosts(hosts, "cluster node", "give any nodes as host:port")
    host = f"[{nodes[0][0]}]" if ":" in nodes[0][0] else nodes[0][0]
    plain = urllib.parse.urlunsplit((scheme.partition("+")[0], f"{userinfo}{at}{host}:"
                                     f"{nodes[0][1]}", parts.path, parts.query, ""))
    return ClusterUrl(tuple(nodes), _cluster_options(plain))


def _cluster_options(url: str) -> tuple[tuple[str, Any], ...]:
    try:
        kw = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigError(masked(f"redis url {url!r}: {exc}", url)) from None
    if kw.pop("db", 0):
        raise ConfigError("redis url: a Redis Cluster has only database 0; drop the /DB "
                          "from the URL")
    if kw.pop("path", None):
        raise ConfigError("redis url: a Redis Cluster is reached over TCP, not a socket")
    kw.pop("host", None), kw.pop("port", None)
    if kw.pop("connection_class", None) is redis.connection.SSLConnection:
        kw["ssl"] = True
    return tuple(kw.items())


def find_cluster(url: str, timeout_s: float) -> ClusterUrl | None:
    """The cluster a redis:// or rediss:// URL names a node of, or None for a single Redis
    (or one that does not answer now: a process started before its Redis gets a single-Redis
    client, so name a cluster with redis+cluster:// where that can happen)."""
    explicit = parse_cluster(url)
    if explicit is not None or not url.startswith(("redis://", "rediss://")):
        return explicit
    probe = redis.Redis.from_url(url, socket_timeout=min(timeout_s, 2.0),
                                 socket_connect_timeout=min(timeout_s, 2.0))
    try:
        enabled = transport.call_sync(probe, "info", "cluster").get("cluster_enabled")
    except redis.exceptions.RedisError:
        return None
    finally:
        probe.close()
    if not enabled:
        return None
    kw = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    return ClusterUrl(((kw["host"], int(kw.get("port", 6379))),), _cluster_options(url))

def check(url: str) -> None:
    """ConfigError, one line with the password masked, for a URL no client could be built
    from: urllib's and redis-py's ValueErrors (an address in brackets that is no IPv6
    address, a port that is no number) and a query option no connection takes, which
    redis-py would pass on to fail as a TypeError at the first command."""
    problem = unencoded(url)
    if problem:
        raise ConfigError(f"redis url {masked(url, url)!r}: {problem}")
    try:
        _check(url)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(masked(f"redis url {url!r}: {exc}", url)) from None


def _check(url: str) -> None:
    if parse_sentinel(url) is not None or parse_cluster(url) is not None:
        return
    scheme, _, rest = url.partition("://")
    if scheme in ("redis", "rediss"):
        db = urllib.parse.urlsplit("x://" + rest).path.strip("/")
        if db and not db.isdigit():  # redis-py would quietly use database 0
            raise ConfigError(f"redis url {masked(url)!r}: database {db[:20]!r} is not a "
                              f"number; use redis://host:port/0 (a database index)")
    kw = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    unknown = sorted(set(kw) - _taken(kw.get("connection_class", redis.connection.Connection)))
    if unknown:
        raise ConfigError(f"redis url {masked(url, url)!r}: unknown option(s) "
                          f"{', '.join(unknown)[:200]}; the query string takes a "
                          f"connection's options, e.g. ?socket_timeout=5")


def _taken(connection_class: type) -> set[str]:
    """What a connection of this class (and its pool) takes as keyword arguments."""
    names = {"connection_class", "max_connections", "timeout"}
    for cls in connection_class.__mro__:
        init = vars(cls).get("__init__")
        if init is not None:
            names |= set(inspect.signature(init).parameters) - {"self", "args", "kwargs"}
    return names

