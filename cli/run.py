"""Long-running commands: `sched worker` and `sched scheduler`."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import click

from scheduler.connection import async_redis
from scheduler.errors import ConfigError


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def load_app(spec: str) -> object:
    """`package.module:attribute` -> the Registry it names. The current directory is
    importable, as with uvicorn and celery."""
    from scheduler import Registry

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--app {spec!r}: expected MODULE:ATTRIBUTE, e.g. myapp.tasks:registry")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--app {spec!r}: cannot import {module_name!r} ({exc})") from None
    registry = getattr(module, attr, None)
    if not isinstance(registry, Registry):
        raise ConfigError(f"--app {spec!r}: {module_name}.{attr} is not a scheduler.Registry")
    return registry


def serve(make: Callable[[], Awaitable[None]], stop: Callable[[], None]) -> None:
    """Run a service on uvloop until SIGTERM/SIGINT, which call its stop()."""
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        await make()

    uvloop.run(main())


@click.command()
@click.option("--app", "app_spec", required=True, help="MODULE:ATTRIBUTE of your Registry.")
@click.option("--concurrency", type=click.IntRange(min=1), default=100,
              help="Most runs in flight at once.")
@click.option("--queues", default="default", help="Comma-separated queues to read.")
@click.option("--lease", "lease_s", type=float, envvar="SCHED_LEASE_SECONDS", default=30.0,
              help="Lease per claim in seconds, renewed every lease/3 (env SCHED_LEASE_SECONDS).")
@click.option("--grace", "grace_s", type=float, default=10.0,
              help="Seconds in-flight runs get to finish after SIGTERM before they are released.")
@click.option("--batch", type=click.IntRange(min=1), default=500, help="Most entries per read.")
@click.option("--log-level", default="info")
@click.pass_obj
def worker(obj: dict[str, str], app_spec: str, concurrency: int, queues: str, lease_s: float,
           grace_s: float, batch: int, log_level: str) -> None:
    """Run handlers for jobs in QUEUES."""
    from scheduler.worker import Worker, WorkerConfig

    registry = load_app(app_spec)
    config = WorkerConfig(concurrency=concurrency, lease_s=lease_s, grace_s=grace_s, batch=batch,
                          queues=tuple(q.strip() for q in queues.split(",") if q.strip()))
    _setup_logging(log_level)
    holder: list[Worker] = []

    async def make() -> None:
        client = async_redis(obj["redis_url"])
        w = Worker(client, registry, namespace=obj["namespace"], config=config)  # type: ignore[arg-type]
        holder.append(w)
        try:
            await w.run()
        finally:
            await client.aclose()

    serve(make, lambda: holder[0].stop() if holder else None)


@click.command()
@click.option("--lease", "lease_s", type=float, envvar="SCHED_LEASE_SECONDS", default=30.0,
              help="The workers' slot lease in seconds: pending entries idle this long are "
                   "reclaimed (env SCHED_LEASE_SECONDS; give workers the same).")
@click.option("--shard-lease", "shard_lease_s", type=float, default=5.0,
              help="Shard lease ttl in seconds: how soon others take a dead node's shards.")
@click.option("--reclaim-interval", "reclaim_s", type=float, default=1.0,
              help="Seconds between reclaim passes.")
@click.option("--lookahead", "lookahead_s", type=float, default=3.0,
              help="Seconds ahead of their fire time that cron slots are created.")
@click.option("--misfire-grace", "misfire_grace_s", type=float, default=5.0,
              help="Seconds late after which a cron occurrence counts as missed (catch-up).")
@click.option("--log-level", default="info")
@click.pass_obj
def scheduler(obj: dict[str, str], lease_s: float, shard_lease_s: float, reclaim_s: float,
              lookahead_s: float, misfire_grace_s: float, log_level: str) -> None:
    """Run a scheduler node: own a share of the shards, create cron slots, promote due
    slots, reclaim expired leases. Run as many as you like; they share the shards."""
    from scheduler.node import NodeConfig, SchedulerNode

    config = NodeConfig(lease_s=lease_s, shard_lease_s=shard_lease_s,
                        reclaim_interval_s=reclaim_s, lookahead_s=lookahead_s,
                        misfire_grace_s=misfire_grace_s)
    _setup_logging(log_level)
    holder: list[SchedulerNode] = []

    async def make() -> None:
        client = async_redis(obj["redis_url"])
        node = SchedulerNode(client, namespace=obj["namespace"], config=config)
        holder.append(node)
        try:
            await node.run()
        finally:
            await client.aclose()

    serve(make, lambda: holder[0].stop() if holder else None)
