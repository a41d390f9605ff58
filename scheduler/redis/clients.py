"""Redis clients from a URL (urls.py), with explicit timeouts and one retry policy.

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

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff
import redis.cluster
import redis.connection
import redis.retry
import redis.sentinel

import scheduler.redis.cluster as cluster
import scheduler.redis.packing as packing
from scheduler.redis.failures import REDIS_ERRORS, translate
from scheduler.redis.urls import ClusterUrl, SentinelUrl, check, find_cluster, parse_sentinel

SDK_TIMEOUT_S = 5.0
RETRIES = 1
# Connections per client. A call waits (up to its timeout) for a free one rather than fail
# as redis-py 8's pools do past 100: a worker's handlers call ctx.once by the hundred at once.
MAX_CONNECTIONS = 100


def timeout_for_lease(lease_s: float) -> float:
    """A sixth of the lease (5 s for the default 30 s), at least 0.5 s: a process learns that a
    call hangs with most of its leases still ahead of it."""
    return max(0.5, lease_s / 6)


def retry_policy(asyncio: bool, retries: int) -> Any:
    """The one retry policy of every client and connection: `retries` more tries of a failed
    call, each on a fresh connection after a short jittered pause (at most half a second)."""
    cls = redis.asyncio.retry.Retry if asyncio else redis.retry.Retry
    return cls(redis.backoff.EqualJitterBackoff(cap=0.5, base=0.05), retries)


def _cluster_client(c: ClusterUrl, asyncio: bool, timeout_s: float, retries: int) -> Any:
    """redis-py's cluster client for one-key commands (it follows MOVED by itself, so it
    retries at least twice), and `cluster.adopt` plain clients for each node's pipelines."""
    opts = {**_options(timeout_s), **dict(c.options)}
    node_cls: Any = redis.asyncio.cluster.ClusterNode if asyncio else redis.cluster.ClusterNode
    cluster_cls: Any = cluster.AsyncCluster if asyncio else cluster.SyncCluster
    node_retry = retry_policy(asyncio, retries)
    try:
        client = cluster_cls(startup_nodes=[node_cls(h, p) for h, p in c.nodes],
                             retry=retry_policy(asyncio, max(retries, 2)), **opts)
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


class _BlockingSentinelPool(redis.sentinel.SentinelConnectionPool,
                            redis.BlockingConnectionPool):
    """The primary's pool, waiting for a free connection like every other pool of ours: a
    failover stalls calls by the hundred, and redis-py's sentinel pool fails the 101st."""


class _AsyncBlockingSentinelPool(redis.asyncio.sentinel.SentinelConnectionPool,
                                 redis.asyncio.BlockingConnectionPool):
    """The asyncio one (a worker's handlers call Redis by the hundred at once)."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        # The sentinels' own clients close with it (each new connection asked them for the
        # primary, a burst by the hundred): left open, their sockets outlive the event loop
        # and are reclaimed by the garbage collector with a ResourceWarning each.
        for sentinel in self.sentinel_manager.sentinels:
            await sentinel.connection_pool.disconnect()


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
    pool_class = _AsyncBlockingSentinelPool if asyncio else _BlockingSentinelPool
    client = manager.master_for(s.service, db=s.db, username=s.username, password=s.password,
                                retry=retry, connection_pool_class=pool_class,
                                max_connections=MAX_CONNECTIONS, timeout=timeout_s,
                                **_options(timeout_s), **tls)
    if asyncio:
        packing.adopt(client.connection_pool)
    return client


def _options(timeout_s: float, url: str = "") -> dict[str, Any]:
    """A unix:// socket's connections take no keepalive (redis-py refuses the argument)."""
    return {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
            **({} if url.startswith("unix:") else {"socket_keepalive": True})}


def _client(url: str, asyncio: bool, timeout_s: float, retries: int) -> Any:
    """The client for `url`, blocking or asyncio: a Sentinel-managed primary, a Redis Cluster,
    or one Redis behind a pool of at most MAX_CONNECTIONS connections."""
    check(url)
    retry = retry_policy(asyncio, retries)
    sentinel = parse_sentinel(url)
    if sentinel is not None:
        return _sentinel_client(sentinel, asyncio, timeout_s, retry)
    found = find_cluster(url, timeout_s)
    if found is not None:
        return _cluster_client(found, asyncio, timeout_s, retries)
    module: Any = redis.asyncio if asyncio else redis
    pool = module.BlockingConnectionPool.from_url(
        url, retry=retry, max_connections=MAX_CONNECTIONS, timeout=timeout_s,
        **_options(timeout_s, url))
    if asyncio:
        packing.adopt(pool)
    return module.Redis.from_pool(pool)


def sync_redis(url: str, *, timeout_s: float = SDK_TIMEOUT_S,
               retries: int = RETRIES) -> redis.Redis:
    client: redis.Redis = _client(url, False, timeout_s, retries)
    return client


def async_redis(url: str, *, timeout_s: float = SDK_TIMEOUT_S,
                retries: int = RETRIES) -> redis.asyncio.Redis:
    client: redis.asyncio.Redis = _client(url, True, timeout_s, retries)
    return client


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

