"""What a namespace looks like right now, read from Redis: the data behind `sched status`,
`sched workers` and the exporter's gauges.

Reading is bounded and batched whatever the load: the topology (shard count, the most recent
`MAX_WORKERS` workers, the names of limited queues) and the details (every shard's `stats`
script, lua/stats.lua, O(lanes its index names) commands each: the lanes in use, not every
queue name ever seen, queue_cleaner.py; its `key_stats` script, lua/key_stats.lua, at most
keyed.KEY_BUDGET concurrency keys each; and the worker hashes) in one pipelined round trip
when the caller passes the topology it saw last time and nothing changed (the exporter does),
in two otherwise. "Now" is the caller's Redis-anchored clock, as everywhere else.

A namespace not created yet has no shards: its workers and scheduler nodes wait for it,
registered (workers as `state: waiting`, nodes in `<ns>:schedulers`), and are counted so.

Rates (`succeeded_per_s`, `failed_per_s`) come from the workers: each heartbeat writes the
worker's per-queue rates over its last heartbeat interval into its `worker:<id>` hash, and a
queue's rate is the sum over live workers. That costs no Redis command beyond the heartbeat
the worker sends anyway and nothing per job; the price is that a rate is an average over the
last heartbeat interval (lease/3, 10 s by default). Prometheus computes finer rates from the
workers' own `sched_runs_total` counters. The same heartbeat gives each queue's runs in flight
and mean run time, from which `Status.scaling` (scheduler/observe/capacity.py) says how many workers
the load calls for.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
import redis
import redis.asyncio

import scheduler.core.limits as limits
import scheduler.core.namespace as namespace
import scheduler.observe.capacity as capacity
import scheduler.observe.keyed as keyed
import scheduler.redis.cluster as cluster
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
import scheduler.scripts.source as sources
from scheduler.core.keys import Keys
from scheduler.core.limits import QueueLimit
from scheduler.observe.records import (
    BehindSchedule,
    KeyStatus,
    NodeStatus,
    OutboxStatus,
    QueueShardStatus,
    QueueStatus,
    Rate,
    ShardStatus,
    Status,
    Supervisor,
    WorkerStatus,
    group_supervisors,
)
from scheduler.redis.clients import where
from scheduler.redis.clock import Clock, resync, resync_sync

__all__ = ["KeyStatus", "NodeStatus", "QueueShardStatus", "QueueStatus", "Rate", "ShardStatus", "Status",
           "Supervisor", "Topology", "WorkerStatus", "group_supervisors", "read_status",
           "is_alive", "read_status_async", "read_workers", "read_workers_async"]

NOT_RUN_REASONS = ("overlap", "catchup", "redefined", "deleted")  # stats.lua's not_run order
BEHIND_LISTED = 20  # schedules behind their objective named by a status read (per shard, at most)
MAX_WORKERS = 200  # most recently seen workers read per status; bounds the work of a scrape
ALIVE_SLACK_MS = 2000  # a heartbeat this late past 1.5 intervals (a busy box): still alive
NODE_WAITING_MS = 10_000  # a waiting node re-registers about every second (node.py)


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _age_s(now_ms: int, then_ms: int) -> float:
    return max(0.0, (now_ms - then_ms) / 1000) if then_ms >= 0 else 0.0


def _shard(shard: int, now: int, reply: list[Any], keys_reply: list[Any]) -> ShardStatus:
    due_slots, backlog, oldest_due, dlq, owner, pttl, history, per_queue, orphans, nr = reply
    lag, pending, oldest_unread = (int(x) for x in history)
    recovered, last_ms, waiting = (int(x) for x in orphans)
    status = ShardStatus(
        shard=shard, due_slots=int(due_slots), due_backlog=int(backlog),
        oldest_overdue_s=_age_s(now, int(oldest_due)) if int(backlog) else 0.0,
        dead_letter_size=int(dlq), owner=_owner(_s(owner))[1], owner_epoch=_owner(_s(owner))[0],
        owner_ttl_s=int(pttl) / 1000 if int(pttl) >= 0 else None,
        snapshot_backlog_events=lag + pending if lag >= 0 else None,
        snapshot_lag_s=_age_s(now, oldest_unread) if lag >= 0 else None,
        queues=[QueueShardStatus(queue=_s(q), shard=shard, depth=int(d), pending=int(p),
                                 oldest_ready_age_s=_age_s(now, int(o)))
                for q, d, p, o in per_queue],
        orphans_recovered=recovered, orphans_last_ms=last_ms if last_ms >= 0 else None,
        orphans_waiting=waiting,
        not_run=dict(zip(NOT_RUN_REASONS, (int(x) for x in nr), strict=True)))
    _add_keys(status, keyed.decode(keys_reply))
    return status


def _add_keys(status: ShardStatus, found: list[keyed.ShardKeys]) -> None:
    """A queue's keyed slots wait outside its streams: they count in its depth."""
    of = {q.queue: q for q in status.queues}
    for k in found:
        q = of.get(k.queue)
        if q is None:
            q = of[k.queue] = QueueShardStatus(queue=k.queue, shard=status.shard, depth=0,
                                               pending=0, oldest_ready_age_s=0.0)
            status.queues.append(q)
        q.depth += k.waiting
        q.keyed_waiting, q.keys_waiting = k.waiting, k.keys
        q.keys_truncated, q.top_keys = k.truncated, k.top


def _worker(worker_id: str, seen_ms: int, now: int, raw: dict[bytes, bytes]) -> WorkerStatus:
    """A registry entry, decoded. Anyone who can write to Redis can write one: a field that
    does not parse reads as absent, so one odd entry breaks no `sched workers` and no page."""
    try:
        f = {k.decode(): v.decode() for k, v in raw.items()}
    except UnicodeDecodeError:
        f = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in raw.items()}
    seen = _int(f.get("seen_ms"), seen_ms)
    lease_ms = _int(f.get("lease_ms"), 30_000)
    # [ok/s, failed/s, mean run s] per queue (an older heartbeat wrote no mean)
    rates = {q: r if len(r) == 3 else [*r, 0.0, 0.0, 0.0][:3]
             for q, r in _json(f.get("rates"), _RATES).items()}
    inflight = _json(f.get("queue_inflight"), _COUNTS)
    return WorkerStatus(
        worker_id=worker_id, alive=bool(raw) and is_alive(now, seen, lease_ms),
        heartbeat_age_s=_age_s(now, seen), host=f.get("host", ""), pid=_int(f.get("pid")),
        queues=[q for q in f.get("queues", "").split(",") if q],
        concurrency=_int(f.get("concurrency")), inflight=_int(f.get("inflight")),
        max_concurrency=_int(f.get("max_concurrency")),
        succeeded=_int(f.get("succeeded")), failed=_int(f.get("failed")),
        waiting=f.get("state") == "waiting",
        succeeded_per_s=sum(r[0] for r in rates.values()),
        failed_per_s=sum(r[1] for r in rates.values()),
        by_queue={q: _rate(rates.get(q), inflight.get(q, 0)) for q in rates.keys() | inflight},
        **_supervised(f))


def is_alive(now_ms: int, seen_ms: int, lease_ms: int) -> bool:
    """A worker whose last heartbeat (`seen_ms`) is younger than half its lease (1.5
    heartbeat intervals) plus ALIVE_SLACK_MS is alive."""
    return now_ms - seen_ms < lease_ms / 2 + ALIVE_SLACK_MS


def _int(value: str | None, default: int = 0) -> int:
    try:
        return default if value is None else int(value)
    except ValueError:
        return default


_RATES = msgspec.json.Decoder(dict[str, list[float]])
_COUNTS = msgspec.json.Decoder(dict[str, int])


def _json(value: str | None, decoder: msgspec.json.Decoder[Any]) -> Any:
    """A JSON field of a registry entry, decoded; empty when absent or not of its type."""
    try:
        return decoder.decode(value) if value else {}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return {}


def _supervised(f: dict[str, str]) -> dict[str, Any]:
    """A supervised child's fields (heartbeat.py writes them from its SupervisorRef); none for
    a worker started on its own, or an entry whose numbers are not numbers."""
    if not f.get("supervisor"):
        return {}
    try:
        return {"supervisor": f["supervisor"], "supervisor_pid": int(f["supervisor_pid"]),
                "child": int(f["child"]), "processes": int(f["processes"]),
                "restarts": int(f["restarts"])}
    except (KeyError, ValueError):
        return {}


def _rate(r: list[float] | None, inflight: int) -> Rate:
    ok, failed, mean = r or (0.0, 0.0, 0.0)
    return Rate(succeeded_per_s=ok, failed_per_s=failed, mean_run_s=mean, inflight=inflight)


class Topology(NamedTuple):
    """What the detail reads depend on; a scraper keeps the last one so that, while it holds,
    one round trip reads everything."""

    shards: int
    worker_ids: tuple[str, ...]


class _Reader:
    """Sans-I/O: which commands to pipeline and how to decode them, shared by the blocking and
    the asyncio drivers below. The topology reads (shard count, the most recent `MAX_WORKERS`
    workers, limited queues, registered nodes) go first; the details (each shard's stats
    script by SHA, each worker hash) follow in the same pipeline when the topology is known
    from a previous read, or in a second one."""

    TOPOLOGY_COMMANDS = 9

    def __init__(self, keys: Keys, now_ms: int) -> None:
        self.keys = keys
        self.now = now_ms
        self.seen: list[tuple[bytes, float]] = []
        self.workers_known = 0
        self.aof: bool | None = None
        self.replicas: int | None = None
        self.nodes: list[NodeStatus] = []
        self.where = ""
        self.limited: list[str] = []  # queues with a limit: listed, even idle
        self.per_key: dict[str, QueueLimit] = {}  # queues with a per-key limit: theirs
        self.node_seen: list[float] = []  # `<ns>:schedulers` scores (ms)
        self.outbox: OutboxStatus | None = None
        self.retention = namespace.RetentionSettings()

    def topology(self, pipe: Any) -> None:
        pipe.hget(self.keys.meta, "shards")
        pipe.zrevrange(self.keys.workers, 0, MAX_WORKERS - 1, withscores=True)
        pipe.zcard(self.keys.workers)
        pipe.hgetall(self.keys.limits)
        pipe.zrangebyscore(self.keys.schedulers, self.now - NODE_WAITING_MS, "+inf",
                           withscores=True)
        pipe.info("persistence")  # an ACL without INFO: unknown, not an error
        pipe.info("replication")
        pipe.hgetall(self.keys.outbox)
        namespace.read_retention(pipe, self.keys)

    def took_topology(self, replies: list[Any]) -> Topology:
        for r in replies[:5]:
            if isinstance(r, Exception):
                raise r
        shards, self.seen, known, limited, nodes, persistence, replication, box, kept = replies
        self.retention = namespace.parse_retention(
            kept if isinstance(kept, list) else [None] * len(namespace.RETENTION_FIELDS))
        if isinstance(box, dict) and box:
            self.outbox = OutboxStatus(
                rows=int(box.get(b"rows", 0)), oldest_age_s=int(box.get(b"lag_ms", 0)) / 1000,
                reported_age_s=_age_s(self.now, int(box.get(b"at_ms", self.now))))
        self.workers_known = int(known)
        self.limited = sorted(_s(q) for q in limited)
        self.per_key = {q: lim for q, lim in limits.parse(
            {_s(q).encode(): v for q, v in limited.items()}).items() if lim.per_key}
        self.node_seen = [score for _, score in nodes]
        self.aof = (bool(int(persistence.get("aof_enabled", 0)))
                    if isinstance(persistence, dict) else None)
        self.replicas = (int(replication.get("connected_slaves", 0))
                         if isinstance(replication, dict) else None)
        return Topology(int(shards or 0), tuple(_s(w) for w, _ in self.seen))

    def stats_calls(self, topo: Topology) -> list[scripts.Call]:
        """Each shard's stats, then each shard's key_stats."""
        return [*(scripts.stats(self.keys.prefix(s), self.now) for s in range(topo.shards)),
                *keyed.calls(self.keys, topo.shards, keyed.TOP_KEYS)]

    def details(self, pipe: Any, topo: Topology) -> None:
        for call in self.stats_calls(topo):
            pipe.execute_command("EVALSHA", sources.SOURCES[call.script].sha, len(call.keys),
                                 *call.keys, *call.args)
        for worker_id in topo.worker_ids:
            pipe.hgetall(self.keys.worker(worker_id))
        for shard in range(topo.shards):  # the finished work each shard keeps
            pipe.zcard(self.keys.finished(shard))
            pipe.zrange(self.keys.finished(shard), 0, 0, withscores=True)
            pipe.llen(self.keys.done(shard))
            pipe.lindex(self.keys.done(shard), 0)
        for shard in range(topo.shards):  # only the head: cheap with any number of schedules
            pipe.zcard(self.keys.behind(shard))
            pipe.zrange(self.keys.behind(shard), 0, BEHIND_LISTED - 1, withscores=True)

    @staticmethod
    def needs_scripts(topo: Topology, replies: list[Any]) -> bool:
        """True when Redis lost its script cache: the stats then go through calls.py's
        run_sync/run_async, which load them."""
        return any(isinstance(r, redis.exceptions.NoScriptError)
                   for r in replies[:2 * topo.shards])

    def status(self, topo: Topology, replies: list[Any], stats: list[Any] | None = None
               ) -> Status:
        scripted = 2 * topo.shards  # stats, then key_stats, per shard (stats_calls)
        stats = replies[:scripted] if stats is None else stats
        for r in [*stats, *replies[scripted:]]:
            if isinstance(r, Exception):
                raise r
        details = [_shard(s, self.now, r, k) for s, (r, k) in enumerate(
            zip(stats[:topo.shards], stats[topo.shards:], strict=True))]
        hashes = scripted + len(topo.worker_ids)
        workers = [_worker(_s(w), int(score), self.now, raw)
                   for (w, score), raw in zip(self.seen, replies[scripted:hashes], strict=True)]
        finished = replies[hashes:hashes + 4 * topo.shards]
        behind = replies[hashes + 4 * topo.shards:]
        for d in details:
            kept, head, listed, first = finished[4 * d.shard:4 * d.shard + 4]
            d.finished_kept = int(kept) + int(listed)
            oldest = [int(head[0][1])] if head else []
            ms = _s(first or "").partition(":")[0]  # the `done` list's head: "<ms>:<slot>"
            if ms.isdigit():
                oldest.append(int(ms))
            d.finished_oldest_age_s = _age_s(self.now, min(oldest)) if oldest else None
        queues = sorted({q.queue for d in details for q in d.queues} | set(self.limited))
        status = _summarize(self.keys.ns, self.now, topo.shards, queues, details, workers,
                            self.workers_known, self.per_key)
        status.workers_waiting = sum(1 for w in workers if w.alive and w.waiting)
        if not topo.shards:  # no node can run before its namespace exists: all of them wait
            status.nodes_waiting = len(self.node_seen)
        status.redis_aof, status.redis_replicas = self.aof, self.replicas
        status.outbox = self.outbox
        status.retention_s = self.retention.retention_s
        status.retain_max = self.retention.retain_max
        status.finished_kept = sum(d.finished_kept for d in details)
        status.schedules_behind = sum(int(n) for n in behind[0::2])
        listed = sorted(((since, _s(j)) for head in behind[1::2] for j, since in head))
        status.behind_listed = [BehindSchedule(job_id=j, behind_s=_age_s(self.now, int(since)))
                                for since, j in listed[:BEHIND_LISTED]]
        ages = [d.finished_oldest_age_s for d in details if d.finished_oldest_age_s is not None]
        status.finished_oldest_age_s = max(ages) if ages else None
        status.nodes = self.nodes or [NodeStatus(node=self.where, shards=list(range(
            topo.shards)), aof=self.aof, replicas=self.replicas)]
        if self.nodes:  # a cluster: durability is the weakest node's
            status.redis_aof = _weakest([n.aof for n in self.nodes], all)
            status.redis_replicas = _weakest([n.replicas for n in self.nodes], min)
        return status

    def took_nodes(self, client: Any, topo: Topology,
                   info: dict[str, tuple[bool | None, int | None]]) -> None:
        held = cluster.shard_nodes(client, [self.keys.prefix(s) for s in range(topo.shards)])
        self.nodes = [NodeStatus(node=name, shards=held.get(name, []), aof=aof,
                                 replicas=replicas)
                      for name, (aof, replicas) in sorted(info.items())]


def read_status(client: redis.Redis, keys: Keys, clock: Clock,
                known: Topology | None = None) -> tuple[Status, Topology]:
    """The namespace's status, and the topology to pass back next time: with it, one
    pipelined round trip while no shard count or worker changed; two otherwise. The
    clock is anchored to Redis TIME (a round trip only when it is stale). Nothing is written."""
    reader = _Reader(keys, resync_sync(clock, client))
    reader.where = where(client)
    pipe = transport.pipeline(client)
    reader.topology(pipe)
    if known is not None:
        reader.details(pipe, known)
    replies = transport.send_sync(pipe, raise_on_error=False)
    topo = reader.took_topology(replies[:reader.TOPOLOGY_COMMANDS])
    details = replies[reader.TOPOLOGY_COMMANDS:]
    if topo != known:
        pipe = transport.pipeline(client)
        reader.details(pipe, topo)
        details = transport.send_sync(pipe, raise_on_error=False)
    stats = (scripts.run_sync(client, reader.stats_calls(topo))
             if reader.needs_scripts(topo, details) else None)
    if cluster.is_cluster(client):
        reader.took_nodes(client, topo, transport.nodes_info_sync(client))
    return reader.status(topo, details, stats), topo


async def read_status_async(client: redis.asyncio.Redis, keys: Keys, clock: Clock) -> Status:
    """The asyncio twin of read_status (two round trips; nothing cached)."""
    reader = _Reader(keys, await resync(clock, client))
    reader.where = where(client)
    pipe = transport.pipeline(client)
    reader.topology(pipe)
    topo = reader.took_topology(await transport.send(pipe, raise_on_error=False))
    pipe = transport.pipeline(client)
    reader.details(pipe, topo)
    details = await transport.send(pipe, raise_on_error=False)
    stats = (await scripts.run_async(client, reader.stats_calls(topo))
             if reader.needs_scripts(topo, details) else None)
    if cluster.is_cluster(client):
        reader.took_nodes(client, topo, await transport.nodes_info_async(client))
    return reader.status(topo, details, stats)


def _by_heartbeat(workers: list[WorkerStatus]) -> list[WorkerStatus]:
    return sorted(workers, key=lambda w: (not w.alive, w.heartbeat_age_s))


def read_workers(client: redis.Redis, keys: Keys, clock: Clock) -> list[WorkerStatus]:
    """The most recently seen workers, alive first."""
    return _by_heartbeat(read_status(client, keys, clock)[0].workers)


async def read_workers_async(client: redis.asyncio.Redis, keys: Keys, clock: Clock
                             ) -> list[WorkerStatus]:
    return _by_heartbeat((await read_status_async(client, keys, clock)).workers)


def _summarize(namespace: str, now: int, shards: int, queues: list[str],
               details: list[ShardStatus], workers: list[WorkerStatus], workers_known: int,
               per_key: dict[str, QueueLimit]) -> Status:
    alive = [w for w in workers if w.alive]
    # Per queue: ok/s, failed/s, ended/s of the workers that timed runs, the seconds of run
    # those ended runs took per second (mean run = that / ended/s), in flight.
    rates: dict[str, list[float]] = {q: [0.0] * 5 for q in queues}
    for w in alive:
        for q, rate in w.by_queue.items():
            if q in rates:
                ended = rate.succeeded_per_s + rate.failed_per_s
                sums = rates[q]
                sums[0] += rate.succeeded_per_s
                sums[1] += rate.failed_per_s
                sums[2] += ended if rate.mean_run_s else 0.0
                sums[3] += ended * rate.mean_run_s
                sums[4] += rate.inflight
    shards_of: dict[str, list[QueueShardStatus]] = {q: [] for q in queues}
    for d in details:  # one pass: a namespace may list thousands of queues
        for qs in d.queues:
            shards_of.setdefault(qs.queue, []).append(qs)
    by_queue = [QueueStatus(
        queue=q,
        depth=sum(qs.depth for qs in shards_of[q]),
        pending=sum(qs.pending for qs in shards_of[q]),
        oldest_ready_age_s=max([qs.oldest_ready_age_s for qs in shards_of[q]], default=0.0),
        succeeded_per_s=rates[q][0], failed_per_s=rates[q][1], inflight=int(rates[q][4]),
        mean_run_s=round(rates[q][3] / rates[q][2], 4) if rates[q][2] else 0.0,
        keyed_waiting=sum(qs.keyed_waiting for qs in shards_of[q]),
        keys_waiting=sum(qs.keys_waiting for qs in shards_of[q]),
        keys_truncated=any(qs.keys_truncated for qs in shards_of[q]),
        top_keys=keyed.busiest((k for qs in shards_of[q] for k in qs.top_keys), keyed.TOP_KEYS),
        per_key_concurrency=per_key[q].per_key_concurrency if q in per_key else None,
        per_key_rate=per_key[q].per_key_rate if q in per_key else None)
        for q in queues]
    snapshot = [d.snapshot_lag_s for d in details if d.snapshot_lag_s is not None]
    last_orphan = max((d.orphans_last_ms for d in details if d.orphans_last_ms is not None),
                      default=None)
    return Status(
        namespace=namespace, now_ms=now, shards=shards, queues=by_queue, workers=workers,
        workers_alive=len(alive), workers_known=workers_known,
        due_slots=sum(d.due_slots for d in details),
        due_backlog=sum(d.due_backlog for d in details),
        oldest_overdue_s=max([d.oldest_overdue_s for d in details], default=0.0),
        dead_letter_size=sum(d.dead_letter_size for d in details),
        shards_owned=sum(1 for d in details if d.owner),
        snapshot_lag_s=max(snapshot) if snapshot else None, shard_details=details,
        orphans_recovered=sum(d.orphans_recovered for d in details),
        orphans_last_age_s=_age_s(now, last_orphan) if last_orphan is not None else None,
        orphans_waiting=sum(d.orphans_waiting for d in details),
        snapshot_backlog_events=sum(d.snapshot_backlog_events or 0 for d in details),
        scaling=capacity.plan(by_queue, workers))


def _weakest(values: list[Any], pick: Any) -> Any:  # None when any node's is unknown
    return None if not values or any(v is None for v in values) else pick(values)


def _owner(value: str) -> tuple[int | None, str | None]:
    """Split lease.lua's "<epoch>:<node_id>"; the epoch stays out of metric labels, which
    would otherwise grow a new series at every change of hands."""
    epoch, sep, node = value.partition(":")
    if sep and epoch.isdigit():
        return int(epoch), node or None
    return None, value or None
