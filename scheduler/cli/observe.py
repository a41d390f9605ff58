"""`sched status` and `sched workers`: the namespace at a glance, read through the SDK
(`Client.status()`, `Client.workers()`); this module only formats."""

from __future__ import annotations

import time
from typing import Any

import click
import msgspec

from scheduler.cli.inspect import echo_json, printable, table, when
from scheduler.cli.options import Finite, scaling_options
from scheduler.core.models import MAX_COUNT, MAX_SECONDS
from scheduler.observe.records import group_supervisors

UNHEALTHY = 3  # exit code when the namespace is unhealthy (1 is an error, 2 a usage error)


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _rate(per_s: float) -> str:
    return f"{per_s:,.1f}"


def render(s: Any, problems: list[str]) -> None:
    """DEPTH: entries no worker has read yet; PENDING: read and not finished; LAG: how long
    the oldest unread entry has waited; rates: over each worker's last heartbeat interval."""
    from scheduler.observe.capacity import in_words

    click.echo(f"namespace {s.namespace}  {s.shards} shards  at {when(s.now_ms)}")
    if not s.shards:
        click.echo(s.not_created())
    click.echo("")
    table([[q.queue, f"{q.depth:,}", f"{q.pending:,}", _age(q.oldest_ready_age_s),
            _rate(q.succeeded_per_s), _rate(q.failed_per_s)] for q in s.queues],
          ["QUEUE", "DEPTH", "PENDING", "LAG", "OK/S", "FAILED/S"])
    click.echo("")
    late = f", oldest {_age(s.oldest_overdue_s)} late" if s.due_backlog else ""
    click.echo(f"due:          {s.due_slots:,} scheduled, {s.due_backlog:,} due now{late}")
    click.echo(f"dead letters: {s.dead_letter_size:,}")
    click.echo(f"schedules:    {s.schedules_behind:,} behind their objective")
    oldest = ("" if s.finished_oldest_age_s is None
              else f", the oldest finished {_age(s.finished_oldest_age_s)} ago")
    click.echo(f"finished:     {s.finished_kept:,} kept in Redis{oldest} (retention "
               f"{s.retention_s:g}s, at most {s.retain_max:,})")
    owners = sorted({d.owner for d in s.shard_details if d.owner})
    click.echo(printable(f"shard owners: {s.shards_owned}/{s.shards}"
                         + (f" ({', '.join(owners)[:100]})" if owners else "")))
    snap = ("not running" if s.snapshot_lag_s is None else f"{_age(s.snapshot_lag_s)} behind, "
            f"{sum(d.snapshot_backlog_events or 0 for d in s.shard_details):,} events")
    click.echo(f"snapshotter:  {snap}")
    if s.outbox is not None:
        box = s.outbox
        click.echo(f"outbox:       {box.rows:,} row(s) waiting"
                   + (f", the oldest {_age(box.oldest_age_s)}" if box.rows else "")
                   + f" (a relay said so {_age(box.reported_age_s)} ago)")
    if len(s.nodes) > 1:
        for n in s.nodes:
            durable = ("" if n.aof is None else f"  aof {'on' if n.aof else 'off'}, "
                       f"{n.replicas} replica(s)")
            click.echo(f"node {n.node}: {len(n.shards)} shard(s) "
                       f"{','.join(map(str, n.shards)) or '-'}{durable}")
    if s.orphans_recovered or s.orphans_waiting:
        last = (f", the last {_age(s.orphans_last_age_s)} ago"
                if s.orphans_last_age_s is not None else "")
        click.echo(f"orphans:      {s.orphans_recovered:,} stranded slot(s) repaired{last}; "
                   f"{s.orphans_waiting:,} waiting for their lease")
    click.echo("")
    render_workers(s.workers, s.workers_alive, s.workers_known,
                   None if s.scaling is None else in_words(s.scaling, s.queues))
    click.echo("")
    for w in s.warnings():
        click.echo(printable(f"WARNING: {w}"))
    if problems:
        for p in problems:
            click.echo(printable(f"UNHEALTHY: {p}"))
    else:
        click.echo("healthy")


def render_workers(workers: list[Any], alive: int, known: int, scaling: str | None = None) -> None:
    """With `scaling` (sched status): what the observed lag and throughput call for, in
    words (scheduler/observe/capacity.py, in_words)."""
    gone = f" ({known} known)" if known != alive else ""
    click.echo(f"workers: {alive} alive{gone}" + (f"; {scaling}" if scaling else ""))
    shown = [w for w in workers if w.alive] + [w for w in workers if not w.alive][:5]
    if not shown:
        return
    # Workers started on their own first; then each supervisor (`sched worker --processes
    # N`) on a line of its own, its children indented under it.
    rows: list[list[str] | str] = [_worker_row(w) for w in shown if w.supervisor is None]
    for s in group_supervisors(shown):
        rows.append(s.summary())
        rows += [_worker_row(w, "  ") for w in s.children]
    table(rows, ["WORKER", "STATE", "HEARTBEAT", "IN FLIGHT", "OK/S", "FAILED/S", "SUCCEEDED",
                 "FAILED", "QUEUES"])


def _worker_row(w: Any, indent: str = "") -> list[str]:
    return [indent + w.worker_id, _state(w), f"{_age(w.heartbeat_age_s)} ago",
            f"{w.inflight}/{w.concurrency}", _rate(w.succeeded_per_s), _rate(w.failed_per_s),
            f"{w.succeeded:,}", f"{w.failed:,}", ",".join(w.queues)]


def _state(w: Any) -> str:
    """alive, waiting (for its namespace to be created), or gone."""
    return ("waiting" if w.waiting else "alive") if w.alive else "gone"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for programs).")
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=Finite(min=0.2, max=MAX_SECONDS), default=2.0,
              help="Seconds between refreshes with --watch.")
@click.option("--max-lag", "max_lag_s", type=Finite(min=0, max=MAX_SECONDS), default=60.0,
              help="Unhealthy when a ready job, a due slot or the snapshotter waits longer "
                   "(seconds).")
@click.option("--max-dead-letter", type=click.IntRange(0, MAX_COUNT * 1000), default=None,
              help="Unhealthy when the dead-letter sets hold more slots.")
@scaling_options
@click.pass_obj
def status(obj: dict[str, str], as_json: bool, watch: bool, interval: float, max_lag_s: float,
           max_dead_letter: int | None, target_lag_s: float, target_utilisation: float) -> None:
    """Queues, backlog, dead letters, workers (and how many the load calls for) and shard
    owners at a glance. Exits 3 when unhealthy (no worker alive, or waits past --max-lag),
    for scripts; a namespace not created yet is healthy while a worker waits for it."""
    from scheduler import Client
    from scheduler.observe.capacity import ScalingTarget, plan

    target = ScalingTarget(target_lag_s=target_lag_s, utilisation=target_utilisation)
    problems: list[str] = []
    with Client(obj["redis_url"], obj["namespace"]) as client:
        try:
            while True:
                s = client.status()
                s.scaling = plan(s.queues, s.workers, target)
                problems = s.problems(max_lag_s=max_lag_s, max_dead_letter=max_dead_letter)
                if watch and not as_json:
                    click.clear()
                if as_json:
                    echo_json({"healthy": not problems, "problems": problems,
                               "warnings": s.warnings(), **msgspec.to_builtins(s)})
                else:
                    render(s, problems)
                if not watch:
                    break
                time.sleep(interval)
        except KeyboardInterrupt:
            pass  # --watch ends on Ctrl-C with the last status's exit code
    if problems:
        raise click.exceptions.Exit(UNHEALTHY)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def workers(obj: dict[str, str], as_json: bool) -> None:
    """Workers by last heartbeat: alive or gone, in flight, concurrency, rates; the children
    of a `sched worker --processes N` under a line for their supervisor (host, pid, children
    alive, restarts)."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        found = client.workers()
    if as_json:
        echo_json(found)
        return
    alive = sum(1 for w in found if w.alive)
    render_workers(found, alive, len(found))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def tasks(obj: dict[str, str], as_json: bool) -> None:
    """The task catalog: every task a worker has started with, its defaults (- where it
    declares none: a submit's own apply), its typed payload, when the last worker to start
    with it started, the live workers serving it now (VERSIONS: how many distinct sets of
    defaults they run; 2 or more while a deploy is mixed) and its runs per second."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        found = client.tasks()
        now = client.now_ms()
    if as_json:
        echo_json(found)
        return
    if not found:
        click.echo("no task yet: workers list theirs when they start")
        return

    def opt(value: object) -> str:
        return "-" if value is None else str(value)

    table([[t.task, opt(t.queue), opt(t.timeout), opt(t.retry and t.retry.max_attempts),
            opt(t.priority), opt(t.delivery), opt(t.payload_type), t.pool,
            f"{_age(max(0, now - t.seen_ms) / 1000)} ago", str(len(t.workers)),
            str(t.versions), f"{t.succeeded_per_s:g}", f"{t.failed_per_s:g}"] for t in found],
          ["TASK", "QUEUE", "TIMEOUT", "ATTEMPTS", "PRIORITY", "DELIVERY", "PAYLOAD", "POOL",
           "STARTED", "WORKERS", "VERSIONS", "OK/S", "FAILED/S"])
