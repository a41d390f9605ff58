"""`sched namespace create`: make a namespace before anything is submitted to it
(`Client.create_namespace`), e.g. in a deploy script, with its shard count and payload limit.
Workers and scheduler nodes started before it wait for it and start once it exists.
`sched namespace set` / `show`: the settings that may change, how long finished work stays
in Redis (`Client.set_retention`, `Client.retention`) and whether a submit of a task no
worker has registered is refused (`Client.set_strict_tasks`, `Client.strict_tasks`)."""

from __future__ import annotations

import click
import msgspec

from scheduler.cli.inspect import echo_json
from scheduler.core.namespace import (
    MAX_PAYLOAD_LIMIT,
    MAX_RETAIN_MAX,
    MAX_SHARDS,
    RetentionSettings,
)


@click.group()
def namespace() -> None:
    """The namespace itself: shards and payload limit (fixed when it is created), how long
    finished work stays in Redis and whether unknown tasks are refused (`set`, `show`)."""


@namespace.command("create")
@click.option("--shards", type=click.IntRange(1, MAX_SHARDS), default=None,
              help="Shard count (fixed for good): 2 by default on one Redis, 8 on a Cluster.")
@click.option("--max-payload-bytes", type=click.IntRange(1, MAX_PAYLOAD_LIMIT), default=None,
              help="Largest payload or result the namespace takes (1 MiB by default).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def create(obj: dict[str, str], shards: int | None, max_payload_bytes: int | None,
           as_json: bool) -> None:
    """Create the namespace now, as its first submit would. Nothing changes when it exists
    with these settings; other settings are an error that names both."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"], shards=shards) as client:
        count = client.create_namespace(max_payload_bytes=max_payload_bytes)
        limit = client.max_payload_bytes
    if as_json:
        echo_json({"namespace": obj["namespace"], "shards": count, "max_payload_bytes": limit})
        return
    click.echo(f"namespace {obj['namespace']}: {count} shards, payloads up to {limit:,} bytes")


@namespace.command("set")
@click.option("--retention", default=None, metavar="DURATION",
              help="Finished work leaves Redis this long after it finished (90s, 15m, 1h, "
                   "7d; 1h by default).")
@click.option("--retain-max", type=click.IntRange(1, MAX_RETAIN_MAX), default=None,
              help="...or once this many finished slots are younger (500,000 by default), "
                   "whichever comes first.")
@click.option("--dead-retention", default=None, metavar="DURATION",
              help="Dead-lettered slots leave this long after they died (7d by default).")
@click.option("--strict-tasks/--no-strict-tasks", default=None,
              help="Refuse a submit of a task no worker has registered (`sched tasks`), "
                   "instead of warning (off by default).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def set_(obj: dict[str, str], retention: str | None, retain_max: int | None,
         dead_retention: str | None, strict_tasks: bool | None, as_json: bool) -> None:
    """Change how long the namespace keeps finished work in Redis, and whether it refuses
    unknown tasks. Running scheduler nodes apply retention within about a second, clients
    strictness within their clock's re-sync (5 s); options not given keep their value."""
    from scheduler import Client

    if (retention is None and retain_max is None and dead_retention is None
            and strict_tasks is None):
        raise click.UsageError("give at least one of --retention, --retain-max, "
                               "--dead-retention, --strict-tasks / --no-strict-tasks (see "
                               "`sched namespace show`)")
    with Client(obj["redis_url"], obj["namespace"]) as client:
        if retention is None and retain_max is None and dead_retention is None:
            settings = client.retention()
        else:
            settings = client.set_retention(retention, retain_max, dead_retention)
        strict = (client.strict_tasks() if strict_tasks is None
                  else client.set_strict_tasks(strict_tasks))
    _print(obj["namespace"], settings, strict, as_json)


@namespace.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(obj: dict[str, str], as_json: bool) -> None:
    """The namespace's settings: how long finished work stays in Redis, and whether a
    submit of a task no worker has registered is refused."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        settings = client.retention()
        strict = client.strict_tasks()
    _print(obj["namespace"], settings, strict, as_json)


def _print(name: str, settings: RetentionSettings, strict: bool, as_json: bool) -> None:
    if as_json:
        echo_json({"namespace": name, **msgspec.structs.asdict(settings),
                   "strict_tasks": strict})
        return
    click.echo(f"namespace {name}: finished work kept {settings.retention_s:g} s or the last "
               f"{settings.retain_max:,} finished slots, whichever is fewer; dead letters "
               f"kept {settings.dead_retention_s:g} s; a task no worker registered is "
               f"{'refused' if strict else 'warned about'} (strict_tasks "
               f"{'on' if strict else 'off'})")
