"""Redis Cluster: knowing that a client talks to one, and routing each shard's commands to the
primary that holds the shard (transport.py sends them).

Every key of a shard carries its hash tag `{sNN}` and every Lua script touches one shard, so
a namespace spreads over a cluster shard by shard. redis-py's cluster client routes one-key
commands, but refuses EVALSHA in its pipelines, sends a COMMAND GETKEYS before each XREADGROUP
(a movable-keys command) and cannot read streams of several hash tags in one call. So the
commands of shards are recorded in a `NodePipeline` (transport.pipeline), which groups them
by the primary that serves each key's hash slot; the transport sends each group as one
pipeline over a plain connection to that node (every command, scripts included, no GETKEYS),
all nodes at once.

MOVED, ASK, TRYAGAIN and CLUSTERDOWN replies say the command did not run: the slot map is read
again and those commands alone go again, for up to `SETTLE_S`. ASK is not followed: a script
declares only its shard's prefix (a key that never exists) and reaches the shard's other keys
by name, so on the importing node mid-migration it would find half a shard and act on it. A
shard whose slot is migrating waits until the slot has moved, then runs on its new node.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions

SETTLE_S = 10.0  # how long a command waits for its slot to settle (a failover, a migration)
_REFRESH_EVERY_S = 0.1
# Replies that mean "this node does not serve that slot now": the command did not run.
ELSEWHERE = (redis.exceptions.MovedError, redis.exceptions.AskError,
              redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError)
_KEYLESS = frozenset({"info", "time", "ping", "dbsize"})
HOME = object()  # the routing of a command that names no key: the home node (`home`)


def is_cluster(client: Any) -> bool:
    return isinstance(client, redis.cluster.RedisCluster | redis.asyncio.cluster.RedisCluster)


class _Nodes:
    """A cluster client's plain connections, one client per primary, made on first use."""

    def __init__(self, factory: Callable[[str, int], Any]) -> None:
        self.factory = factory
        self.clients: dict[str, Any] = {}
        self.refreshed = 0.0
        self.stale = False

    def get(self, host: str, port: int) -> Any:
        name = f"{host}:{port}"
        client = self.clients.get(name)
        if client is None:
            client = self.clients[name] = self.factory(host, port)
        return client


class AsyncCluster(redis.asyncio.cluster.RedisCluster):
    """redis-py's asyncio cluster client, with the plain node clients of NodePipeline (closed
    with it)."""

    sched_nodes: _Nodes | None = None

    async def aclose(self, *args: Any, **kwargs: Any) -> None:
        nodes, self.sched_nodes = self.sched_nodes, None
        for client in (nodes.clients.values() if nodes else ()):
            await client.aclose()
        await super().aclose(*args, **kwargs)


class SyncCluster(redis.cluster.RedisCluster):
    """The blocking twin of AsyncCluster."""

    sched_nodes: _Nodes | None = None

    def close(self) -> None:
        nodes, self.sched_nodes = self.sched_nodes, None
        for client in (nodes.clients.values() if nodes else ()):
            client.close()
        # redis-py's close() leaves the nodes' pooled connections open (their clients do not
        # own their pools) until the garbage collector finds them: a ResourceWarning.
        self.disconnect_connection_pools()  # type: ignore[no-untyped-call]
        super().close()


def adopt(client: Any, factory: Callable[[str, int], Any]) -> Any:
    """Give a cluster client (AsyncCluster, SyncCluster) the way to make a plain client to
    one of its nodes (clients.py: the URL's credentials, TLS and timeouts)."""
    client.sched_nodes = _Nodes(factory)
    return client


def _nodes(client: Any) -> _Nodes:
    nodes: _Nodes | None = getattr(client, "sched_nodes", None)
    if nodes is None:  # a cluster client made elsewhere (or closed): copy its settings
        kw = {k: v for k, v in client.get_connection_kwargs().items()
              if k in ("username", "password", "socket_timeout", "socket_connect_timeout",
                       "socket_keepalive", "ssl", "ssl_ca_certs", "ssl_certfile",
                       "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")}
        cls = redis.Redis if isinstance(client, redis.cluster.RedisCluster) \
            else redis.asyncio.Redis
        nodes = _Nodes(lambda host, port: cls(host=host, port=port, **kw))
        try:
            client.sched_nodes = nodes
        except AttributeError:
            pass
    return nodes


def node_client(client: Any, key: str | bytes) -> Any:
    """The plain client of the primary that serves `key`'s hash slot (as last known)."""
    node = client.get_node_from_key(key)
    return _nodes(client).get(node.host, node.port)


def primaries(client: Any) -> list[tuple[str, Any]]:
    """(host:port, plain client) of every primary, as last known."""
    nodes = _nodes(client)
    return [(n.name, nodes.get(n.host, n.port)) for n in client.get_primaries()]


def home(client: Any) -> Any:
    """The primary that answers what belongs to no shard (TIME for the clock, INFO): the
    first by address, so every process of a cluster reads the same node's clock."""
    return min(client.get_primaries(), key=lambda n: (n.host, int(n.port)))


def home_client(client: Any) -> Any:
    node = home(client)
    return _nodes(client).get(node.host, node.port)


def mark_stale(client: Any) -> None:
    """The slot map may be wrong (a node failed): read it again before the next routing."""
    _nodes(client).stale = True


def _due_refresh(client: Any, force: bool) -> bool:
    nodes = _nodes(client)
    if not (force or nodes.stale) or time.monotonic() - nodes.refreshed < _REFRESH_EVERY_S:
        return False
    nodes.refreshed, nodes.stale = time.monotonic(), False
    return True


async def refresh_async(client: Any, force: bool = False) -> None:
    if _due_refresh(client, force):
        try:
            await client.nodes_manager.initialize()
        except redis.exceptions.RedisError:
            _nodes(client).stale = True


def refresh_sync(client: Any, force: bool = False) -> None:
    if _due_refresh(client, force):
        try:
            client.nodes_manager.initialize()
        except redis.exceptions.RedisError:
            _nodes(client).stale = True


async def ensure_async(client: Any) -> None:
    """An asyncio cluster client reads its slot map on first use; routing needs it first."""
    if getattr(client, "_initialize", False):
        await client.initialize()


def shard_nodes(client: Any, prefixes: Sequence[str]) -> dict[str, list[int]]:
    """host:port of each primary -> the shards (indexes into `prefixes`) it holds."""
    out: dict[str, list[int]] = {n.name: [] for n in client.get_primaries()}
    for shard, prefix in enumerate(prefixes):
        out.setdefault(client.get_node_from_key(prefix).name, []).append(shard)
    return out


def routing_key(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """The key a recorded command is routed by."""
    if name == "evalsha":
        return args[2]
    if name == "xreadgroup":
        streams = kwargs.get("streams") or args[2]
        return next(iter(streams))
    if name == "execute_command":
        head = str(args[0]).upper()
        if head.startswith("XREADGROUP") or head.startswith("XREAD"):
            return args[list(args).index("STREAMS") + 1]
        if head in ("EVALSHA", "EVAL"):
            return args[3]
        if head in ("WAIT", "WAITAOF"):
            raise TypeError(f"{head} vouches for one node's writes: send it with each_node")
        if head.lower() in _KEYLESS:
            return HOME
        return args[1]
    if name in _KEYLESS:
        return HOME
    return args[0]


class _Recorder:
    """What both pipelines record: (routing key or None for each node, method, args, kw)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.commands: list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> _Recorder:
            self.commands.append((routing_key(name, args, kwargs), name, args, kwargs))
            return self
        return record

    def each_node(self, *args: Any) -> _Recorder:
        """A command sent at the end of every node's pipeline that carries other commands of
        this one (WAIT: it must follow that node's writes); its reply is the list of the
        nodes' replies."""
        self.commands.append((None, "execute_command", args, {}))
        return self

    def __len__(self) -> int:
        return len(self.commands)

    def _groups(self, todo: Sequence[int]) -> dict[str, tuple[Any, list[int]]]:
        nodes = _nodes(self.client)
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i in todo:
            key = self.commands[i][0]
            node = home(self.client) if key is HOME else self.client.get_node_from_key(key)
            groups.setdefault(node.name, (nodes.get(node.host, node.port), []))[1].append(i)
        return groups

    def _fill(self, pipe: Any, idxs: list[int], each: list[int]) -> None:
        for i in (*idxs, *each):
            _, name, args, kwargs = self.commands[i]
            getattr(pipe, name)(*args, **kwargs)

    def _absorb(self, results: list[Any], groups: dict[str, tuple[Any, list[int]]],
                outs: list[Any], each: list[int]) -> list[int]:
        """Store one round's replies; the indexes to send again (their slot was elsewhere)."""
        again: list[int] = []
        for (_, idxs), out in zip(groups.values(), outs, strict=True):
            if isinstance(out, BaseException):
                mark_stale(self.client)
                raise out
            for i, reply in zip(idxs, out, strict=False):
                if isinstance(reply, ELSEWHERE):
                    again.append(i)
                results[i] = reply
            for j, reply in zip(each, out[len(idxs):], strict=True):
                results[j].append(reply)
        return again


class NodePipeline(_Recorder):
    """The commands of an asyncio round trip over a cluster (transport.send sends them)."""


class SyncNodePipeline(_Recorder):
    """The blocking twin (transport.send_sync)."""


def each_node(pipe: Any, *args: Any) -> None:
    """Append a command that follows the writes before it (WAIT, WAITAOF): once per node on a
    cluster (its reply is then the nodes' list of replies), once on a single Redis."""
    if isinstance(pipe, _Recorder):
        pipe.each_node(*args)
    else:
        pipe.execute_command(*args)
