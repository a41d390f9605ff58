"""`sched dev`: a scheduler node, a worker and the exporter in one process, for a laptop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import click

from scheduler.cli.logs import log_options, setup_logging
from scheduler.cli.options import bounded, history_source, store_options
from scheduler.cli.run import apply_declared, load_app, metrics_host_option, serve
from scheduler.core.bounds import WORKER_BOUNDS
from scheduler.core.masking import masked
from scheduler.redis.clients import process_redis, sync_redis

log = logging.getLogger("scheduler.dev")


def _write_atomically(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


@click.command()
@click.option("--app", "app_spec", default="scheduler.dev.examples.tasks:registry",
              help="MODULE:ATTRIBUTE of your Registry.")
@click.option("--concurrency", type=bounded(WORKER_BOUNDS, "concurrency", integer=True),
              default=100)
@click.option("--queues", default="default", help="Comma-separated queues to read.")
@click.option("--lease", "lease_s", type=bounded(WORKER_BOUNDS, "lease_s"), default=6.0,
              help="Lease per claim in seconds; heartbeats (and the rates `sched status` "
                   "shows) refresh every lease/3.")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=9464,
              help="Port for /metrics (this process's and the namespace's) and /healthz; "
                   "a free one is used when it is taken; 0 always picks a free one.")
@metrics_host_option
@click.option("--ready-file", type=click.Path(dir_okay=False), default=None,
              help="Once running, write {redis_url, metrics_url, embedded_redis} here as JSON "
                   "(for scripts).")
@click.option("--web-port", type=click.IntRange(min=0, max=65535), default=8080,
              help="Port of the web console on 127.0.0.1 (a free one when it is taken; 0 "
                   "always picks one); needs the web extra.")
@click.option("--no-web", is_flag=True, help="Serve no web console.")
@click.option("--no-history", is_flag=True,
              help="Run no snapshotter (by default history goes to --history-file, or to "
                   "Postgres with --postgres-dsn).")
@store_options
@log_options
@click.pass_obj
def dev(obj: dict[str, str], app_spec: str, concurrency: int, queues: str, lease_s: float,
        metrics_port: int, metrics_host: str, ready_file: str | None, web_port: int,
        no_web: bool,
        no_history: bool, postgres_dsn: str | None, history_file: str, log_level: str,
        log_format: str) -> None:
    """Run everything in one process: a scheduler node, a worker, the snapshotter (history in
    an embedded SQLite file unless --postgres-dsn), the exporter and the web console, against
    the Redis at
    --redis-url, or a private redis-server (temp dir, free port) when none answers there.
    Ctrl-C stops it all."""
    from prometheus_client import REGISTRY

    from scheduler.core.keys import check_name
    from scheduler.dev.embedded import EmbeddedRedis, answers
    from scheduler.history.store import open_store
    from scheduler.observe.metrics import NamespaceCollector
    from scheduler.worker.worker import WorkerConfig

    check_name("namespace", obj["namespace"])  # before anything starts that it would leave
    registry = load_app(app_spec)
    config = WorkerConfig(concurrency=concurrency, lease_s=lease_s,
                          queues=tuple(q.strip() for q in queues.split(",") if q.strip()))
    setup_logging(log_level, log_format)
    store = None if no_history else open_store(history_source(postgres_dsn, history_file))
    if store is not None:
        store.check()
    namespace, url = obj["namespace"], obj["redis_url"]
    embedded = None
    if not answers(url):
        embedded = EmbeddedRedis().start()
        log.info("no Redis answers at %s: started a private redis-server at %s (no "
                 "persistence; it stops with sched dev)", masked(url), embedded.url)
        url = embedded.url
    collector_client = sync_redis(url)
    collector = NamespaceCollector(collector_client, namespace)
    REGISTRY.register(collector)
    server = None
    try:
        apply_declared(url, namespace, app_spec, registry)
        server = _metrics_server(REGISTRY, metrics_host, metrics_port)
        metrics_url = _metrics_url(metrics_host, server.port)
        web = None if no_web else _web(web_port, history_source(
            postgres_dsn, history_file, read_only=True) if store is not None else None)
        running = (f"a scheduler node, a worker ({app_spec}, concurrency {concurrency}, "
                   f"queues {','.join(config.queues)}), the exporter"
                   + ("" if store is None else ", the snapshotter")
                   + ("" if web is None else ", the web console"))
        _banner(namespace, url, embedded is not None, running,
                None if store is None else postgres_dsn or history_file, metrics_url,
                web[0] if web else None)
        holder: list[Any] = []

        def started() -> None:
            if ready_file:
                _write_atomically(ready_file, {"redis_url": url, "metrics_url": metrics_url,
                                               "namespace": namespace,
                                               "web_url": web[0] if web else None,
                                               "embedded_redis": embedded is not None})

        async def make() -> None:
            await _run_services(url, lease_s, registry, namespace, config, store, holder,
                                started, web)

        def stop() -> None:
            for service in holder:
                service.stop()

        serve(make, stop)
    finally:
        if server is not None:
            server.stop()
        REGISTRY.unregister(collector)
        collector_client.close()
        if store is not None:
            store.close()
        if embedded is not None:
            embedded.stop()
        if ready_file and os.path.exists(ready_file):
            os.remove(ready_file)
        log.info("sched dev stopped")


def _metrics_server(registry: Any, host: str, port: int) -> Any:
    """On `port`, or on any free port when it is taken (a second `sched dev`)."""
    from scheduler.core.errors import ConfigError
    from scheduler.observe.exporter import MetricsServer

    try:
        try:
            return MetricsServer(registry, host=host, port=port).start()
        except OSError:
            return MetricsServer(registry, host=host, port=0).start()
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host} ({exc.strerror}); choose another "
                          f"--metrics-host") from None


def _metrics_url(host: str, port: int) -> str:
    """Where to read the metrics from this host: loopback when they listen everywhere."""
    if host in ("0.0.0.0", "::"):  # nosec B104 # every interface: loopback is one
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


def _web(port: int, history: str | None) -> tuple[str, int, str | None] | None:
    """(url, port, history source) of the console to serve, or None without the web extra."""
    import socket

    try:
        import uvicorn  # noqa: F401

        import scheduler.web  # noqa: F401
    except ImportError:
        log.info("no web console: install the web extra (pip install 'redis-sched[web]')")
        return None
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/", port, history


class _WebService:
    """The console as one of dev's services: uvicorn in this event loop."""

    def __init__(self, url: str, namespace: str, web: tuple[str, int, str | None]) -> None:
        from scheduler import AsyncClient
        from scheduler.cli.web import console_server
        from scheduler.web import create_app

        self.client = AsyncClient(url, namespace, history=web[2])
        self.server = console_server(create_app(self.client), "127.0.0.1", web[1])
        self.server.install_signal_handlers = lambda: None

    async def run(self) -> None:
        try:
            await self.server.serve()
        finally:
            await self.client.aclose()

    def stop(self) -> None:
        self.server.should_exit = True


async def _run_services(url: str, lease_s: float, registry: Any, namespace: str,
                        config: Any, store: Any, holder: list[Any],
                        started: Any, web: tuple[str, int, str | None] | None = None) -> None:
    """A node, a worker and (with a store) the snapshotter on one connection pool, until
    one of them ends or each is stopped (through `holder`)."""
    from scheduler.history.intake import SnapshotterConfig
    from scheduler.history.snapshotter import Snapshotter
    from scheduler.node.node import NodeConfig, SchedulerNode
    from scheduler.worker.worker import Worker

    client = process_redis(url, max(lease_s, 1.0))
    worker = Worker(client, registry, namespace=namespace,
                    config=config)
    node = SchedulerNode(client, namespace=namespace,
                         config=NodeConfig(lease_s=max(lease_s, 1.0)))
    holder.extend([worker, node])
    tasks = [asyncio.create_task(worker.run(), name="worker"),
             asyncio.create_task(node.run(), name="scheduler-node")]
    if store is not None:
        # A laptop keeps finished slots in Redis too (no retention loop here).
        snapshotter = Snapshotter(client, store, namespace=namespace,
                                  config=SnapshotterConfig(retention_s=None))
        holder.append(snapshotter)
        tasks.append(asyncio.create_task(snapshotter.run(), name="snapshotter"))
    if web is not None:
        console = _WebService(url, namespace, web)
        holder.append(console)
        tasks.append(asyncio.create_task(console.run(), name="web"))
    # Ready once the worker's tasks are in the catalog, so a submit right after the ready
    # file appears is not told its task is unknown (or once something ended: the wait
    # below says what).
    published = asyncio.create_task(worker.published.wait())
    await asyncio.wait([published, *tasks], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    published.cancel()
    started()
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for service in holder:  # one ended (an error, or stop()): stop the other
            service.stop()
        try:
            await asyncio.gather(*tasks)
        finally:
            await client.aclose()


def _banner(namespace: str, url: str, embedded: bool, running: str, history: str | None,
            metrics_url: str, web: str | None = None) -> None:
    """What runs where, and commands to try; no password is printed (the commands name the
    URL with *** where it has one: put it back, or set SCHED_REDIS_URL)."""
    url, history = masked(url, url), history and masked(history, history)
    cli = f"sched --redis-url {url} --namespace {namespace}"
    click.echo(f"sched dev: namespace {namespace!r} on {url}"
               + (" (private redis-server)" if embedded else ""))
    click.echo(f"  running:  {running}")
    if history is not None:
        click.echo(f"  history:  {history}  ({cli} history)")
    if web:
        click.echo(f"  console:  {web}")
    click.echo(f"  metrics:  {metrics_url}  (health: "
               f"{metrics_url.removesuffix('/metrics')}/healthz)")
    click.echo(f"  status:   {cli} status [--watch]")
    click.echo(f"  submit:   {cli} submit demo.hello --payload '{{\"name\": \"you\"}}'")
    click.echo("  Ctrl-C stops everything.", nl=True)
