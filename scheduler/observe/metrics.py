"""Every metric the scheduler exports is declared here, and only here.

Two kinds:

* Process metrics: counters and histograms that the process doing the work increments. They
  are module-level objects; code that counts something imports this module and calls `.inc()`
  (e.g. `metrics.RECLAIMS.inc(n)` in a reclaimer). `sched worker --metrics-port` and
  `sched scheduler --metrics-port` serve them.
* Namespace gauges: the state of Redis (depth, lag, backlog, dead letters, workers, shard
  owners), read when Prometheus scrapes by `NamespaceCollector` (scheduler/observe/status.py does the
  reading, in a few pipelined round trips whatever the namespace's size). `sched exporter`
  serves them.

A scrape's size is bounded whatever the namespace holds: the `top_queues` queues with the
most work (depth, then pending) have series of their own and the rest are summed into one
`queue="(other)"` (OTHER_QUEUES; queue names cannot hold parentheses); concurrency keys,
which may be tenants' names or e-mail addresses, are exported under `key_labels`: "off" (no
per-key series, the default: a key's name never leaves Redis), "hashed" (`key_label`: a
stable pseudonym, which whoever can guess a key can compute too) or "plain".

The worker's hot path runs tens of thousands of jobs a second, so the per-run metrics
(`sched_runs_total`, `sched_start_lag_seconds`, `sched_run_duration_seconds`) are not
prometheus_client's locked Counter and Histogram but the single-writer `FastCounter` and
`FastHistogram` of scheduler/observe/counters.py (an increment is a plain attribute update), and
the worker looks label children up once per (queue, task) and keeps them (`RunMetrics`),
never `.labels()` per job.
Everything counted per batch or per rare event uses prometheus_client's Counter.
"""

from __future__ import annotations

import hashlib
import logging
import time
from bisect import bisect_left
from collections.abc import Iterable

import redis
from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler.core.errors import ConfigError
from scheduler.core.keys import Keys
from scheduler.observe.capacity import ScalingTarget, plan
from scheduler.observe.counters import FastCounter, FastHistogram
from scheduler.observe.status import (
    QueueShardStatus,
    QueueStatus,
    Status,
    Topology,
    WorkerStatus,
    read_status,
)
from scheduler.redis.clock import RedisClock
from scheduler.redis.failures import REDIS_ERRORS

log = logging.getLogger("scheduler.observe.metrics")

# --- process metrics ------------------------------------------------------------------------

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
                     60.0, 300.0, 1800.0)
OUTCOMES = ("succeeded", "failed", "retried", "timed_out", "cancelled", "released", "lost")

RUNS = FastCounter(
    "sched_runs_total", "Attempts that ended in this worker, by queue, task and outcome "
    "(succeeded, failed, retried as the handler asked, timed_out, cancelled, released at "
    "shutdown, lost lease).",
    ("queue", "task", "outcome"), REGISTRY)
START_LAG = FastHistogram(
    "sched_start_lag_seconds", "Claim time minus the slot's fire time, per claim (a retry's "
    "lag includes its backoff).", ("queue",), LATENCY_BUCKETS_S, REGISTRY)
RUN_DURATION = FastHistogram(
    "sched_run_duration_seconds", "From claim to the handler's end.", ("queue", "task"),
    LATENCY_BUCKETS_S, REGISTRY)
RETRIES = Counter("sched_retries_total",
                  "Failed attempts that Redis rescheduled for a retry (committed by a worker).")
DEAD_LETTERED = Counter("sched_dead_lettered_total",
                        "Slots moved to the dead-letter set (attempts exhausted).")
COMMITS_REFUSED = Counter(
    "sched_commits_refused_total",
    "Outcomes Redis refused because the worker's fencing token was no longer current.")
CLAIMS_NOT_REPLICATED = Counter(
    "sched_claims_not_replicated_total",
    "at_most_once runs not started because the replicas did not confirm their claim in time "
    "(worker --claim-replicas); they end lost.")
LEASES_LOST = Counter("sched_leases_lost_total",
                      "Runs a worker stopped because its heartbeat found the lease gone, or "
                      "because no heartbeat reached Redis before the lease could expire.")
RUNS_ABANDONED = Counter(
    "sched_runs_abandoned_total",
    "Handlers the worker gave up on because they did not stop after their cancellation "
    "(timeout, lost lease, cancel request); they may go on in the background.")
# Counted per pass by the reclaimer, the promoter and the materializer.
LEASE_TIMEOUTS = Counter("sched_lease_timeouts_total",
                         "Leases that expired without a heartbeat (counted by the reclaimer).")
RECLAIMS = Counter("sched_reclaims_total",
                   "Slots the reclaimer took back from a worker whose lease expired.")
PROMOTED = Counter("sched_promoted_total", "Due slots the promoter moved to dispatch streams.")
PROMOTED_OVERDUE = Counter(
    "sched_promoted_overdue_total",
    "Due slots this node promoted on a shard it does not own, because they were over a second "
    "late (their owner is dead, frozen or behind).")
MATERIALIZED_OVERDUE = Counter(
    "sched_materialized_overdue_total",
    "Cron jobs this node materialized on a shard it does not own, because their owner had "
    "left them within a second of their next occurrence.")
ORPHANS_RECOVERED = Counter(
    "sched_orphans_recovered_total",
    "Slots the sweeper found stranded (queued with no stream entry, running past their lease "
    "with no pending entry, scheduled outside `due`) and set going again, by what it did.",
    ["action"])
for _action in ("redispatched", "rescheduled", "reindexed", "reclaimed", "lost", "dead",
                "cancelled"):  # lua/sweep.lua's actions: exported at 0 before any repair
    ORPHANS_RECOVERED.labels(_action)
OCCURRENCES_SKIPPED = Counter(
    "sched_occurrences_skipped_total",
    "Cron occurrences recorded `skipped`: their predecessor was still running (overlap=skip).")
OCCURRENCES_NOT_BACKFILLED = Counter(
    "sched_occurrences_not_backfilled_total",
    "Missed cron occurrences the catch-up policy did not backfill (latest, none, or past the "
    "cap of all); counted on the job and in a `missed` event.")

# Set by `sched outbox relay` (scheduler/outbox/relay.py).
OUTBOX_RELAYED = Counter("sched_outbox_relayed_total",
                         "Outbox rows this relay handed to Redis and deleted.")
OUTBOX_REJECTED = Counter(
    "sched_outbox_rejected_total",
    "Outbox rows Redis refused as jobs (moved to the outbox_rejected table).")
OUTBOX_LAG = Gauge("sched_outbox_lag_seconds",
                   "Age of the oldest outbox row not yet in Redis (0 when none waits), as "
                   "this relay last read it.")
OUTBOX_WAITING = Gauge("sched_outbox_rows",
                       "Outbox rows not yet in Redis, as this relay last read it.")
# A worker supervisor's own (`sched worker --processes N`): in a registry of their own, which
# its /metrics serves beside the children's merged metrics (scheduler/observe/children.py).
SUPERVISOR_RESTARTS = Counter(
    "sched_worker_restarts_total", "Worker children the supervisor started again after one "
    "died (any exit it did not ask for).", registry=None)
SUPERVISOR_CHILDREN = Gauge("sched_worker_children",
                            "Worker children of the supervisor alive now.", registry=None)

PROCESS_METRICS = (RUNS, START_LAG, RUN_DURATION, RETRIES, DEAD_LETTERED, COMMITS_REFUSED,
                   LEASES_LOST, RUNS_ABANDONED, LEASE_TIMEOUTS, RECLAIMS, PROMOTED, PROMOTED_OVERDUE,
                   MATERIALIZED_OVERDUE, ORPHANS_RECOVERED, OCCURRENCES_SKIPPED,
                   OCCURRENCES_NOT_BACKFILLED, CLAIMS_NOT_REPLICATED, OUTBOX_RELAYED,
                   OUTBOX_REJECTED, OUTBOX_LAG, OUTBOX_WAITING)


class RunMetrics:
    """The label children of one (queue, task), looked up once per worker and kept on each
    run; `ok`/`failed` are this worker's own tallies, which its heartbeat turns into rates."""

    __slots__ = ("queue", "start_lag", "duration", "outcomes", "succeeded_child", "ok", "failed")

    def __init__(self, queue: str, task: str) -> None:
        self.queue = queue
        self.start_lag = START_LAG.labels(queue)
        self.duration = RUN_DURATION.labels(queue, task)
        self.outcomes = {o: RUNS.labels(queue, task, o) for o in OUTCOMES}
        self.succeeded_child = self.outcomes["succeeded"]
        self.ok = 0
        self.failed = 0

    def succeeded(self, duration_ms: int) -> None:
        # The hot path: HistogramChild.observe_ms inlined, a method call fewer (bench metrics_cost).
        self.succeeded_child.value += 1
        d = self.duration
        d.counts[bisect_left(d.bounds_ms, duration_ms)] += 1
        d.sum_ms += duration_ms
        self.ok += 1

    def ended(self, outcome: str, duration_ms: int) -> None:
        self.outcomes[outcome].value += 1
        self.duration.observe_ms(duration_ms)
        if outcome not in ("released", "lost", "retried"):  # a Retry asked is no failure
            self.failed += 1


# --- namespace gauges, read from Redis at scrape time --------------------------------------

TOP_QUEUES = 100  # queues exported one by one (--top-queues); the rest are summed
OTHER_QUEUES = "(other)"  # the queue label of that sum: no queue name holds a parenthesis
KEY_LABELS = ("off", "hashed", "plain")
DEFAULT_KEY_LABELS = "off"


def key_label(key: str) -> str:
    """A concurrency key as `key_labels="hashed"` exports it: the first 16 hex digits of its
    SHA-256 (to find a key's series, compute its label)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


GAUGES = {
    "sched_queue_depth": ("Entries not yet delivered to the consumer group (stream lag), and "
                          "the queued slots of the queue's concurrency keys.",
                          ("queue", "shard")),
    "sched_queue_keys": ("Concurrency keys of the queue with a queued slot.", ("queue",)),
    "sched_key_waiting": ("Queued slots of a concurrency key, for the queue's busiest keys "
                          "only (by running + waiting, the top 10: observe/keyed.py "
                          "TOP_KEYS); a key outside them is not exported. Only with "
                          "key_labels hashed (the key's key_label) or plain.",
                          ("queue", "key")),
    "sched_key_running": ("Runs of a concurrency key now (its per-key permits in use), for "
                          "the queue's busiest keys only, as sched_key_waiting.",
                          ("queue", "key")),
    "sched_queue_pending": ("Entries delivered and not acked yet.", ("queue", "shard")),
    "sched_queue_oldest_ready_age_seconds": ("How long the oldest undelivered entry has waited.",
                                             ("queue", "shard")),
    "sched_due_backlog": ("Slots in `due` whose time has come, not promoted yet (missed-fire "
                          "backlog).", ("shard",)),
    "sched_due_backlog_oldest_age_seconds": ("How late the oldest due, unpromoted slot is.",
                                             ("shard",)),
    "sched_due_slots": ("Every slot in `due` (retries, delayed, cron).", ("shard",)),
    "sched_dead_letter_size": ("Slots in the dead-letter set.", ("shard",)),
    "sched_orphans_repaired": ("Stranded slots the sweeper has repaired in this shard, ever "
                               "(a counter kept in Redis).", ("shard",)),
    "sched_occurrences_not_run": ("Cron occurrences that will not run, by reason (overlap, "
                                  "catchup, redefined, deleted), ever (counters kept in "
                                  "Redis; `sched schedules explain` lists them).", ("reason",)),
    "sched_orphans_waiting": ("Running slots without their pending entry, waiting for their "
                              "lease to end before the sweeper re-runs them.", ("shard",)),
    "sched_finished_kept": ("Finished slots kept in Redis (the shard's `finished` set), which "
                            "the namespace's retention bounds.", ("shard",)),
    "sched_finished_oldest_age_seconds": ("Since the oldest finished slot kept in Redis "
                                          "finished; absent while none is kept.", ("shard",)),
    "sched_schedules_behind_objective": ("Recurring jobs whose share of occurrences started "
                                         "within their on_time_within over the node's window "
                                         "is below its target (`sched status` names "
                                         "them; `sched schedules explain NAME` says why).", ()),
    "sched_retention_behind": ("1 when finished work is kept past the namespace's retention "
                               "(`sched status` says why: no scheduler node applying it, or "
                               "the history store behind), else 0.", ()),
    "sched_workers_alive": ("Workers whose heartbeat is younger than their lease.", ()),
    "sched_workers_wanted": ("Workers the observed lag and throughput call for (the rule: "
                             "scheduler/observe/capacity.py); what an autoscaler scales on.", ()),
    "sched_queue_slots_wanted": ("Run slots a queue's flow and ready backlog call for "
                                 "(scheduler/observe/capacity.py).", ("queue",)),
    "sched_worker_inflight": ("Runs in flight per live worker.", ("worker",)),
    "sched_worker_concurrency": ("Concurrency limit per live worker (now: an autoscaling "
                                 "worker moves it).", ("worker",)),
    "sched_worker_heartbeat_age_seconds": ("Age of each live worker's last heartbeat.",
                                           ("worker",)),
    "sched_worker_succeeded_per_second": ("Successes per second per live worker over its last "
                                          "heartbeat interval.", ("worker",)),
    "sched_worker_failed_per_second": ("Failures per second per live worker over its last "
                                       "heartbeat interval.", ("worker",)),
    "sched_shard_owner": ("1 for the shard's current owner (the owner key's value).",
                          ("shard", "owner")),
    "sched_shards_owned": ("Shards that have an owner.", ()),
    "sched_shards": ("The namespace's shard count.", ()),
    "sched_snapshotter_lag_seconds": ("Age of the oldest event the snapshotter has not read; "
                                      "absent while no snapshotter group exists.", ("shard",)),
    "sched_snapshotter_backlog_events": ("Events the snapshotter has not acked.", ("shard",)),
    "sched_queues": ("Queues the namespace lists; past the exporter's top_queues, the rest "
                     "are summed into queue=\"(other)\".", ()),
    "sched_exporter_up": ("1 when the last scrape could read Redis.", ()),
    "sched_redis_durable": ("1 when Redis has an AOF or a replica; 0 when a restart loses "
                            "what history does not have yet; absent when INFO is not "
                            "allowed.", ()),
    "sched_exporter_scrape_seconds": ("Time the last scrape spent reading Redis.", ()),
}


def tallies(runs: dict[tuple[str, str], RunMetrics]) -> dict[str, tuple[int, int, int, int]]:
    """Per queue, from a worker's RunMetrics by (queue, task), for its heartbeat: succeeded,
    failed, runs ended (any outcome) and the milliseconds they took (the duration histogram's
    count and sum: the mean run time costs nothing per job)."""
    out: dict[str, tuple[int, int, int, int]] = {}
    for (queue, _), m in runs.items():
        ok, failed, ended, run_ms = out.get(queue, (0, 0, 0, 0))
        out[queue] = (ok + m.ok, failed + m.failed, ended + sum(m.duration.counts),
                      run_ms + m.duration.sum_ms)
    return out


def task_tallies(runs: dict[tuple[str, str], RunMetrics]) -> dict[str, tuple[int, int]]:
    """Per task, from a worker's RunMetrics by (queue, task), for its heartbeat: succeeded,
    failed (the task catalog's rates)."""
    out: dict[str, tuple[int, int]] = {}
    for (_, task), m in runs.items():
        ok, failed = out.get(task, (0, 0))
        out[task] = (ok + m.ok, failed + m.failed)
    return out


def declared_names() -> set[str]:
    """Every sample name this module can produce (for tests of dashboards and alerts)."""
    names = set(GAUGES)
    for m in PROCESS_METRICS:
        if isinstance(m, FastHistogram):
            names |= {f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count"}
        elif isinstance(m, FastCounter):
            names.add(m.name)
        elif isinstance(m, Gauge):
            names.add(m._name)
        else:
            names.add(f"{m._name}_total")
    return names


class NamespaceCollector(Collector):
    """Gauges of one namespace's Redis state, read on every scrape. It also logs what changed
    since the previous scrape and deserves a person's attention: a worker that joined, one
    that stopped heartbeating without leaving (a crash or a partition), one that left."""

    def __init__(self, client: redis.Redis, namespace: str,
                 target: ScalingTarget | None = None, *, top_queues: int = TOP_QUEUES,
                 key_labels: str = DEFAULT_KEY_LABELS) -> None:
        if isinstance(top_queues, bool) or not isinstance(top_queues, int) or top_queues < 1:
            raise ConfigError(f"top_queues {top_queues!r}: give a whole number of queues, 1 "
                              f"or more")
        if key_labels not in KEY_LABELS:
            raise ConfigError(f"key_labels {key_labels!r}: use one of {', '.join(KEY_LABELS)}")
        self.top_queues = top_queues
        self.key_labels = key_labels
        self.redis = client
        self.target = target  # None: the status's own plan (capacity.ScalingTarget defaults)
        self.keys = Keys(namespace)
        self._failing = False
        self._alive: set[str] | None = None  # None until the first scrape
        # Anchored to Redis TIME; re-read every 5 minutes (the monotonic clock drifts far less
        # than a scrape interval in that time), so most scrapes need no TIME round trip.
        self._clock = RedisClock(resync_s=300)
        self._topology: Topology | None = None

    def describe(self) -> Iterable[Metric]:
        return []  # names are in GAUGES; describing must not touch Redis

    def collect(self) -> Iterable[Metric]:
        started = time.perf_counter()
        g = {name: GaugeMetricFamily(name, doc, labels=labels)
             for name, (doc, labels) in GAUGES.items()}
        try:
            status, self._topology = read_status(self.redis, self.keys, self._clock,
                                                 self._topology)
        except REDIS_ERRORS as exc:
            if not self._failing:
                log.warning("exporter cannot read Redis (%s); reporting sched_exporter_up 0", exc)
            self._failing = True
            g["sched_exporter_up"].add_metric([], 0)
            return [g["sched_exporter_up"]]
        if self._failing:
            log.info("exporter reads Redis again")
        self._failing = False
        named = self._named_queues(status.queues)
        not_run: dict[str, int] = {}
        for d in status.shard_details:
            s = str(d.shard)
            self._shard_queues(g, d.queues, s, named, len(named) < len(status.queues))
            g["sched_due_backlog"].add_metric([s], d.due_backlog)
            g["sched_due_backlog_oldest_age_seconds"].add_metric([s], d.oldest_overdue_s)
            g["sched_due_slots"].add_metric([s], d.due_slots)
            g["sched_dead_letter_size"].add_metric([s], d.dead_letter_size)
            g["sched_orphans_repaired"].add_metric([s], d.orphans_recovered)
            g["sched_orphans_waiting"].add_metric([s], d.orphans_waiting)
            for reason, n in d.not_run.items():
                not_run[reason] = not_run.get(reason, 0) + n
            g["sched_finished_kept"].add_metric([s], d.finished_kept)
            if d.finished_oldest_age_s is not None:
                g["sched_finished_oldest_age_seconds"].add_metric([s], d.finished_oldest_age_s)
            if d.owner:
                g["sched_shard_owner"].add_metric([s, d.owner], 1)
            if d.snapshot_lag_s is not None:
                g["sched_snapshotter_lag_seconds"].add_metric([s], d.snapshot_lag_s)
                g["sched_snapshotter_backlog_events"].add_metric(
                    [s], d.snapshot_backlog_events or 0)
        self._keys(g, status.queues, named)
        g["sched_queues"].add_metric([], len(status.queues))
        for reason, n in sorted(not_run.items()):
            g["sched_occurrences_not_run"].add_metric([reason], n)
        if status.redis_aof is not None and status.redis_replicas is not None:
            g["sched_redis_durable"].add_metric(
                [], 1 if status.redis_aof or status.redis_replicas else 0)
        self._workers(g, status, named)
        self._log_worker_changes(status.workers)
        g["sched_shards_owned"].add_metric([], status.shards_owned)
        g["sched_retention_behind"].add_metric([], 1 if status.retention_behind() else 0)
        g["sched_schedules_behind_objective"].add_metric([], status.schedules_behind)
        g["sched_shards"].add_metric([], status.shards)
        g["sched_exporter_up"].add_metric([], 1)
        g["sched_exporter_scrape_seconds"].add_metric([], time.perf_counter() - started)
        return list(g.values())

    @staticmethod
    def _shard_queues(g: dict[str, GaugeMetricFamily], queues: list[QueueShardStatus],
                      shard: str, named: set[str], others: bool) -> None:
        """A shard's queues: the named ones each, the rest (`others`: there are some) as
        one sum (their oldest age, the oldest of theirs)."""
        depth = pending = 0
        oldest = 0.0
        for q in queues:
            if q.queue in named:
                g["sched_queue_depth"].add_metric([q.queue, shard], q.depth)
                g["sched_queue_pending"].add_metric([q.queue, shard], q.pending)
                g["sched_queue_oldest_ready_age_seconds"].add_metric([q.queue, shard],
                                                                     q.oldest_ready_age_s)
            else:
                depth, pending = depth + q.depth, pending + q.pending
                oldest = max(oldest, q.oldest_ready_age_s)
        if others:
            g["sched_queue_depth"].add_metric([OTHER_QUEUES, shard], depth)
            g["sched_queue_pending"].add_metric([OTHER_QUEUES, shard], pending)
            g["sched_queue_oldest_ready_age_seconds"].add_metric([OTHER_QUEUES, shard], oldest)

    def _keys(self, g: dict[str, GaugeMetricFamily], queues: list[QueueStatus],
              named: set[str]) -> None:
        """Concurrency keys per named queue (the others' summed), and the busiest keys' own
        series as key_labels says."""
        other = 0
        for queue in queues:
            if queue.queue not in named:
                other += queue.keys_waiting
                continue
            g["sched_queue_keys"].add_metric([queue.queue], queue.keys_waiting)
            if self.key_labels == "off":
                continue
            for k in queue.top_keys:  # at most keyed.TOP_KEYS: a bounded set of series
                key = k.key if self.key_labels == "plain" else key_label(k.key)
                g["sched_key_waiting"].add_metric([queue.queue, key], k.waiting)
                g["sched_key_running"].add_metric([queue.queue, key], k.running)
        if len(named) < len(queues):
            g["sched_queue_keys"].add_metric([OTHER_QUEUES], other)

    def _named_queues(self, queues: list[QueueStatus]) -> set[str]:
        """The queues with series of their own: the top_queues with the most work (depth,
        then pending; ties by name)."""
        if len(queues) <= self.top_queues:
            return {q.queue for q in queues}
        ranked = sorted(queues, key=lambda q: (-q.depth, -q.pending, q.queue))
        return {q.queue for q in ranked[:self.top_queues]}

    def _workers(self, g: dict[str, GaugeMetricFamily], status: Status,
                 named: set[str]) -> None:
        for w in status.workers:
            if w.alive:
                g["sched_worker_inflight"].add_metric([w.worker_id], w.inflight)
                g["sched_worker_concurrency"].add_metric([w.worker_id], w.concurrency)
                g["sched_worker_heartbeat_age_seconds"].add_metric([w.worker_id],
                                                                   w.heartbeat_age_s)
                g["sched_worker_succeeded_per_second"].add_metric([w.worker_id],
                                                                  w.succeeded_per_s)
                g["sched_worker_failed_per_second"].add_metric([w.worker_id], w.failed_per_s)
        g["sched_workers_alive"].add_metric([], status.workers_alive)
        scaling = (plan(status.queues, status.workers, self.target) if self.target
                   else status.scaling)
        if scaling is not None:
            g["sched_workers_wanted"].add_metric([], scaling.wanted)
            other: float | None = None
            for queue, slots in scaling.by_queue.items():
                if queue in named:
                    g["sched_queue_slots_wanted"].add_metric([queue], slots)
                else:
                    other = (other or 0) + slots
            if other is not None:
                g["sched_queue_slots_wanted"].add_metric([OTHER_QUEUES], other)

    def _log_worker_changes(self, workers: list[WorkerStatus]) -> None:
        alive = {w.worker_id for w in workers if w.alive}
        if self._alive is not None:
            listed = {w.worker_id: w for w in workers}
            for worker_id in sorted(alive - self._alive):
                log.info("worker %s is alive", worker_id)
            for worker_id in sorted(self._alive - alive):
                gone = listed.get(worker_id)
                if gone is None:
                    log.info("worker %s left", worker_id)
                else:
                    log.warning("worker %s missed its heartbeats (last seen %.0fs ago); its "
                                "runs are reclaimed when their leases expire", worker_id,
                                gone.heartbeat_age_s)
        self._alive = alive
