"""Every round trip to Redis goes out from here: commands, Lua script calls, raw MULTIs;
blocking and asyncio; on one Redis, behind Sentinel, or over a Redis Cluster.

- Commands: `pipeline(client)` collects them (redis-py's pipeline on one Redis, a
  cluster.NodePipeline on a cluster), `send` / `send_sync` send them. On a cluster each
  primary's share goes as one pipeline over a plain connection to it, all nodes at once; a
  command whose slot was elsewhere (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: it did not run) goes
  again once the slot map is read again, for up to cluster.SETTLE_S.
- Script calls (`run_scripts_*`): EVALSHA by the SHA of a script from the caller's library
  (name -> sha and text: the scripts layer's, which builds the calls); a NOSCRIPT reply
  (Redis restarted or flushed its script cache) loads every script of the library and runs
  again the calls it refused, once. `wait` (WAIT or WAITAOF) travels in the same round trip
  as the writes it vouches for, once per node on a cluster (cluster.each_node).
- Streamed script calls (`stream_scripts_*`): each call goes out as soon as it is made, while
  the caller packs the next (submit_many), so Redis and the client work at once.
- Own connections (`enable`): a worker's round trips, and the snapshotter's raw MULTIs
  (`raw`), on connections kept here outside the client's pool, without the pool's
  bookkeeping around each round trip (`bench burndown` shows the difference in worker CPU
  per job).

Deadlines: every round trip ends within the client's socket timeout (clients.py); one on the
connections kept here has one deadline for its whole exchange rather than one per read. What
redis-py does not publish (a connection's socket and hiredis parser) is redispy_internals.py's.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions

import scheduler.redis.cluster as cluster
import scheduler.redis.redispy_internals as internals


class Script(Protocol):
    """A Lua script as Redis runs it: its text and that text's SHA1."""

    @property
    def sha(self) -> str: ...

    @property
    def text(self) -> str: ...


class ScriptCall(Protocol):
    """One call of a script of a library, by the script's name."""

    @property
    def script(self) -> str: ...

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def args(self) -> tuple[Any, ...]: ...


Library = Mapping[str, Script]


# --- commands ------------------------------------------------------------------------------


def pipeline(client: Any) -> Any:
    """Where a round trip's commands are collected, unsent: redis-py's non-transactional
    pipeline on one Redis, a NodePipeline (or its blocking twin) on a cluster. A command that
    follows the writes before it (WAIT) goes through cluster.each_node."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        return cluster.NodePipeline(client)
    if isinstance(client, redis.cluster.RedisCluster):
        return cluster.SyncNodePipeline(client)
    return client.pipeline(transaction=False)


def transaction(client: Any) -> Any:
    """A MULTI/EXEC pipeline on one Redis (on a cluster: one node's client, every key in one
    hash slot)."""
    return client.pipeline(transaction=True)


async def send(pipe: Any, raise_on_error: bool = True) -> list[Any]:
    """Send what `pipeline` or `transaction` collected: the replies in order; with
    `raise_on_error=False` an error reply is its exception in its place."""
    if isinstance(pipe, cluster.NodePipeline):
        return await _send_nodes(pipe, raise_on_error)
    out: list[Any] = await pipe.execute(raise_on_error=raise_on_error)
    return out


def send_sync(pipe: Any, raise_on_error: bool = True) -> list[Any]:
    """The blocking twin of send."""
    if isinstance(pipe, cluster.SyncNodePipeline):
        return _send_nodes_sync(pipe, raise_on_error)
    out: list[Any] = pipe.execute(raise_on_error=raise_on_error)
    return out


async def command(client: Any, *args: Any, **options: Any) -> Any:
    """One command on its own, as Redis spells it (a blocking read: it holds its connection
    until it ends)."""
    return await client.execute_command(*args, **options)


async def call(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """One command on its own by redis-py's method for it (`hmget`, `zadd`, `time`...): its
    arguments and reply as that method builds and parses them."""
    return await getattr(client, method)(*args, **kwargs)


def call_sync(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """The blocking twin of call."""
    return getattr(client, method)(*args, **kwargs)


async def _send_nodes(pipe: cluster.NodePipeline, raise_on_error: bool) -> list[Any]:
    client = pipe.client
    await cluster.ensure_async(client)
    each = [i for i, c in enumerate(pipe.commands) if c[0] is None]
    results: list[Any] = [[] if c[0] is None else None for c in pipe.commands]
    todo = [i for i, c in enumerate(pipe.commands) if c[0] is not None]
    deadline = time.monotonic() + cluster.SETTLE_S
    while todo:
        await cluster.refresh_async(client)
        groups = pipe._groups(todo)
        outs = await asyncio.gather(*(_send_node(pipe, node, idxs, each)
                                      for node, idxs in groups.values()),
                                    return_exceptions=True)
        todo = pipe._absorb(results, groups, list(outs), each)
        if todo:
            if time.monotonic() > deadline:
                break
            await cluster.refresh_async(client, force=True)
            await asyncio.sleep(0.05)
    return _finish(results, raise_on_error)


async def _send_node(pipe: cluster.NodePipeline, node: Any, idxs: list[int],
                     each: list[int]) -> list[Any]:
    out = node.pipeline(transaction=False)
    pipe._fill(out, idxs, each)
    replies: list[Any] = await out.execute(raise_on_error=False)
    return replies


def _send_nodes_sync(pipe: cluster.SyncNodePipeline, raise_on_error: bool) -> list[Any]:
    """One node after another."""
    client = pipe.client
    each = [i for i, c in enumerate(pipe.commands) if c[0] is None]
    results: list[Any] = [[] if c[0] is None else None for c in pipe.commands]
    todo = [i for i, c in enumerate(pipe.commands) if c[0] is not None]
    deadline = time.monotonic() + cluster.SETTLE_S
    while todo:
        cluster.refresh_sync(client)
        groups = pipe._groups(todo)
        outs: list[Any] = []
        for node, idxs in groups.values():
            out = node.pipeline(transaction=False)
            pipe._fill(out, idxs, each)
            try:
                outs.append(out.execute(raise_on_error=False))
            except redis.exceptions.RedisError as exc:
                outs.append(exc)
        todo = pipe._absorb(results, groups, outs, each)
        if todo:
            if time.monotonic() > deadline:
                break
            cluster.refresh_sync(client, force=True)
            time.sleep(0.05)
    return _finish(results, raise_on_error)


def _finish(results: list[Any], raise_on_error: bool) -> list[Any]:
    if raise_on_error:
        for r in results:
            if isinstance(r, Exception):
                raise r
    return results


def _info(replies: list[Any]) -> tuple[bool | None, int | None]:
    persistence, replication = replies
    return (bool(int(persistence.get("aof_enabled", 0))) if isinstance(persistence, dict)
            else None,
            int(replication.get("connected_slaves", 0)) if isinstance(replication, dict)
            else None)


def _info_pipe(node: Any) -> Any:
    pipe = node.pipeline(transaction=False)
    pipe.info("persistence")
    pipe.info("replication")
    return pipe


async def nodes_info_async(client: Any) -> dict[str, tuple[bool | None, int | None]]:
    """host:port of each primary of a cluster -> (AOF on, replicas connected); None where
    INFO failed."""
    out = {}
    for name, node in cluster.primaries(client):
        try:
            out[name] = _info(await _info_pipe(node).execute(raise_on_error=False))
        except redis.exceptions.RedisError:
            out[name] = (None, None)
    return out


def nodes_info_sync(client: Any) -> dict[str, tuple[bool | None, int | None]]:
    out = {}
    for name, node in cluster.primaries(client):
        try:
            out[name] = _info(_info_pipe(node).execute(raise_on_error=False))
        except redis.exceptions.RedisError:
            out[name] = (None, None)
    return out


# --- own connections -----------------------------------------------------------------------
#
# Why: redis-py's asyncio `Pipeline.execute()` spends more client CPU around a round trip than
# on the write and reads themselves: the pool's lock, its connection-count recording and its
# `can_read` check on every get and release, the retry wrapper, the fieldset preflight. A
# worker makes a round trip per claim and per commit, so that was a large part of its CPU per
# job (`bench burndown`).
#
# How: the commands are collected in a Stack (or a redis-py pipeline), and each reply is
# parsed by the client's own response callback, so what comes back is what
# `execute(raise_on_error=False)` returns: the replies in order, an error reply as its
# exception. Only the I/O differs: one write of every command, then the replies, on a
# connection kept here for the client (`enable`), outside its pool.
#
# Why no check is needed: a connection carries one round trip at a time (it is taken from
# the free list and put back only after its last reply was read), and any exception on it (a
# broken or stalled connection, a timeout, a cancellation) disconnects it, so no reply is
# ever left unread on a connection that is used again. A broken round trip is retried as the
# client's own retry policy says, exactly as its pipeline would be (a worker's client retries
# none: a call that may have run is not sent again behind the caller's back, clients.py).
# More than MAX_LINKS round trips at once take the pipeline path, so the connections kept
# here stay few.
#
# `raw` is the same round trip for commands packed by the caller, its replies parsed by
# hiredis straight from the socket: for a MULTI of thousands of commands
# (history/reads.py), whose QUEUED replies redis-py would read one coroutine call each. Its
# connections are apart and speak RESP2, whatever the client's protocol: hiredis builds a
# RESP3 map (an HGETALL's reply) several times slower than the flat array RESP2 sends.

MAX_LINKS = 8  # connections kept per client: the claim pipelines, the committer, a heartbeat


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


async def _take(links: _Links, conn: Any) -> Any:
    """A kept connection about to be used, closed first (so that it connects anew) when it
    talks to a server the sentinels no longer name the primary (primary.py)."""
    address = getattr(links.pool, "master_address", None)
    if address is not None and conn.is_connected and (conn.host, conn.port) != tuple(address):
        await conn.disconnect()
    links.busy += 1
    return conn


def enable(client: Any) -> None:
    """Make `client`'s asyncio script round trips (run_scripts_async...) go out on
    connections kept here. A Redis Cluster client, or anything but a plain redis-py asyncio
    client, keeps its pipelines."""
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
    (`execute_command`, `evalsha`) without building one; `execute` reads the replies in one
    loop."""

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
    """Where a round trip's commands go: a Stack for an enabled client, else the client's own
    non-transactional pipeline (`pipeline`). execute() sends either."""
    return Stack() if enabled(client) else pipeline(client)


async def execute(client: Any, pipe: Any) -> list[Any]:
    """`pipe`'s round trip as `send(pipe, raise_on_error=False)`, on a connection of our own
    when `client` is enabled."""
    links = _LINKS.get(getattr(client, "connection_pool", None)) \
        if type(client) is redis.asyncio.Redis else None
    stack = getattr(pipe, "command_stack", None)
    if links is None or not stack or (not links.free and links.busy >= MAX_LINKS):
        if isinstance(pipe, Stack):  # more round trips at once than MAX_LINKS
            pipe = client.pipeline(transaction=False)
            for args, options in stack or ():
                pipe.execute_command(*args, **options)
        return await send(pipe, raise_on_error=False)
    conn = await _take(links, links.free.pop() if links.free else links.pool.make_connection())
    try:
        # The client's retry policy, as its pipelines apply it: the whole round trip again
        # on a fresh connection (a worker's client retries nothing: clients.py).
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
    reply: a timer armed and cancelled each time); one deadline for the exchange costs the
    client less per round trip. The errors are the ones redis-py's send and read raise, so
    its retry policy tells them apart, and the connection is closed after any of them."""
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
            f"Timeout in a round trip with {internals.host_error(conn)}") from None
    except OSError as exc:
        await conn.disconnect(nowait=True)
        raise redis.exceptions.ConnectionError(
            f"Error in a round trip with {internals.host_error(conn)}: {exc}") from exc


async def _exchange(client: Any, conn: Any, packed: list[bytes], stack: list[Any]
                    ) -> list[Any]:
    await internals.write(conn, packed)
    callbacks = client.response_callbacks
    found: dict[Any, Any] = {}  # command name -> its callback: a pipeline repeats a few
    if internals.readable_at_once(conn, stack):
        replies = await internals.read_all(conn, len(stack))
    else:
        replies = await internals.read_each(conn, stack)
    out: list[Any] = []
    for (args, options), response in zip(stack, replies, strict=True):
        if isinstance(response, redis.exceptions.ResponseError):  # read, the next follows
            out.append(internals.empty_response(options, response))
            continue
        command = args[0]
        callback = found[command] if command in found else found.setdefault(
            command, callbacks.get(command))
        if callback is None:
            out.append(response)
            continue
        value = callback(response, **internals.callback_options(options))
        out.append(await value if inspect.isawaitable(value) else value)
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
    conn = await _take(links, links.raw_free.pop() if links.raw_free else links.make_raw())
    try:
        if not conn.is_connected:
            await conn.connect()
        async with asyncio.timeout(conn.socket_timeout):
            await internals.write(conn, data)
            out = await internals.read_raw(conn, replies, encoding, errors)
    except BaseException:
        await conn.disconnect()
        await links.put_back(conn, raw=True)
        raise
    await links.put_back(conn, raw=True)
    return out


# --- script calls --------------------------------------------------------------------------


class _Batch:
    """Tracks which calls of a pipelined batch still have to run (NOSCRIPT is retried once)."""

    def __init__(self, library: Library, calls: Sequence[ScriptCall]) -> None:
        self.library = library
        self.calls = calls
        self.results: list[Any] = [None] * len(calls)
        self.todo = list(range(len(calls)))
        self.reloaded = False

    def fill(self, pipe: Any) -> None:
        for i in self.todo:
            c = self.calls[i]
            pipe.evalsha(self.library[c.script].sha, len(c.keys), *c.keys, *c.args)

    def absorb(self, out: list[Any]) -> bool:
        """Store replies; True when scripts must be loaded and the rest run again."""
        for i, r in zip(self.todo, out, strict=True):
            self.results[i] = r
        self.todo = [
            i for i, r in zip(self.todo, out, strict=True)
            if isinstance(r, redis.exceptions.NoScriptError)
        ]
        if not self.todo or self.reloaded:
            return False
        self.reloaded = True
        return True

    def finish(self, raise_errors: bool = True) -> list[Any]:
        if raise_errors:
            for r in self.results:
                if isinstance(r, Exception):
                    raise r
        return self.results


def run_scripts_sync(client: redis.Redis, library: Library, calls: Sequence[ScriptCall],
                     raise_errors: bool = True, wait: tuple[Any, ...] | None = None
                     ) -> tuple[list[Any], int]:
    """Run calls in one pipelined round trip; reload the library once on NOSCRIPT. With
    `raise_errors=False` a call that failed has its exception in its place in the list (the
    others ran); a failed round trip raises either way. `wait` (("WAIT", replicas,
    timeout_ms) or ("WAITAOF", 1, 0, timeout_ms)) goes in the same pipeline: it counts what
    confirmed every write of that connection, so it must travel with the writes. Returns
    the results and the fewest confirmations (replicas, or for WAITAOF the local fsync: 0
    or 1) any round trip that wrote got (-1 without `wait`)."""
    batch, acked = _Batch(library, calls), -1
    while batch.todo:
        pipe = pipeline(client)
        batch.fill(pipe)
        if wait is not None:
            cluster.each_node(pipe, *wait)
        out = send_sync(pipe, raise_on_error=False)
        acked = _acked(out, wait, acked, cluster.is_cluster(client))
        if not batch.absorb(out[:len(batch.todo)]):
            break
        load_scripts_sync(client, library)
    return batch.finish(raise_errors), acked


async def run_scripts_async(client: redis.asyncio.Redis, library: Library,
                            calls: Sequence[ScriptCall], raise_errors: bool = True,
                            wait: tuple[Any, ...] | None = None) -> tuple[list[Any], int]:
    """The asyncio twin of run_scripts_sync (on the client's own connections when enabled)."""
    batch, acked = _Batch(library, calls), -1
    while batch.todo:
        pipe = stack(client)
        batch.fill(pipe)
        if wait is not None:
            cluster.each_node(pipe, *wait)
        out = await execute(client, pipe)
        acked = _acked(out, wait, acked, cluster.is_cluster(client))
        if not batch.absorb(out[:len(batch.todo)]):
            break
        await load_scripts_async(client, library)
    return batch.finish(raise_errors), acked


async def run_scripts_async_then(client: redis.asyncio.Redis, library: Library,
                                 calls: Sequence[ScriptCall], tail: Callable[[Any], int],
                                 raise_errors: bool = True
                                 ) -> tuple[list[Any], list[list[Any]]]:
    """run_scripts_async, plus the commands `tail` appends to the same pipeline (it returns
    how many), in the same round trip. Their replies (or errors) come back as the second
    value, one list per pipeline sent: after a NOSCRIPT reload the calls that did not run
    go again in a second pipeline, with the tail again (a WAIT in it must follow those
    writes), and both pipelines' tail replies count (a read in the first delivered its
    entries too)."""
    batch, extras = _Batch(library, calls), []
    while batch.todo:
        pipe = stack(client)
        batch.fill(pipe)
        n = tail(pipe)
        out = await execute(client, pipe)
        extras.append(out[len(out) - n:])
        if not batch.absorb(out[:len(out) - n]):
            break
        await load_scripts_async(client, library)
    return batch.finish(raise_errors), extras


def _acked(out: list[Any], wait: tuple[Any, ...] | None, acked: int, many: bool) -> int:
    if wait is None:
        return acked
    wrote = any(not isinstance(r, redis.exceptions.NoScriptError) for r in out[:-1])
    return confirmed(out[-1], many, acked) if wrote else acked


def _load_pipes(client: Any, library: Library) -> list[Any]:
    """SCRIPT LOAD of every script, one pipeline per target (every primary of a cluster)."""
    targets = [c for _, c in cluster.primaries(client)] if cluster.is_cluster(client) \
        else [client]
    pipes = []
    for target in targets:
        pipe = target.pipeline(transaction=False)
        for s in library.values():
            pipe.script_load(s.text)
        pipes.append(pipe)
    return pipes


def load_scripts_sync(client: redis.Redis, library: Library) -> None:
    for pipe in _load_pipes(client, library):
        pipe.execute()


async def load_scripts_async(client: redis.asyncio.Redis, library: Library) -> None:
    for pipe in _load_pipes(client, library):
        await pipe.execute()


def wait_replies(reply: Any, many: bool) -> list[Any]:
    """The confirmation count of each node a WAIT or WAITAOF went to (`many`: sent by
    cluster.each_node, whose reply is the nodes' list): WAIT's count, WAITAOF's local fsync
    (its reply is [local, replicas]), or the error."""
    return [r[0] if isinstance(r, list) else r for r in (reply if many else [reply])]


def confirmed(reply: Any, many: bool, acked: int = -1) -> int:
    """The fewest confirmations a WAIT or WAITAOF reply gives (see wait_replies), a failed
    wait counting none, and no more than `acked` (-1: none known yet). The one rule of every
    durable write: a pipeline's and a stream's."""
    for got in wait_replies(reply, many):
        replicas = got if isinstance(got, int) else 0  # the wait failed: none known
        acked = replicas if acked < 0 else min(acked, replicas)
    return acked


# --- streamed script calls -----------------------------------------------------------------
#
# A pipeline sends its commands once all are built, so Redis waits while the client packs
# and the client waits while Redis runs. Here each call goes out on the connection as soon
# as the iterator yields it, and the iterator packs the next one while Redis runs it: the two
# processes overlap. Replies are read once more than AHEAD calls are unanswered, so Redis
# always has a call queued behind the one it runs while the client's reads stay bounded; a
# WAIT (durability) follows the last call, as in a pipeline.
#
# What stays as in run_scripts_sync: a call's error reply is its result (the others ran);
# NOSCRIPT loads the scripts and runs the calls it refused again, once; WAIT counts the
# fewest confirmations of any round trip that wrote. A broken connection (or a reply that did
# not come within the timeout) sends every call again through that pipeline path, which
# retries as redis-py does: the caller's calls must be safe to run twice (submit.lua skips a
# job that exists). A Redis Cluster and clients that are not a plain redis-py client take
# that pipeline path directly, with every call made first.

AHEAD = 2  # calls sent but unanswered before the client reads a reply
_BROKEN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def _command(library: Library, call: ScriptCall) -> tuple[Any, ...]:
    return ("EVALSHA", library[call.script].sha, len(call.keys), *call.keys, *call.args)


def _streams(client: Any) -> bool:
    return isinstance(client, redis.Redis | redis.asyncio.Redis) and not cluster.is_cluster(
        client)


def stream_scripts_sync(client: redis.Redis, library: Library, calls: Iterator[ScriptCall],
                        wait: tuple[Any, ...] | None) -> tuple[list[Any], int]:
    """Each call sent as `calls` yields it; the results and confirmations as
    run_scripts_sync returns them (errors in their places)."""
    if not _streams(client):
        return run_scripts_sync(client, library, list(calls), False, wait)
    pool: Any = client.connection_pool
    conn: Any = pool.get_connection()
    sent: list[ScriptCall] = []
    out: list[Any] = []
    waited = None
    try:
        for call in calls:
            sent.append(call)  # before sending: a send that breaks may have reached Redis
            conn.send_packed_command(conn.pack_command(*_command(library, call)),
                                     check_health=False)
            while len(sent) - len(out) > AHEAD:
                out.append(_read_sync(conn))
        if wait is not None and sent:
            conn.send_packed_command(conn.pack_command(*wait), check_health=False)
        while len(out) < len(sent):
            out.append(_read_sync(conn))
        if wait is not None and sent:
            waited = _read_sync(conn)
    except _BROKEN:
        conn.disconnect()
        return run_scripts_sync(client, library, [*sent, *calls], False, wait)
    except BaseException:
        conn.disconnect()  # replies may be on their way: the connection is out of step
        raise
    finally:
        pool.release(conn)
    results, acked, again = _absorb(sent, out, waited, wait)
    if again:
        load_scripts_sync(client, library)
        retried = run_scripts_sync(client, library, [sent[i] for i in again], False, wait)
        acked = _merge(results, again, retried, acked)
    return results, acked


async def stream_scripts_async(client: redis.asyncio.Redis, library: Library,
                               calls: Iterator[ScriptCall], wait: tuple[Any, ...] | None
                               ) -> tuple[list[Any], int]:
    """The asyncio twin of stream_scripts_sync."""
    if not _streams(client):
        return await run_scripts_async(client, library, list(calls), False, wait)
    pool: Any = client.connection_pool
    conn: Any = await pool.get_connection()
    sent: list[ScriptCall] = []
    out: list[Any] = []
    waited = None
    try:
        for call in calls:
            sent.append(call)
            await conn.send_packed_command(conn.pack_command(*_command(library, call)),
                                           check_health=False)
            while len(sent) - len(out) > AHEAD:
                out.append(await _read_async(conn))
        if wait is not None and sent:
            await conn.send_packed_command(conn.pack_command(*wait), check_health=False)
        while len(out) < len(sent):
            out.append(await _read_async(conn))
        if wait is not None and sent:
            waited = await _read_async(conn)
    except _BROKEN:
        await conn.disconnect()
        return await run_scripts_async(client, library, [*sent, *calls], False, wait)
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    results, acked, again = _absorb(sent, out, waited, wait)
    if again:
        await load_scripts_async(client, library)
        retried = await run_scripts_async(client, library, [sent[i] for i in again], False,
                                          wait)
        acked = _merge(results, again, retried, acked)
    return results, acked


def _read_sync(conn: Any) -> Any:
    try:
        return conn.read_response()
    except redis.exceptions.ResponseError as exc:  # the reply is an error: it is read
        return exc


async def _read_async(conn: Any) -> Any:
    try:
        return await conn.read_response()
    except redis.exceptions.ResponseError as exc:
        return exc


def _absorb(sent: list[ScriptCall], out: list[Any], waited: Any,
            wait: tuple[Any, ...] | None) -> tuple[list[Any], int, list[int]]:
    """The results, the confirmations (-1: none asked, or nothing written), and the calls
    that NOSCRIPT refused."""
    again = [i for i, r in enumerate(out) if isinstance(r, redis.exceptions.NoScriptError)]
    acked = -1
    if wait is not None and len(again) < len(sent):  # something was written: WAIT counts
        acked = confirmed(waited, False)
    return out, acked, again


def _merge(results: list[Any], again: list[int], retried: tuple[list[Any], int],
           acked: int) -> int:
    for i, r in zip(again, retried[0], strict=True):
        results[i] = r
    if retried[1] < 0:
        return acked
    return retried[1] if acked < 0 else min(acked, retried[1])
