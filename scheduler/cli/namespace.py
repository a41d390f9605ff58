"""`sched namespace create`: make a namespace before anything is submitted to it
(`Client.create_namespace`), e.g. in a deploy script, with its shard count and payload limit.
Workers and scheduler nodes started before it wait for it and start once it exists."""

from __future__ import annotations

import click

from scheduler.cli.inspect import echo_json
from scheduler.core.namespace import MAX_PAYLOAD_LIMIT, MAX_SHARDS


@click.group()
def namespace() -> None:
    """The namespace itself (its settings are fixed when it is created)."""


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
