"""Outbox commands: `sched outbox relay` and `sched outbox status` (the outbox's schema is
made by `sched db upgrade --outbox`, scheduler/cli/history.py)."""

from __future__ import annotations

import faulthandler
import signal
from typing import Any

import click

from scheduler.cli.logs import log_options, setup_logging
from scheduler.cli.options import bounded, history_source
from scheduler.cli.run import metrics_host_option, metrics_port_option
from scheduler.core.bounds import RELAY_BOUNDS

DSN_HELP = ("The application's database, where the outbox is, e.g. postgresql://user@host/db "
            "(env SCHED_POSTGRES_DSN).")


def schema_option(fn: Any) -> Any:
    return click.option("--outbox-schema", "schema", envvar="SCHED_OUTBOX_SCHEMA",
                        default="scheduler", show_default=True,
                        help="The schema holding the outbox tables (env "
                             "SCHED_OUTBOX_SCHEMA).")(fn)


def outbox_dsn(postgres_dsn: str | None) -> str:
    from scheduler.core.errors import ConfigError

    if postgres_dsn is None:
        raise ConfigError("the outbox is in Postgres: give --postgres-dsn (or "
                          "SCHED_POSTGRES_DSN)")
    return history_source(postgres_dsn, "")


@click.group()
def outbox() -> None:
    """The transactional outbox: jobs submitted in the application's Postgres transactions."""


@outbox.command()
@click.option("--postgres-dsn", envvar="SCHED_POSTGRES_DSN", default=None, help=DSN_HELP)
@schema_option
@click.option("--batch", type=bounded(RELAY_BOUNDS, "batch", integer=True), default=1000,
              show_default=True,
              help="Most rows per transaction.")
@click.option("--poll", "poll_s", type=bounded(RELAY_BOUNDS, "poll_s", low=0.01), default=1.0,
              show_default=True,
              help="Seconds between looks at the outbox when no NOTIFY wakes the relay.")
@click.option("--durability", type=click.Choice(["primary", "replicated", "fsynced"]),
              default=None, help="When Redis counts a batch as written (the SDK's "
                                 "durability=); default primary.")
@metrics_port_option
@metrics_host_option
@log_options
@click.pass_obj
def relay(obj: dict[str, str], postgres_dsn: str | None, schema: str, batch: int,
          poll_s: float, durability: str | None, metrics_port: int | None, metrics_host: str,
          log_level: str, log_format: str) -> None:
    """Move committed outbox rows into Redis until SIGTERM/SIGINT (several may run)."""
    from scheduler import Client
    from scheduler.cli.run import start_metrics
    from scheduler.outbox.relay import OutboxRelay, RelayConfig

    client = Client(obj["redis_url"], obj["namespace"])  # a bad namespace: refused first
    try:
        dsn = outbox_dsn(postgres_dsn)
        config = RelayConfig(batch=batch, poll_s=poll_s, durability=durability)
    except BaseException:
        client.close()
        raise
    setup_logging(log_level, log_format)
    service = OutboxRelay(client, dsn, schema=schema, config=config)
    try:
        service.lag_or_refuse()  # a missing outbox or database: one line, at once
        start_metrics(metrics_port, host=metrics_host)
        # kill -USR1 shows where it waits, as the other services' (sched worker's) does.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: service.stop())
        service.run()
    finally:
        service.close()
        client.close()


@outbox.command("status")
@click.option("--postgres-dsn", envvar="SCHED_POSTGRES_DSN", default=None,
              help=DSN_HELP + " Without it: what the namespace's relays last reported.")
@schema_option
@click.pass_obj
def outbox_status(obj: dict[str, str], postgres_dsn: str | None, schema: str) -> None:
    """Rows waiting for a relay, the oldest one's age, and rows Redis refused."""
    if postgres_dsn is None:
        from scheduler import Client

        with Client(obj["redis_url"], obj["namespace"]) as client:
            box = client.status().outbox
        if box is None:
            click.echo(f"no outbox relay has reported in namespace {obj['namespace']!r}")
        else:
            click.echo(f"outbox: {box.rows} row(s) waiting, oldest {box.oldest_age_s:.3f} s "
                       f"(a relay reported it {box.reported_age_s:.1f} s ago)")
        return
    from scheduler.outbox.rows import connect, served, status

    with connect(outbox_dsn(postgres_dsn)) as conn:
        waiting, age, rejected = status(conn, schema)
        namespace = served(conn, schema)
    click.echo(f"outbox {schema}: {waiting} row(s) waiting, oldest {age:.3f} s; "
               f"{rejected} rejected; " + (f"serves namespace {namespace!r}" if namespace
                                           else "no relay has run yet"))
