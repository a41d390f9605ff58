"""Long-running commands: `sched worker`, `sched scheduler` and `sched exporter`."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

import scheduler.redis.transport as transport
from scheduler.cli.logs import log_options, setup_logging
from scheduler.cli.options import autoscale_option, bounded, scaling_options
from scheduler.core.bounds import MAX_PROCESSES, NODE_BOUNDS, WORKER_BOUNDS
from scheduler.core.errors import ConfigError, RedisUnavailable
from scheduler.core.models import MAX_COUNT
from scheduler.core.objective import DEFAULT_OBJECTIVE_WINDOW_S, DEFAULT_ON_TIME_TARGET
from scheduler.redis.clients import process_redis, sync_redis
from scheduler.redis.failures import REDIS_ERRORS

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from scheduler.observe.exporter import MetricsServer

log = logging.getLogger("scheduler.cli")

PROCESS_POOL_ENV = "SCHED_PROCESS_POOL"

METRICS_HOST = "127.0.0.1"  # observe/exporter.py's, without importing prometheus_client

metrics_port_option = click.option(
    "--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
    envvar="SCHED_METRICS_PORT",
    help="Serve this process's metrics on http://METRICS_HOST:PORT/metrics (and /healthz); "
         "0 picks a free port (env SCHED_METRICS_PORT).")
metrics_host_option = click.option(
    "--metrics-host", default=METRICS_HOST, envvar="SCHED_METRICS_HOST", show_default=True,
    help="Address --metrics-port listens on: loopback unless given; 0.0.0.0 (every "
         "interface) or one address for a Prometheus on another host or container (env "
         "SCHED_METRICS_HOST).")


def start_metrics(port: int | None, registry: CollectorRegistry | None = None, *,
                  host: str = METRICS_HOST) -> MetricsServer | None:
    """Serve a registry (the process's by default) from a daemon thread, for the life of the
    process, when --metrics-port is given; a busy port or an address this host does not
    have is a one-line error."""
    if port is None:
        return None
    from prometheus_client import REGISTRY

    from scheduler.observe.exporter import MetricsServer

    try:
        server = MetricsServer(registry or REGISTRY, host=host, port=port).start()
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port} ({exc.strerror}); "
                          f"choose another --metrics-port or --metrics-host") from None
    log.info("metrics on http://%s:%d/metrics", host, server.port)
    return server


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
    except Exception as exc:
        # The app's own code failed as it was imported (a misspelt handle is a NameError
        # there): one line naming where, so the service stops at its start, not later.
        raise ConfigError(f"--app {spec!r}: importing {module_name!r} failed at "
                          f"{_where(exc)}: {type(exc).__name__}: {exc}") from None
    registry = getattr(module, attr, None)
    if not isinstance(registry, Registry):
        raise ConfigError(f"--app {spec!r}: {module_name}.{attr} is not a scheduler.Registry")
    return registry


def _where(exc: BaseException) -> str:
    """`file line N` of the innermost frame of the traceback in the app's own code (not
    Python's import machinery, not this package: a bad option given to `registry.schedule`
    is reported at the app's line that gave it)."""
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(("<", ours))]
    if not frames:
        return "its import"
    return f"{os.path.basename(frames[-1].filename)} line {frames[-1].lineno}"


def apply_declared(redis_url: str, namespace: str, app_spec: str, registry: Any,
                   always_log: bool = False) -> None:
    """Apply the app's declared schedules (Registry.schedule) to the namespace before its
    services start, through the SDK (Client.declare), and log what changed (a start that
    changed nothing and declares nothing logs only with `always_log`). Redis not
    answering is a warning: the service starts (and waits for Redis) as it would without
    them, and its next start applies them."""
    from scheduler import Client

    with Client(redis_url, namespace) as client:
        try:
            done = client.declare(app_spec, registry.schedules.values())
        except (RedisUnavailable, *REDIS_ERRORS) as exc:
            log.warning("declared schedules not applied: Redis did not answer (%s)", exc)
            return
    if done.declared or done.removed or always_log:
        log.info("%s%s", done.line(),
                 f" ({', '.join(done.removed)})" if done.removed else "")


# The collector's thresholds in the service processes (gc.set_threshold). At Python's own
# (2,000 net new containers) the young collection runs every few hundred jobs and walks the
# batch in flight, which then survives into the older generations and is walked again, a
# sizeable share of the snapshotter's and the worker's CPU (bench sustained). At 50,000 a
# batch's objects are mostly freed before a collection sees them.
GC_THRESHOLD = (50_000, 20, 20)


def serve(make: Callable[[], Awaitable[None]], stop: Callable[[], None]) -> None:
    """Run a service on uvloop until SIGTERM/SIGINT, which call its stop(). SIGUSR1 logs
    where every task of the process is waiting (what a stuck process is stuck on)."""
    import gc

    import uvloop

    gc.set_threshold(*GC_THRESHOLD)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        await make()

    uvloop.run(main())


def dump_tasks() -> None:
    tasks = asyncio.all_tasks()
    lines = [f"{len(tasks)} task(s):"]
    for task in sorted(tasks, key=lambda t: t.get_name()):
        lines.append(f"  {task.get_name()}: {' -> '.join(_awaiting(task.get_coro()))}")
    log.warning("\n".join(lines))


def _awaiting(coro: object) -> list[str]:
    """Where a coroutine waits: its frame, then what it awaits, down to the innermost."""
    out: list[str] = []
    while coro is not None and len(out) < 20:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            out.append(type(coro).__name__)
            break
        out.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} "
                   f"{frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out


class Processes(click.ParamType[int]):
    """--processes: a count of at least 1, or `auto` (one per core)."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        from scheduler.worker.supervisor import cores

        if isinstance(value, int):
            return value
        if str(value).strip().lower() == "auto":
            return min(cores(), MAX_PROCESSES)
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            self.fail(f"{value!r} is neither a count of at least 1 nor 'auto'", param, ctx)
        if n > MAX_PROCESSES:
            self.fail(f"{value} is more than {MAX_PROCESSES:,} worker processes; run several "
                      f"supervisors (one per machine) for more", param, ctx)
        return n


@click.command()
@click.option("--app", "app_spec", required=True, help="MODULE:ATTRIBUTE of your Registry.")
@click.option("--processes", type=Processes(), default=1,
              help="Worker processes: more than 1 makes this process their supervisor (it "
                   "restarts one that dies; SIGHUP replaces them one by one; --metrics-port "
                   "serves them all); `auto`: one per core.")
@click.option("--concurrency", type=bounded(WORKER_BOUNDS, "concurrency", integer=True),
              default=100, help="Most runs in flight at once.")
@click.option("--queues", default="default", help="Comma-separated queues to read.")
@click.option("--lease", "lease_s", type=bounded(WORKER_BOUNDS, "lease_s"),
              envvar="SCHED_LEASE_SECONDS", default=30.0,
              help="Lease per claim in seconds, renewed every lease/3 (env SCHED_LEASE_SECONDS).")
@click.option("--grace", "grace_s", type=bounded(WORKER_BOUNDS, "grace_s"), default=10.0,
              help="Seconds in-flight runs get to finish after SIGTERM before they are released.")
@click.option("--batch", type=bounded(WORKER_BOUNDS, "batch", integer=True), default=500,
              help="Most entries per read (a worker reads about what it can start soon, "
                   "at most this).")
@click.option("--pipelines", type=bounded(WORKER_BOUNDS, "pipelines", integer=True), default=2,
              help="Claim round trips in flight at once, of plain jobs and of keyed jobs each "
                   "(Redis claims one batch while the worker starts another's runs).")
@click.option("--claim-replicas", type=bounded(WORKER_BOUNDS, "claim_replicas", integer=True),
              default=0,
              help="Start an at_most_once run only once this many replicas have its claim "
                   "(WAIT); 0: do not wait.")
@click.option("--replica-timeout", type=bounded(WORKER_BOUNDS, "replica_timeout_s"), default=1.0,
              help="Seconds a claim waits for them; an at_most_once run they did not "
                   "confirm is not started (it ends lost).")
@click.option("--eager-start/--no-eager-start", default=True, show_default=True,
              envvar="SCHED_EAGER_START",
              help="Python 3.12+: run each handler up to its first await within the claim "
                   "that started it (one that never awaits is never scheduled: less CPU); "
                   "no effect on 3.11 (env SCHED_EAGER_START=0 for --no-eager-start).")
@click.option("--process-pool", type=bounded(WORKER_BOUNDS, "process_pool", integer=True),
              default=None,
              envvar=PROCESS_POOL_ENV,
              help="Child processes for the pool=\"process\" handlers (default: one per "
                   "core, or cores / N for each of --processes N); started only when the app "
                   "has such a task (env SCHED_PROCESS_POOL).")
@click.option("--max-tasks-per-child",
              type=bounded(WORKER_BOUNDS, "max_tasks_per_child", integer=True), default=0,
              help="Replace a process-pool child after this many runs (leaky libraries); "
                   "0: never.")
@autoscale_option
@click.option("--trace", is_flag=True, envvar="SCHED_OTEL",
              help="An OpenTelemetry span per run, to the global TracerProvider: configure it "
                   "in the --app module or run under opentelemetry-instrument (env "
                   "SCHED_OTEL=1; needs the otel extra).")
@metrics_port_option
@metrics_host_option
@log_options
@click.pass_obj
def worker(obj: dict[str, str], app_spec: str, processes: int, concurrency: int, queues: str,
           lease_s: float, grace_s: float, batch: int, pipelines: int, claim_replicas: int,
           replica_timeout: float, eager_start: bool, process_pool: int | None,
           max_tasks_per_child: int, autoscale: Any, trace: bool, metrics_port: int | None,
           metrics_host: str, log_level: str, log_format: str) -> None:
    """Run handlers for jobs in QUEUES."""
    from scheduler.worker.supervisor import SUPERVISOR_ENV, ChildLink
    from scheduler.worker.worker import SupervisorRef, Worker, WorkerConfig

    if autoscale is not None and click.get_current_context().get_parameter_source(
            "concurrency") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give --concurrency or --autoscale MIN:MAX, not both")
    config = WorkerConfig(concurrency=concurrency, lease_s=lease_s, grace_s=grace_s, batch=batch,
                          pipelines=pipelines, claim_replicas=claim_replicas,
                          replica_timeout_s=replica_timeout, autoscale=autoscale, tracing=trace,
                          eager_start=eager_start, process_pool=process_pool,
                          max_tasks_per_child=max_tasks_per_child,
                          queues=tuple(q.strip() for q in queues.split(",") if q.strip()))
    # Set by a supervisor (`--processes N`) for each child it starts.
    ref = os.environ.get(SUPERVISOR_ENV)
    supervisor = SupervisorRef.parse(ref, SUPERVISOR_ENV) if ref is not None else None
    link = ChildLink.from_env(supervisor, os.environ)
    if link is not None:
        link.die_with_parent()
    elif processes > 1:  # the children import the app, not their supervisor
        supervise(processes, grace_s, metrics_port, log_level, log_format, process_pool,
                  metrics_host)
        return
    registry = load_app(app_spec)
    setup_logging(log_level, log_format)
    apply_declared(obj["redis_url"], obj["namespace"], app_spec, registry)
    holder: list[Worker] = []

    async def make() -> None:
        # once SIGTERM is handled: a scrape may mean "it is up"
        start_metrics(metrics_port, host=metrics_host)
        client = process_redis(obj["redis_url"], lease_s)
        w = Worker(client, registry, namespace=obj["namespace"], config=config,  # type: ignore[arg-type]
                   supervisor=supervisor)
        holder.append(w)
        watch = None
        if link is not None:
            server = start_metrics(0, host="127.0.0.1") if link.serve_metrics else None
            link.up(server.port if server else None)
            watch = asyncio.create_task(link.watch_parent(w.stop), name="watch-supervisor")
        try:
            await w.run()
        finally:
            if watch is not None:
                watch.cancel()
            await client.aclose()

    serve(make, lambda: holder[0].stop() if holder else None)


def supervise(processes: int, grace_s: float, metrics_port: int | None, log_level: str,
              log_format: str, process_pool: int | None = None,
              metrics_host: str = METRICS_HOST) -> None:
    """`sched worker --processes N` (N > 1): this process supervises N workers; it serves
    --metrics-port itself, their metrics merged with its own. Without --process-pool each
    child's process pool (if its app has pool="process" tasks) gets its share of the cores,
    not every core: N children times one child per core would outnumber them N times."""
    from prometheus_client import CollectorRegistry

    from scheduler.observe import metrics
    from scheduler.observe.children import ChildrenCollector
    from scheduler.worker.pool import cores
    from scheduler.worker.supervisor import Supervisor, child_argv, serve_supervisor

    setup_logging(log_level, log_format)
    env = dict(os.environ)
    if process_pool is None:
        env[PROCESS_POOL_ENV] = str(max(1, cores() // processes))
    sup = Supervisor(child_argv(sys.argv[1:]), processes, grace_s, env=env,
                     metrics=metrics_port is not None)
    server = None
    if metrics_port is not None:
        registry = CollectorRegistry()
        registry.register(metrics.SUPERVISOR_RESTARTS)
        registry.register(metrics.SUPERVISOR_CHILDREN)
        registry.register(ChildrenCollector(sup.metrics_targets))
        server = start_metrics(metrics_port, registry, host=metrics_host)
    try:
        code = serve_supervisor(sup)
    finally:
        if server is not None:
            server.stop()
    if code:
        raise click.exceptions.Exit(code)


@click.command()
@click.option("--app", "app_spec", default=None,
              help="MODULE:ATTRIBUTE of your Registry: the node applies its declared "
                   "schedules (registry.schedule) when it starts; it runs no handler.")
@click.option("--lease", "lease_s", type=bounded(NODE_BOUNDS, "lease_s"),
              envvar="SCHED_LEASE_SECONDS", default=30.0,
              help="The workers' slot lease in seconds: pending entries idle this long are "
                   "reclaimed (env SCHED_LEASE_SECONDS; give workers the same).")
@click.option("--shard-lease", "shard_lease_s", type=bounded(NODE_BOUNDS, "shard_lease_s"),
              default=5.0,
              help="Shard lease ttl in seconds: how soon others take a dead node's shards.")
@click.option("--reclaim-interval", "reclaim_s", type=bounded(NODE_BOUNDS, "reclaim_interval_s"),
              default=1.0,
              help="Seconds between reclaim passes.")
@click.option("--sweep-interval", "sweep_s",
              type=bounded(NODE_BOUNDS, "sweep_interval_s", low=0.1), default=10.0,
              help="Seconds between the starts of two sweeps for orphaned slots (slots that "
                   "fell out of every index, e.g. a deleted stream entry).")
@click.option("--sweep-rate", "sweep_rate",
              type=bounded(NODE_BOUNDS, "sweep_keys_per_s", integer=True), default=5_000,
              show_default=True,
              help="Keys per second the orphan sweep's SCAN walks: each costs Redis ~4 us, so "
                   "the default holds it to ~2% of a core; a walk takes keys / rate seconds.")
@click.option("--lookahead", "lookahead_s", type=bounded(NODE_BOUNDS, "lookahead_s"), default=3.0,
              help="Seconds ahead of their fire time that cron slots are created.")
@click.option("--misfire-grace", "misfire_grace_s", type=bounded(NODE_BOUNDS, "misfire_grace_s"),
              default=5.0,
              help="Seconds late after which a cron occurrence counts as missed (catch-up).")
@click.option("--promote-ahead", "promote_ahead_s", type=bounded(NODE_BOUNDS, "promote_ahead_s"),
              default=3.0,
              show_default=True,
              help="Seconds ahead of their time that due slots are dispatched; the worker that "
                   "reads one holds it until its time (at most a quarter of --lease; 0: at "
                   "their time).")
@click.option("--queue-idle", "queue_idle_s", type=bounded(NODE_BOUNDS, "queue_idle_s"),
              default=3600.0, show_default=True,
              help="Seconds a queue stays listed (by `sched status`, and walked by the "
                   "reclaimer) after its last job, once it holds nothing.")
@click.option("--on-time-target", "on_time_target",
              type=bounded(NODE_BOUNDS, "on_time_target"), default=DEFAULT_ON_TIME_TARGET,
              show_default=True,
              help="A schedule is behind its objective when the share of its occurrences "
                   "started within its on_time_within over --objective-window is below this.")
@click.option("--objective-window", "objective_window_s",
              type=bounded(NODE_BOUNDS, "objective_window_s"),
              default=DEFAULT_OBJECTIVE_WINDOW_S, show_default=True,
              help="Seconds of recent occurrences the on-time share is taken over.")
@click.option("--outbox-dsn", default=None, envvar="SCHED_OUTBOX_DSN",
              help="Also relay the transactional outbox of this Postgres database (env "
                   "SCHED_OUTBOX_DSN), as `sched outbox relay` does.")
@click.option("--outbox-schema", default="scheduler", envvar="SCHED_OUTBOX_SCHEMA",
              show_default=True, help="The outbox's schema, with --outbox-dsn.")
@metrics_port_option
@metrics_host_option
@log_options
@click.pass_obj
def scheduler(obj: dict[str, str], app_spec: str | None, lease_s: float, shard_lease_s: float,
              reclaim_s: float, sweep_s: float, sweep_rate: int, lookahead_s: float,
              misfire_grace_s: float, promote_ahead_s: float, queue_idle_s: float,
              on_time_target: float, objective_window_s: float, outbox_dsn: str | None, outbox_schema: str, metrics_port: int | None,
              metrics_host: str, log_level: str, log_format: str) -> None:
    """Run a scheduler node: own a share of the shards, create cron slots, promote due
    slots, reclaim expired leases. Run as many as you like; they share the shards."""
    from scheduler.node.node import NodeConfig, SchedulerNode

    config = NodeConfig(lease_s=lease_s, shard_lease_s=shard_lease_s,
                        reclaim_interval_s=reclaim_s, sweep_interval_s=sweep_s,
                        sweep_keys_per_s=sweep_rate, lookahead_s=lookahead_s,
                        misfire_grace_s=misfire_grace_s, promote_ahead_s=promote_ahead_s,
                        queue_idle_s=queue_idle_s, on_time_target=on_time_target,
                        objective_window_s=objective_window_s)
    registry = None if app_spec is None else load_app(app_spec)
    relay = _outbox_relay(obj, outbox_dsn, outbox_schema)
    setup_logging(log_level, log_format)
    if app_spec is not None:
        apply_declared(obj["redis_url"], obj["namespace"], app_spec, registry,
                       always_log=True)  # the node imports the app for these only
    holder: list[Any] = [] if relay is None else [relay]

    async def make() -> None:
        # once SIGTERM is handled: a scrape may mean "it is up"
        start_metrics(metrics_port, host=metrics_host)
        client = process_redis(obj["redis_url"], lease_s)
        node = SchedulerNode(client, namespace=obj["namespace"], config=config)
        holder.append(node)
        try:
            if relay is None:
                await node.run()
            else:  # the relay is blocking (psycopg, the SDK's Client): a thread of its own
                await asyncio.gather(node.run(), asyncio.to_thread(relay.run))
        finally:
            await client.aclose()
            if relay is not None:
                relay.client.close()

    def stop() -> None:
        for service in holder:
            service.stop()

    serve(make, stop)


def _outbox_relay(obj: dict[str, str], dsn: str | None, schema: str) -> Any:
    """`sched scheduler --outbox-dsn`'s relay, its outbox checked before the node starts."""
    if dsn is None:
        return None
    from scheduler import Client
    from scheduler.cli.options import history_source
    from scheduler.outbox.relay import OutboxRelay

    client = Client(obj["redis_url"], obj["namespace"])
    relay = OutboxRelay(client, history_source(dsn, ""), schema=schema)
    try:
        relay.lag_or_refuse()
    except BaseException:
        relay.close()
        client.close()
        raise
    return relay


@click.command()
@click.option("--port", type=click.IntRange(min=0, max=65535), default=9464,
              envvar="SCHED_EXPORTER_PORT", help="Port for /metrics and /healthz (env "
                                                 "SCHED_EXPORTER_PORT); 0 picks a free one.")
@click.option("--host", default=METRICS_HOST, envvar="SCHED_METRICS_HOST", show_default=True,
              help="Address to listen on: loopback unless given; 0.0.0.0 (every interface) "
                   "or one address for a Prometheus on another host or container (env "
                   "SCHED_METRICS_HOST).")
@click.option("--top-queues", type=click.IntRange(min=1, max=MAX_COUNT), default=None,
              help="Queues with series of their own, those with the most work (depth, then "
                   "pending); the rest are summed into queue=\"(other)\" (default 100).")
@click.option("--key-labels", type=click.Choice(["off", "hashed", "plain"]), default="off",
              show_default=True,
              help="The busiest concurrency keys' series (sched_key_waiting, "
                   "sched_key_running): off (none: a key, maybe a tenant's name or e-mail "
                   "address, never leaves Redis), hashed (a stable pseudonym per key) or "
                   "plain (the key's name).")
@scaling_options
@log_options
@click.pass_obj
def exporter(obj: dict[str, str], port: int, host: str, top_queues: int | None,
             key_labels: str, target_lag_s: float, target_utilisation: float, log_level: str,
             log_format: str) -> None:
    """Serve the namespace's metrics (depth, lag, backlog, dead letters, workers, workers
    wanted) read from Redis at each scrape. /healthz answers 503 while Redis does not."""
    import threading

    from prometheus_client import CollectorRegistry

    from scheduler.observe.capacity import ScalingTarget
    from scheduler.observe.exporter import MetricsServer
    from scheduler.observe.metrics import TOP_QUEUES, NamespaceCollector

    setup_logging(log_level, log_format)
    client = sync_redis(obj["redis_url"])
    registry = CollectorRegistry()
    registry.register(NamespaceCollector(client, obj["namespace"], ScalingTarget(
        target_lag_s=target_lag_s, utilisation=target_utilisation),
        top_queues=top_queues or TOP_QUEUES, key_labels=key_labels))

    def healthy() -> bool:
        try:
            return bool(transport.call_sync(client, "ping"))
        except REDIS_ERRORS:
            return False

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before serving: a scrape may mean "it is up"
        signal.signal(sig, lambda *_: done.set())
    try:
        server = MetricsServer(registry, host=host, port=port, healthy=healthy).start()
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another "
                          f"--port or --host") from None
    log.info("exporter for namespace %r on http://%s:%d/metrics", obj["namespace"], host,
             server.port)
    done.wait()
    server.stop()
    client.close()
    log.info("exporter stopped")
