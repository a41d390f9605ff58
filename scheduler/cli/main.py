"""`sched`: parses options, calls the SDK, prints a table for people or JSON for programs.

Every error a user can cause ends as one line on stderr and a non-zero exit code, never a
traceback.
"""

from __future__ import annotations

import os
import sys
import warnings
from datetime import datetime
from typing import Any

import click
import msgspec

import scheduler.cli.dev as dev_cmds
import scheduler.cli.history as history_cmds
import scheduler.cli.inspect as inspect_cmds
import scheduler.cli.logs as logs
import scheduler.cli.namespace as namespace_cmds
import scheduler.cli.observe as observe_cmds
import scheduler.cli.ops as ops_cmds
import scheduler.cli.outbox as outbox_cmds
import scheduler.cli.queues as queue_cmds
import scheduler.cli.run as run_cmds
import scheduler.cli.schedules as schedule_cmds
import scheduler.cli.verify as verify_cmds
import scheduler.cli.web as web_cmds
from scheduler import __version__
from scheduler.cli.options import Finite, Root, global_options
from scheduler.cli.options import duration_s as _duration_s
from scheduler.core.errors import (
    RedisUnavailable,
    SchedulerError,
    UnknownTaskWarning,
    ValidationError,
)
from scheduler.core.masking import masked
from scheduler.core.models import MAX_ATTEMPTS, MAX_DEPTH, MAX_SECONDS
from scheduler.core.states import Catchup, Delivery, Overlap
from scheduler.core.timing import MAX_CATCHUP_LIMIT
from scheduler.redis.failures import REDIS_ERRORS


def _decode_json(value: str) -> Any:
    """--payload: a JSON value, or @FILE holding one as UTF-8 text (a byte-order mark is
    allowed); each problem one ValidationError."""
    where = "is not valid JSON"
    if value.startswith("@"):
        path = value[1:]
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ValidationError("payload", f"cannot read {path}: {exc.strerror}") from None
        try:
            value = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValidationError("payload", f"{path} is not UTF-8 text (byte "
                                             f"0x{data[exc.start]:02x} at offset {exc.start})"
                                  ) from None
        where = f"{path} does not hold valid JSON"
    try:
        return msgspec.json.decode(value.encode())
    except UnicodeEncodeError:  # bytes the shell passed that are not UTF-8
        raise ValidationError("payload", "is not UTF-8 text") from None
    except RecursionError:
        raise ValidationError("payload", f"is nested too deep (a JSON payload nests at most "
                                         f"{MAX_DEPTH} levels)") from None
    except msgspec.DecodeError as exc:
        raise ValidationError("payload", f"{where} ({exc})") from None


def _instant(field: str, value: str | None) -> datetime | None:
    """ISO 8601; the SDK refuses a time without a zone, with a message that says so."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(field, f"{value!r} is not an ISO 8601 time; use e.g. "
                                     f"2027-01-01T08:00:00Z") from None


@click.group(cls=Root,
             context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
# The package's own version, not its installed metadata (an editable install's lags a bump).
@click.version_option(version=__version__, prog_name="sched")
@global_options
@click.pass_context
def cli(ctx: click.Context, redis_url: str, namespace: str) -> None:
    """A Redis-native distributed job scheduler. --redis-url and --namespace may come before
    the command or after it (`sched status --namespace X`); after it wins when both are given."""
    ctx.obj = {"redis_url": redis_url, "namespace": namespace}


@cli.command()
@click.argument("task")
@click.option("--payload", default="null", help="JSON value, or @FILE to read it from a file.")
@click.option("--queue", default=None,
              help="Default: the task's in the catalog (`sched tasks`), else default.")
@click.option("--priority", type=click.IntRange(1, 5), default=None,
              help="1 runs first, 5 last; worse ones still get a tenth of the starts. "
                   "Default: the task's, else 3.")
@click.option("--timeout", default=None,
              help="How long a run may take before it is cancelled: 90 (seconds), 30s, 5m, "
                   "1h. Default: the task's, else none.")
@click.option("--max-attempts", type=click.IntRange(1, MAX_ATTEMPTS), default=None,
              help="Attempts before the dead-letter queue. Default: the task's retry "
                   "policy, else 3.")
@click.option("--delivery", type=click.Choice([d.value for d in Delivery]), default=None,
              help="How often a run may happen. Default: the task's, else at_least_once.")
@click.option("--dedupe-key", default=None, help="A repeat with the same key returns the first job.")
@click.option("--dedupe-ttl", default=None,
              help="The key holds this long from its first submit, then lets a new job "
                   "through: 90 (seconds), 30s, 5m, 1h.")
@click.option("--debounce", default=None,
              help="With --dedupe-key: run this long after the latest submit, with its "
                   "payload: 1 (seconds), 0.5, 10s.")
@click.option("--concurrency-key", default=None,
              help="The tenant the job runs for (a customer, an account): a queue's "
                   "--per-key-concurrency counts runs of one key, and keys take turns.")
@click.option("--delay", default=None, help="Run after this long: 90 (seconds), 30s, 5m, 1h.")
@click.option("--at", "at_", default=None, help="Run at this instant: 2027-01-01T08:00:00Z.")
@click.option("--cron", default=None,
              help='Recurring: 5 fields, or 6 with seconds first, e.g. "0 8 * * MON".')
@click.option("--tz", default=None, help="IANA time zone of --cron (default UTC).")
@click.option("--catchup", type=click.Choice([c.value for c in Catchup]), default=None,
              help="Missed occurrences after downtime (default all).")
@click.option("--catchup-limit", type=click.IntRange(1, MAX_CATCHUP_LIMIT), default=None,
              help="Most missed occurrences `all` backfills (default 1000).")
@click.option("--overlap", type=click.Choice([o.value for o in Overlap]), default=None,
              help="skip: skip an occurrence while the last still runs (default allow).")
@click.option("--start-at", default=None, help="No occurrence of --cron before this instant.")
@click.option("--end-at", default=None, help="No occurrence of --cron after this instant.")
@click.option("--on-time-within", default=None,
              help="A run of --cron starting within this of its fire time is on time "
                   "(default 2s; `sched schedules explain` reports the share).")
@click.option("--durability", type=click.Choice(["primary", "replicated", "fsynced"]),
              default="primary",
              help="Return once the primary has the job; or once --replicas replicas "
                   "confirmed it (WAIT); or once the primary's AOF fsynced it (WAITAOF, "
                   "Redis 7.2+).")
@click.option("--replicas", type=click.IntRange(1, 1000), default=1,
              help="Replicas that must confirm (--durability replicated).")
@click.option("--replica-timeout", type=Finite(min=0.001, max=MAX_SECONDS), default=1.0,
              help="Seconds to wait for them before failing (exit 1; the job may survive).")
@click.option("--trace", is_flag=True, envvar="SCHED_OTEL",
              help="An OpenTelemetry span for the submit, the parent of the job's run spans "
                   "(env SCHED_OTEL=1; needs the otel extra and a configured TracerProvider, "
                   "e.g. opentelemetry-instrument).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def submit(obj: dict[str, str], task: str, payload: str, queue: str | None,
           priority: int | None, timeout: str | None,
           max_attempts: int | None, delivery: str | None, dedupe_key: str | None,
           dedupe_ttl: str | None, debounce: str | None, concurrency_key: str | None,
           delay: str | None,
           at_: str | None, cron: str | None, tz: str | None, catchup: str | None,
           catchup_limit: int | None, overlap: str | None, start_at: str | None,
           end_at: str | None, on_time_within: str | None, durability: str, replicas: int,
           replica_timeout: float,
           trace: bool, as_json: bool) -> None:
    """Submit a job: now, after --delay, --at an instant, or on a --cron schedule."""
    from scheduler import Client, RetryPolicy

    value = _decode_json(payload)
    retry = None if max_attempts is None else RetryPolicy(max_attempts=max_attempts)
    schedule: dict[str, Any] = {"delay": _duration_s("delay", delay), "at": _instant("at", at_), "cron": cron,
                "tz": tz, "catchup": catchup, "catchup_limit": catchup_limit,
                "overlap": overlap, "start_at": _instant("start_at", start_at),
                "end_at": _instant("end_at", end_at),
                "on_time_within": _duration_s("on_time_within", on_time_within)}
    with Client(obj["redis_url"], obj["namespace"], durability=durability, replicas=replicas,
                replica_timeout_s=replica_timeout, tracing=trace) as client, \
            warnings.catch_warnings(record=True) as warned:
        # A task no worker registered: one line on stderr, not Python's two.
        warnings.simplefilter("always", UnknownTaskWarning)
        job_id = client.submit(task, value, queue=queue, priority=priority,
                               timeout=_duration_s("timeout", timeout), retry=retry,
                               delivery=delivery, dedupe_key=dedupe_key,
                               dedupe_ttl=_duration_s("dedupe_ttl", dedupe_ttl),
                               debounce=_duration_s("debounce", debounce),
                               concurrency_key=concurrency_key, **schedule)
        for w in warned:
            if issubclass(w.category, UnknownTaskWarning):
                click.echo(f"warning: {w.message}", err=True)
        if as_json:
            job = client.get_job(job_id)
            out: dict[str, Any] = {"job_id": job_id, "kind": job.kind,
                                   "next_fire_ms": job.next_fire_ms}
            if job.kind != "cron":
                out["slot_id"] = f"{job_id}:{job.fire_ms}"
            click.echo(msgspec.json.encode(out).decode())
        else:
            click.echo(job_id)


cli.add_command(run_cmds.worker)
cli.add_command(run_cmds.scheduler)
cli.add_command(inspect_cmds.jobs)
cli.add_command(schedule_cmds.schedules)
cli.add_command(inspect_cmds.runs)
cli.add_command(ops_cmds.cancel)
cli.add_command(ops_cmds.dlq)
cli.add_command(run_cmds.exporter)
cli.add_command(observe_cmds.status)
cli.add_command(observe_cmds.workers)
cli.add_command(observe_cmds.tasks)
cli.add_command(dev_cmds.dev)
cli.add_command(history_cmds.db)
cli.add_command(history_cmds.snapshotter)
cli.add_command(history_cmds.history)
cli.add_command(history_cmds.recover)
cli.add_command(outbox_cmds.outbox)
cli.add_command(web_cmds.web)
cli.add_command(queue_cmds.queues)
cli.add_command(namespace_cmds.namespace)
cli.add_command(verify_cmds.verify)


def _sources(argv: list[str]) -> tuple[str, ...]:
    """The Redis URL and Postgres DSN this command was given (options or environment): their
    passwords are masked in every line it prints or logs, wherever a library quotes them."""
    found = [os.environ.get("SCHED_REDIS_URL", ""), os.environ.get("SCHED_POSTGRES_DSN", "")]
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in ("--redis-url", "--postgres-dsn"):
            found.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return tuple(s for s in found if s)


def _postgres_error(exc: Exception) -> str | None:
    """The line for a Postgres error, None for any other. psycopg is looked up, not imported:
    it is an extra, and none of its errors can be raised unless something imported it."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return None
    if isinstance(exc, psycopg.OperationalError):
        first = (str(exc).strip().splitlines() or ["connection failed"])[0]
        return f"error: cannot reach Postgres ({first}); check --postgres-dsn / " \
               f"SCHED_POSTGRES_DSN"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"error: history store: {first}"


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `sched` console script."""
    sources = _sources(sys.argv[1:] if argv is None else argv)
    logs.mask_also(sources)

    def error(text: str) -> None:
        click.echo(masked(text, *sources), err=True)

    try:
        code = cli.main(args=argv, prog_name="sched", standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        code = 130
    except click.ClickException as exc:
        error(f"error: {exc.format_message()}")
        code = exc.exit_code
    except RedisUnavailable as exc:
        error(f"error: {exc}; check --redis-url / SCHED_REDIS_URL")
        code = 1
    except SchedulerError as exc:
        error(f"error: {exc}")
        code = 1
    except REDIS_ERRORS as exc:  # a command that talks to Redis outside the SDK
        from scheduler.redis.failures import translate

        error(f"error: {translate(exc, 'the --redis-url')}")
        code = 1
    except Exception as exc:
        line = _postgres_error(exc)
        if line is None:
            raise
        error(line)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
