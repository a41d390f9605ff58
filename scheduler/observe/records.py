"""The records of `sched status` (what a namespace looks like right now) and what they say
about its health: `Status.problems()` (unhealthy: `sched status` exits 3) and
`Status.warnings()` (at risk, not unhealthy). Plain data: scheduler/observe/status.py reads and decodes
them from Redis; the SDK, the CLI, the exporter and the web console read them."""

from __future__ import annotations

import msgspec

from scheduler.core.limits import QueueLimit
from scheduler.core.namespace import DEFAULT_RETAIN_MAX, DEFAULT_RETENTION_S


class KeyStatus(msgspec.Struct, kw_only=True, frozen=True):
    """One concurrency key of a queue (a tenant, customer, account...) now."""

    key: str
    waiting: int  # its queued slots: waiting for its turn, or for a permit of its own
    running: int  # its runs now: the permits of its per-key limit in use
    weight: int = 1  # its turns per round (`set_key_weight`)


class QueueKeys(msgspec.Struct, kw_only=True):
    """A queue's concurrency keys (`Client.queue_keys`): its per-key limit and its busiest
    keys, by running + waiting. Each shard reads at most observe/keyed.py's KEY_BUDGET keys:
    past that, `truncated` is true and the counts are lower bounds."""

    queue: str
    per_key_concurrency: int | None  # the queue's per-key limits (None: none)
    per_key_rate: float | None
    waiting: int  # queued slots of every key read
    keys: int  # keys with a queued slot (read or not)
    truncated: bool
    busiest: list[KeyStatus]

    def limit_text(self) -> str:
        """The per-key limits for people: "3 at once per key, 10/s per key", or "no per-key
        limit"."""
        text = QueueLimit(per_key_concurrency=self.per_key_concurrency,
                          per_key_rate=self.per_key_rate).text()
        return "no per-key limit" if text == "none" else text


class QueueShardStatus(msgspec.Struct, kw_only=True):
    queue: str
    shard: int
    depth: int  # entries not yet delivered to the consumer group, and keyed slots queued
    pending: int  # delivered, not yet acked (running or about to be committed)
    oldest_ready_age_s: float  # how long the oldest undelivered entry has waited; 0 if none
    keyed_waiting: int = 0  # of depth: the queued slots of concurrency keys (keyed.py)
    keys_waiting: int = 0  # concurrency keys with a queued slot
    keys_truncated: bool = False  # more keys than a read takes: the keyed counts are lower bounds
    top_keys: list[KeyStatus] = []  # the busiest keys of the shard, busiest first


class ShardStatus(msgspec.Struct, kw_only=True):
    shard: int
    due_slots: int  # everything in `due`: retries, delayed and cron slots
    due_backlog: int  # due slots whose time has come but that are not promoted yet
    oldest_overdue_s: float  # how late the oldest of those is; 0 if none
    dead_letter_size: int
    owner: str | None  # the node id holding the shard's lease (the key is "<epoch>:<node_id>")
    owner_epoch: int | None
    owner_ttl_s: float | None
    snapshot_backlog_events: int | None  # events the snapshotter has not acked; None: no snapshotter
    snapshot_lag_s: float | None  # age of the oldest event it has not read yet
    queues: list[QueueShardStatus]
    orphans_recovered: int = 0  # slots the sweeper found stranded and repaired, ever
    orphans_last_ms: int | None = None  # when it last did
    orphans_waiting: int = 0  # stranded slots it found whose lease is not over yet
    finished_kept: int = 0  # finished slots in Redis (its `finished` set)
    # cron occurrences that will not run, by written reason (ledger.WRITTEN), ever
    not_run: dict[str, int] = {}
    finished_oldest_age_s: float | None = None  # since the oldest of them finished


class QueueStatus(msgspec.Struct, kw_only=True):
    queue: str
    depth: int
    pending: int
    oldest_ready_age_s: float
    succeeded_per_s: float
    failed_per_s: float
    inflight: int = 0  # runs in flight on live workers (their heartbeats)
    mean_run_s: float = 0.0  # over the runs that ended in the workers' last heartbeat interval
    keyed_waiting: int = 0  # of depth: the queued slots of concurrency keys
    keys_waiting: int = 0  # concurrency keys with a queued slot
    keys_truncated: bool = False  # a shard held more keys than a read takes: lower bounds
    top_keys: list[KeyStatus] = []  # the busiest keys (keyed.TOP_KEYS), busiest first
    per_key_concurrency: int | None = None  # the queue's per-key limits (limits.py)
    per_key_rate: float | None = None


class Rate(msgspec.Struct, kw_only=True):
    succeeded_per_s: float
    failed_per_s: float
    mean_run_s: float = 0.0  # 0: no run ended in the interval
    inflight: int = 0


class WorkerStatus(msgspec.Struct, kw_only=True):
    worker_id: str
    alive: bool  # heartbeat younger than half its lease (1.5 intervals) + ALIVE_SLACK_MS
    heartbeat_age_s: float
    host: str
    pid: int
    queues: list[str]
    concurrency: int  # run slots now (an autoscaling worker moves it, scheduler/worker/autoscale.py)
    inflight: int
    succeeded: int  # since the worker started
    failed: int
    succeeded_per_s: float
    failed_per_s: float
    by_queue: dict[str, Rate]  # the rates per queue over the worker's last heartbeat interval
    max_concurrency: int = 0  # the most it may grow to (`--autoscale MIN:MAX`); 0: unknown
    waiting: bool = False  # started before its namespace existed: waits for it to be created
    # Set on a child of `sched worker --processes N` (scheduler/worker/config.py, SupervisorRef);
    # None on a worker started on its own.
    supervisor: str | None = None  # the supervisor's id
    supervisor_pid: int | None = None
    child: int | None = None  # which of its children: 0 .. processes - 1
    processes: int | None = None  # the children it keeps running
    restarts: int | None = None  # its restart count when it started this child


class Supervisor(msgspec.Struct, kw_only=True):
    """A `sched worker --processes N` as its children's heartbeats describe it (it writes
    nothing to Redis itself): grouped by `group_supervisors()`."""

    supervisor_id: str
    host: str
    pid: int
    processes: int  # the children it keeps running
    children_alive: int
    restarts: int  # children it has restarted: the highest count a child was started with
    children: list[WorkerStatus]  # alive first, each by its index; gone ones while registered

    def summary(self) -> str:
        """One line for people (`sched workers`, the console)."""
        return (f"supervisor {self.supervisor_id} on {self.host}, pid {self.pid}: "
                f"{self.children_alive}/{self.processes} children alive, {self.restarts} "
                f"restart{'' if self.restarts == 1 else 's'}")


def group_supervisors(workers: list[WorkerStatus]) -> list[Supervisor]:
    """The supervisors of these workers, in the order their first child appears (`workers()`:
    alive first, the latest heartbeat first); workers started on their own are in none."""
    groups: dict[str, list[WorkerStatus]] = {}
    for w in workers:
        if w.supervisor is not None:
            groups.setdefault(w.supervisor, []).append(w)
    out = []
    for sid, children in groups.items():
        children.sort(key=lambda w: (not w.alive, w.child or 0))
        first = children[0]  # a live child, if any: what it says is the latest
        out.append(Supervisor(
            supervisor_id=sid, host=first.host, pid=first.supervisor_pid or 0,
            processes=first.processes or len(children),
            children_alive=sum(1 for w in children if w.alive),
            restarts=max(w.restarts or 0 for w in children), children=children))
    return out


# Finished work is "piling up" past this much over the namespace's bounds: the expirer
# removes a batch per shard per pass, so a busy namespace is always a little over them.
RETENTION_SLACK = 1.1
RETENTION_GRACE_S = 60.0
RETAIN_GRACE = 10_000

OUTBOX_LAG_S = 30.0  # the SchedOutboxLag alert's threshold (deploy/prometheus/alerts.yml)


class OutboxStatus(msgspec.Struct, kw_only=True):
    """The outbox relays' last report (scheduler/outbox/relay.py writes it about once a
    second): rows committed and not yet in Redis, the oldest one's age, and how long ago
    a relay said so."""

    rows: int
    oldest_age_s: float
    reported_age_s: float


class NodeStatus(msgspec.Struct, kw_only=True):
    node: str  # host:port of a primary (a single Redis: the one node)
    shards: list[int]  # the namespace's shards it holds
    aof: bool | None = None  # None: INFO not allowed or it did not answer
    replicas: int | None = None


class Scaling(msgspec.Struct, kw_only=True):
    """How many workers the observed lag and throughput call for (the rule:
    scheduler/observe/capacity.py)."""

    running: int  # live workers
    wanted: int
    change: int  # wanted - running: add (+) or remove (-) this many
    slots_wanted: float  # run slots over every queue
    slots_per_worker: int
    by_queue: dict[str, float]  # run slots each queue calls for
    target_lag_s: float
    target_utilisation: float


class BehindSchedule(msgspec.Struct, kw_only=True):
    """A schedule behind its objective: the share of its recent occurrences started within
    its `on_time_within` is below the target (the scheduler node's objective watch decides:
    scheduler/core/objective.py)."""

    job_id: str
    behind_s: float  # since the node saw it fall behind


class Status(msgspec.Struct, kw_only=True):
    namespace: str
    now_ms: int
    shards: int
    queues: list[QueueStatus]
    workers: list[WorkerStatus]
    workers_alive: int
    workers_known: int  # entries in the registry, including dead ones not shown
    due_slots: int
    due_backlog: int
    oldest_overdue_s: float
    dead_letter_size: int
    shards_owned: int
    snapshot_lag_s: float | None
    shard_details: list[ShardStatus]
    orphans_recovered: int = 0
    orphans_last_age_s: float | None = None  # since the sweeper last repaired one
    orphans_waiting: int = 0
    redis_aof: bool | None = None  # the server's AOF is on (None: INFO not allowed)
    redis_replicas: int | None = None  # replicas connected to it
    snapshot_backlog_events: int = 0  # events not in history yet: what a loss would cost
    nodes: list[NodeStatus] = []  # which Redis node holds which shards
    scaling: Scaling | None = None  # None only on a record not read by scheduler/observe/status.py
    workers_waiting: int = 0  # live workers waiting for the namespace to be created
    nodes_waiting: int = 0  # scheduler nodes registered while it does not exist (all wait)
    outbox: OutboxStatus | None = None  # None: no outbox relay ever reported
    finished_kept: int = 0  # finished slots in Redis, over every shard
    finished_oldest_age_s: float | None = None  # since the oldest of them finished
    retention_s: float = DEFAULT_RETENTION_S  # the namespace's bounds (`sched namespace show`)
    retain_max: int = DEFAULT_RETAIN_MAX
    schedules_behind: int = 0  # recurring jobs behind their objective, over every shard
    # the longest behind of them (at most BEHIND_LISTED per shard), longest first
    behind_listed: list[BehindSchedule] = []

    def retention_behind(self) -> str | None:
        """Finished work kept past the namespace's bounds by more than the expirer's slack
        (a pass a second, a batch a call): no scheduler node is applying them, or, with
        history, the history store is behind. None while within them."""
        over_age = (self.finished_oldest_age_s is not None and self.finished_oldest_age_s
                    > self.retention_s * RETENTION_SLACK + RETENTION_GRACE_S)
        over_count = self.finished_kept > self.retain_max * RETENTION_SLACK + RETAIN_GRACE
        if not (over_age or over_count):
            return None
        oldest = self.finished_oldest_age_s or 0.0
        return (f"{self.finished_kept:,} finished slot(s) kept in Redis, the oldest finished "
                f"{oldest:.0f}s ago, past the retention ({self.retention_s:g}s, at most "
                f"{self.retain_max:,}): is a `sched scheduler` running, and, when the namespace "
                f"keeps history, is the snapshotter keeping up? (docs: operating/retention.md)")

    def behind_line(self, shown: int = 5) -> str:
        """The schedules behind their objective, in one line: up to `shown` named (longest
        behind first), the rest counted."""
        named = [f"{b.job_id} ({b.behind_s:.0f}s)" for b in self.behind_listed[:shown]]
        rest = self.schedules_behind - len(named)
        more = f" and {rest:,} more" if rest > 0 else ""
        return (f"{self.schedules_behind:,} schedule(s) behind their objective: "
                f"{', '.join(named)}{more}; see `sched schedules explain NAME` for why")

    def not_created(self) -> str | None:
        """What `sched status` says of a namespace that does not exist yet (None once it
        does): which processes wait for it, and what creates it."""
        if self.shards:
            return None
        return (f"namespace not created yet: {_waiting(self.workers_waiting, self.nodes_waiting)}"
                f" (its first submit, or `sched namespace create`, creates it)")

    def warnings(self) -> list[str]:
        """What puts accepted jobs at risk or slows them without making the namespace
        unhealthy: no durability, shards spread unevenly over a cluster's nodes, outbox
        rows that wait, and finished work kept past the namespace's retention."""
        found = []
        behind = self.retention_behind()
        if behind:
            found.append(behind)
        box = self.outbox
        if box is not None and box.rows and box.oldest_age_s + box.reported_age_s > OUTBOX_LAG_S:
            found.append(f"{box.rows:,} outbox row(s) waiting, the oldest committed "
                         f"{box.oldest_age_s + box.reported_age_s:.0f}s ago: is Redis reachable "
                         f"from `sched outbox relay`, and is one running? (`sched outbox status`)")
        if self.redis_aof is False and self.redis_replicas == 0:
            found.append(f"Redis has neither AOF nor a replica: acknowledged jobs will be lost "
                         f"if it restarts; `sched recover` can restore what history has (now "
                         f"{self.snapshot_backlog_events} event(s) behind"
                         + (f", {self.snapshot_lag_s:.1f}s" if self.snapshot_lag_s is not None
                            else "") + ")")
        counts = [len(n.shards) for n in self.nodes]
        if len(counts) > 1 and self.shards and max(counts) - min(counts) > 1:
            found.append(f"shards fall {'/'.join(map(str, sorted(counts, reverse=True)))} "
                         f"over {len(counts)} nodes: the busiest node does "
                         f"{max(counts) / self.shards:.0%} of the work; move a shard's slot with "
                         f"`redis-cli --cluster reshard` (docs: operating/cluster.md)")
        return found

    def problems(self, *, max_lag_s: float | None = None, max_dead_letter: int | None = None
                 ) -> list[str]:
        """Why this namespace is unhealthy, one line each; empty when it is healthy."""
        found = []
        if self.workers_alive == 0:
            found.append("no worker is alive: start one with `sched worker --app MODULE:REGISTRY`")
        if max_lag_s is not None:
            for q in self.queues:
                if q.oldest_ready_age_s > max_lag_s:
                    found.append(f"queue {q.queue}: the oldest ready job has waited "
                                 f"{q.oldest_ready_age_s:.1f}s (over {max_lag_s:g}s): add workers")
            if self.oldest_overdue_s > max_lag_s:
                found.append(f"{self.due_backlog} due slot(s) not promoted, the oldest "
                             f"{self.oldest_overdue_s:.1f}s late: is a `sched scheduler` running?")
            if self.snapshot_lag_s is not None and self.snapshot_lag_s > max_lag_s:
                found.append(f"the snapshotter is {self.snapshot_lag_s:.1f}s behind")
        if max_dead_letter is not None and self.dead_letter_size > max_dead_letter:
            found.append(f"{self.dead_letter_size} dead slot(s), over {max_dead_letter}")
        if self.schedules_behind:
            found.append(self.behind_line())
        if self.orphans_waiting:
            found.append(f"{self.orphans_waiting} running slot(s) lost their pending stream "
                         f"entry; the sweeper re-runs them when their lease is over (see the "
                         f"'orphaned' events)")
        return found


def _waiting(workers: int, nodes: int) -> str:
    """"2 workers and 1 node are waiting", "1 worker is waiting", "nothing is waiting"."""
    parts = [f"{n} {what}{'' if n == 1 else 's'}" for n, what in ((workers, "worker"),
                                                                  (nodes, "node")) if n]
    if not parts:
        return "no worker or node is waiting"
    verb = "is" if len(parts) == 1 and (workers or nodes) == 1 else "are"
    return f"{' and '.join(parts)} {verb} waiting"
