"""Redis connections from a URL, with explicit timeouts, and Redis errors that say what to fix.

Nothing here relies on redis-py's defaults, which change between versions (5 s socket
timeouts and 10 retries in 8.x, no timeout at all in 7.x): a call that hangs on a stalled
connection would hold a worker's loop past its leases. Long-running processes pass a timeout
derived from their lease (`timeout_for_lease`) and no retries: their loops back off and try
again themselves, and a worker must see every failed read (a retried XREADGROUP would hand
it entries it never hears of). The SDK uses `SDK_TIMEOUT_S` and retries a failed call once,
on a fresh connection, after a short jittered pause: every call it sends is safe to repeat
(submit skips a job id that exists; the other scripts are fenced or idempotent).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff
import redis.cluster
import redis.retry
import redis.sentinel

import scheduler.redis.cluster as cluster
import scheduler.redis.packing as packing
from scheduler.core.errors import ConfigError, RedisFailure, RedisRefused, RedisUnavailable
from scheduler.core.masking import masked, unencoded

# What redis-py raises: its RedisError, and on a cluster RedisClusterException, which is not one
# (no node reachable, a slot no node serves); both mean "Redis did not serve this call".
REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
RedisErrors = redis.exceptions.RedisError | redis.exceptions.RedisClusterException

SDK_TIMEOUT_S = 5.0
RETRIES = 1
# Connections per client. A call waits (up to its timeout) for a free one rather than fail
# as redis-py 8's pools do past 100: a worker's handlers call ctx.once by the hundred at once.
MAX_CONNECTIONS = 100


def timeout_for_lease(lease_s: float) -> float:
    """A sixth of the lease (5 s for the default 30 s), at least 0.5 s: a process learns that a
    call hangs with most of its leases still ahead of it."""
    return max(0.5, lease_s / 6)


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
        enabled = probe.info("cluster").get("cluster_enabled")
    except redis.exceptions.RedisError:
        return None
    finally:
        probe.close()
    if not enabled:
        return None
    kw = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    return ClusterUrl(((kw["host"], int(kw.get("port", 6379))),), _cluster_options(url))


def _cluster_client(c: ClusterUrl, asyncio: bool, timeout_s: float, retries: int) -> Any:
    """redis-py's cluster client for one-key commands (it follows MOVED by itself, so it
    retries at least twice), and `cluster.adopt` plain clients for each node's pipelines."""
    opts = {**_options(timeout_s), **dict(c.options)}
    node_cls: Any
    cluster_cls: Any
    if asyncio:
        node_cls, cluster_cls = redis.asyncio.cluster.ClusterNode, cluster.AsyncCluster
        retry: Any = redis.asyncio.retry.Retry(
            redis.backoff.EqualJitterBackoff(cap=0.5, base=0.05), max(retries, 2))
        node_retry: Any = redis.asyncio.retry.Retry(
            redis.backoff.EqualJitterBackoff(cap=0.5, base=0.05), retries)
    else:
        node_cls, cluster_cls = redis.cluster.ClusterNode, cluster.SyncCluster
        retry = redis.retry.Retry(redis.backoff.EqualJitterBackoff(cap=0.5, base=0.05),
                                  max(retries, 2))
        node_retry = redis.retry.Retry(redis.backoff.EqualJitterBackoff(cap=0.5, base=0.05),
                                       retries)
    try:
        client = cluster_cls(startup_nodes=[node_cls(h, p) for h, p in c.nodes], retry=retry,
                             **opts)
    except REDIS_ERRORS as exc:
        raise translate(exc, ",".join(f"{h}:{p}" for h, p in c.nodes)) from exc
    return cluster.adopt(client, lambda host, port: _plain(asyncio, host, port, opts,
                                                           node_retry, timeout_s))


def _plain(asyncio: bool, host: str, port: int, opts: dict[str, Any], retry: Any,
           timeout_s: float) -> Any:
    """A plain client to one cluster node, with the pool every client of ours has."""
    kw = dict(opts)
    if kw.pop("ssl", False):
        kw["connection_class"] = (redis.asyncio.connection.SSLConnection if asyncio
                                  else redis.connection.SSLConnection)
    module = redis.asyncio if asyncio else redis
    pool = module.BlockingConnectionPool(host=host, port=port, retry=retry,
                                         max_connections=MAX_CONNECTIONS, timeout=timeout_s,
                                         **kw)
    if asyncio:
        packing.adopt(pool)
    return module.Redis.from_pool(pool)


def _check(url: str) -> None:
    problem = unencoded(url)
    if problem:
        raise ConfigError(f"redis url {masked(url, url)!r}: {problem}")
    if parse_sentinel(url) is not None or parse_cluster(url) is not None:
        return
    scheme, _, rest = url.partition("://")
    if scheme in ("redis", "rediss"):
        db = urllib.parse.urlsplit("x://" + rest).path.strip("/")
        if db and not db.isdigit():  # redis-py would quietly use database 0
            raise ConfigError(f"redis url {masked(url)!r}: database {db[:20]!r} is not a "
                              f"number; use redis://host:port/0 (a database index)")
    try:
        redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigError(masked(f"redis url {url!r}: {exc}", url)) from None


def _sentinel_client(s: SentinelUrl, asyncio: bool, timeout_s: float, retry: Any) -> Any:
    """A client whose connections ask the sentinels for the primary: after a failover each
    new connection goes to the new one (a connection to a demoted primary is dropped on its
    first READONLY reply), so every process follows a failover by itself."""
    tls: dict[str, Any] = {"ssl": True, **dict(s.tls_options)} if s.tls else {}
    if tls.get("ssl_check_hostname") is not None:
        tls["ssl_check_hostname"] = tls["ssl_check_hostname"].lower() in ("1", "true", "yes")
    sentinel_kwargs = {**_options(timeout_s), **tls, "username": s.sentinel_username,
                       "password": s.sentinel_password}
    module = redis.asyncio.sentinel if asyncio else redis.sentinel
    manager = module.Sentinel(list(s.sentinels), sentinel_kwargs=sentinel_kwargs)
    client = manager.master_for(s.service, db=s.db, username=s.username, password=s.password,
                                retry=retry, **_options(timeout_s), **tls)
    if asyncio:
        packing.adopt(client.connection_pool)
    return client


def _options(timeout_s: float, url: str = "") -> dict[str, Any]:
    """A unix:// socket's connections take no keepalive (redis-py refuses the argument)."""
    return {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
            **({} if url.startswith("unix:") else {"socket_keepalive": True})}


def sync_redis(url: str, *, timeout_s: float = SDK_TIMEOUT_S,
               retries: int = RETRIES) -> redis.Redis:
    _check(url)
    retry = redis.retry.Retry(redis.backoff.EqualJitterBackoff(cap=0.5, base=0.05),
                              retries)
    sentinel = parse_sentinel(url)
    if sentinel is not None:
        client: redis.Redis = _sentinel_client(sentinel, False, timeout_s, retry)
        return client
    found = find_cluster(url, timeout_s)
    if found is not None:
        return _cluster_client(found, False, timeout_s, retries)  # type: ignore[no-any-return]
    pool = redis.BlockingConnectionPool.from_url(
        url, retry=retry, max_connections=MAX_CONNECTIONS, timeout=timeout_s,
        **_options(timeout_s, url))
    return redis.Redis.from_pool(pool)


def async_redis(url: str, *, timeout_s: float = SDK_TIMEOUT_S,
                retries: int = RETRIES) -> redis.asyncio.Redis:
    _check(url)
    retry = redis.asyncio.retry.Retry(
        redis.backoff.EqualJitterBackoff(cap=0.5, base=0.05), retries)
    sentinel = parse_sentinel(url)
    if sentinel is not None:
        client: redis.asyncio.Redis = _sentinel_client(sentinel, True, timeout_s, retry)
        return client
    found = find_cluster(url, timeout_s)
    if found is not None:
        return _cluster_client(found, True, timeout_s, retries)  # type: ignore[no-any-return]
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, retry=retry, max_connections=MAX_CONNECTIONS, timeout=timeout_s,
        **_options(timeout_s, url))
    packing.adopt(pool)
    return redis.asyncio.Redis.from_pool(pool)


def process_redis(url: str, lease_s: float) -> redis.asyncio.Redis:
    """The client of a long-running process (worker, scheduler node, snapshotter)."""
    return async_redis(url, timeout_s=timeout_for_lease(lease_s), retries=0)


def socket_timeout(client: Any) -> float | None:
    """The socket timeout a client's connections have (a blocking read must end before it)."""
    if cluster.is_cluster(client):
        value = client.get_connection_kwargs().get("socket_timeout")
    else:
        value = client.connection_pool.connection_kwargs.get("socket_timeout")
    return float(value) if value else None


def where(client: Any) -> str:
    """host:port (or the socket path) a client talks to, for messages."""
    if cluster.is_cluster(client):
        nodes = client.get_nodes() or client.nodes_manager.startup_nodes.values()
        return "the Redis Cluster of " + ",".join(sorted(n.name for n in nodes)[:3]) + (
            ",..." if len(nodes) > 3 else "")
    pool = client.connection_pool
    if hasattr(pool, "service_name"):
        return f"the primary of sentinel service {pool.service_name!r}"
    kw = pool.connection_kwargs
    if "path" in kw:
        return str(kw["path"])
    return f"{kw.get('host', '?')}:{kw.get('port', '?')}"


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
