"""History commands: `sched db upgrade`, `sched snapshotter`, `sched history`, `sched recover`.

The history store is Postgres when `--postgres-dsn` / SCHED_POSTGRES_DSN is given, else the
embedded SQLite file (`--history-file` / SCHED_HISTORY_FILE).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from scheduler.cli.inspect import echo_json, status_text, table, when
from scheduler.cli.logs import log_options, setup_logging
from scheduler.cli.options import bounded, history_source, store_options
from scheduler.cli.outbox import outbox_dsn, schema_option
from scheduler.cli.run import metrics_host_option, metrics_port_option
from scheduler.core.bounds import RETENTION_BOUNDS, SNAPSHOTTER_BOUNDS
from scheduler.core.errors import ValidationError
from scheduler.core.models import MAX_COUNT
from scheduler.core.states import SlotStatus


def parse_time(field: str, value: str | None) -> int | None:
    """ISO 8601 (UTC when no offset), or ms since the epoch."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(field, f"{value!r} is not an ISO 8601 time or ms since the "
                                     f"epoch") from None
    return int((t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp() * 1000)


@click.group()
def db() -> None:
    """The history store's schema."""


@db.command("upgrade")
@store_options
@click.option("--outbox", is_flag=True,
              help="Upgrade the outbox's schema instead, in the application's database "
                   "(--postgres-dsn): the docs' \"Transactional outbox\" guide.")
@schema_option
def db_upgrade(postgres_dsn: str | None, history_file: str, outbox: bool, schema: str) -> None:
    """Apply the schema migrations not applied yet (safe to repeat)."""
    from scheduler.history.store import open_store

    if outbox:
        from scheduler.outbox.rows import connect, upgrade

        with connect(outbox_dsn(postgres_dsn)) as conn:
            version = upgrade(conn, schema)
        click.echo(f"outbox schema {schema!r} at version {version}")
        return

    store = open_store(history_source(postgres_dsn, history_file))
    try:
        version = store.upgrade()
    finally:
        store.close()
    click.echo(f"history schema at version {version} ({store.dialect})")


@click.command()
@store_options
@click.option("--read-count", type=bounded(SNAPSHOTTER_BOUNDS, "read_count", integer=True),
              default=100,
              help="Most events entries per shard per batch (fewer when entries are big: a "
                   "batch holds about 20,000 slots and jobs).")
@click.option("--settle", "settle_s", type=bounded(SNAPSHOTTER_BOUNDS, "settle_s"), default=0.5,
              help="Seconds to wait after a batch that caught up with the events: slots "
                   "that finish meanwhile are written once, not once per step.")
@click.option("--defer", "defer_s", type=bounded(SNAPSHOTTER_BOUNDS, "defer_s"), default=2.0,
              help="Seconds a slot just submitted and due within that long may wait for its "
                   "next event before its row is written (then it is written once, not "
                   "twice); 0 writes every slot at once.")
@click.option("--claim-idle", "claim_idle_s", type=bounded(SNAPSHOTTER_BOUNDS, "claim_idle_s"),
              default=30.0,
              help="Seconds after which a dead snapshotter's pending events are taken over.")
@click.option("--retention", "retention_s", type=bounded(RETENTION_BOUNDS, "retention_s"),
              default=3600.0,
              help="Seconds a finished slot stays in Redis once it is in the history store.")
@click.option("--keep-redis", is_flag=True, help="Never remove finished slots from Redis.")
@click.option("--history-days", type=bounded(RETENTION_BOUNDS, "history_days", integer=True),
              default=30,
              help="Days of history kept in the store.")
@metrics_port_option
@metrics_host_option
@log_options
@click.pass_obj
def snapshotter(obj: dict[str, str], postgres_dsn: str | None, history_file: str,
                read_count: int, settle_s: float, defer_s: float, claim_idle_s: float,
                retention_s: float, keep_redis: bool,
                history_days: int, metrics_port: int | None, metrics_host: str, log_level: str,
                log_format: str) -> None:
    """Copy slot and job state into the history store, and apply retention."""
    from scheduler.cli.run import serve, start_metrics
    from scheduler.history.intake import SnapshotterConfig
    from scheduler.history.retention import Retention, RetentionConfig
    from scheduler.history.snapshotter import Snapshotter
    from scheduler.history.store import open_store
    from scheduler.redis.clients import process_redis

    source = history_source(postgres_dsn, history_file)
    store = open_store(source)
    store.check()
    # Retention gets a connection of its own: the two loops write from different threads.
    retention_store = open_store(source)
    snap_config = SnapshotterConfig(read_count=read_count, settle_s=settle_s,
                                    defer_s=defer_s, claim_idle_s=claim_idle_s,
                                    retention_s=None if keep_redis else retention_s)
    ret_config = RetentionConfig(retention_s=retention_s, history_days=history_days)
    setup_logging(log_level, log_format)
    holder: list[Any] = []

    async def make() -> None:
        import asyncio

        start_metrics(metrics_port, host=metrics_host)
        client = process_redis(obj["redis_url"], lease_s=30.0)
        # Shutdown: both loops finish their current pass (the snapshotter acks only what it
        # committed), then the connections close (also when a bad namespace stops the start).
        try:
            snap = Snapshotter(client, store, namespace=obj["namespace"], config=snap_config)
            retention = Retention(client, namespace=obj["namespace"], store=retention_store,
                                  config=ret_config)
            holder.extend([snap, retention])
            loops = [asyncio.create_task(snap.run())]
            if not keep_redis:
                loops.append(asyncio.create_task(retention.run()))
            await asyncio.gather(*loops)
        finally:
            await client.aclose()
            store.close()
            retention_store.close()

    def stop() -> None:
        for service in holder:
            service.stop()

    serve(make, stop)


@click.command()
@store_options
@click.option("--job", "job_id", default=None, help="Only this job's slots.")
@click.option("--status", type=click.Choice([s.value for s in SlotStatus]), default=None,
              help="Only slots in this status.")
@click.option("--since", default=None, help="Fire time from (ISO 8601 UTC, or ms).")
@click.option("--until", default=None, help="Fire time before (ISO 8601 UTC, or ms).")
@click.option("--limit", type=click.IntRange(1, MAX_COUNT), default=50)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def history(obj: dict[str, str], postgres_dsn: str | None, history_file: str,
            job_id: str | None, status: str | None, since: str | None, until: str | None,
            limit: int, as_json: bool) -> None:
    """Slots from the history store, newest fire time first."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"],
                history=history_source(postgres_dsn, history_file, read_only=True)) as client:
        slots = client.history(job_id=job_id, status=status, since=parse_time("since", since),
                               until=parse_time("until", until), limit=limit)
    if as_json:
        echo_json(slots)
        return
    table([[s.slot_id, s.task, status_text(s), str(s.attempt), when(s.fire_ms),
            (s.attempts[-1].error or "")[:60] if s.attempts else ""] for s in slots],
          ["slot", "task", "status", "attempts", "fire time", "last error"])


@click.command()
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def recover(obj: dict[str, str], postgres_dsn: str | None, history_file: str,
            as_json: bool) -> None:
    """Rebuild a lost Redis from the history store: job definitions, cron watermarks, and
    every unfinished slot, re-dispatched. Safe to run twice."""
    from scheduler.history.recovery import recover as run_recover
    from scheduler.history.store import open_store
    from scheduler.redis.clients import sync_redis

    store = open_store(history_source(postgres_dsn, history_file))
    client = sync_redis(obj["redis_url"])
    try:
        store.check()
        report = run_recover(client, store, obj["namespace"])
    finally:
        store.close()
        client.close()
    if as_json:
        echo_json(report)
        return
    limit = (f", payloads up to {report.max_payload_bytes:,} bytes"
             if report.max_payload_bytes else "")
    click.echo(f"recovered namespace {obj['namespace']!r} ({report.shards} shards{limit}): "
               f"{report.jobs_restored} jobs, {report.cron_watermarks_restored} cron watermarks, "
               f"{report.slots_scheduled} slots scheduled, {report.slots_dispatched} dispatched, "
               f"{report.slots_ended} ended (lost/cancelled)")
    if report.slots_from_jobs or report.at_most_once_unknown:
        click.echo(f"  {report.slots_from_jobs} slots made again from jobs whose slot had not "
                   f"reached the store; {report.at_most_once_unknown} at_most_once jobs of that "
                   f"kind not re-run (they may have run)")
    if report.newest_known_ms:
        when = datetime.fromtimestamp(report.newest_known_ms / 1000, UTC).isoformat(
            timespec="milliseconds")
        click.echo(f"  the store knew jobs submitted up to {when}: jobs acknowledged after "
                   f"that, up to the loss, could not be restored")
