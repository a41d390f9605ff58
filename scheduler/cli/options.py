"""Options shared by several commands."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from scheduler.core.errors import ValidationError
from scheduler.history.store import DEFAULT_SQLITE_PATH

F = TypeVar("F", bound=Callable[..., Any])


class Finite(click.FloatRange):
    """The type of every number option that takes a fraction: a float, optionally within a
    range, that is neither NaN nor infinite. click's float and FloatRange take both ("nan"
    is below no minimum), and a service would then fail on int(nan) after it started."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()


def bounded(bounds: dict[str, tuple[float, float]], field: str, *, low: float | None = None,
            integer: bool = False) -> click.ParamType[Any]:
    """The option type of a config field: the range its Struct checks (`low` when the option
    asks more than the Struct, e.g. an interval that must not spin). Out of it, click's usage
    error names the option and the range, exit 2."""
    lo, hi = bounds[field]
    lo = lo if low is None else low
    if integer:
        return click.IntRange(int(lo), int(hi))
    return Finite(min=lo, max=hi)


def store_options(fn: F) -> F:
    fn = click.option("--history-file", envvar="SCHED_HISTORY_FILE",
                      default=str(DEFAULT_SQLITE_PATH),
                      help="Embedded (SQLite) history file, used when no Postgres DSN is given "
                           "(env SCHED_HISTORY_FILE).")(fn)
    fn = click.option("--postgres-dsn", envvar="SCHED_POSTGRES_DSN", default=None,
                      help="History store, recommended for production, e.g. "
                           "postgresql://user@host/db (env SCHED_POSTGRES_DSN).")(fn)
    return fn


def history_source(postgres_dsn: str | None, history_file: str, read_only: bool = False) -> str:
    """The store to open: --postgres-dsn (which must be a Postgres DSN), else the embedded
    file; `read_only` commands neither create nor write the file."""
    from scheduler.core.errors import ConfigError
    from scheduler.core.masking import masked
    from scheduler.history.store.interface import is_postgres

    if postgres_dsn is not None:
        if not is_postgres(postgres_dsn):
            shown = masked(postgres_dsn, postgres_dsn)[:60]  # masked before it is cut
            raise ConfigError(f"--postgres-dsn {shown!r} is not a Postgres DSN: "
                              f"use postgresql://user@host/db (or 'host=... dbname=...')")
        return postgres_dsn
    return f"sqlite://{history_file}" + ("?mode=ro" if read_only else "")


def _autoscale(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    from scheduler.core.errors import ConfigError
    from scheduler.worker.autoscale import AutoscaleConfig

    if value is None:
        return None
    try:
        return AutoscaleConfig.parse(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


autoscale_option = click.option(
    "--autoscale", metavar="MIN:MAX", default=None, callback=_autoscale,
    help="Move the concurrency between MIN and MAX from the start lag of this worker's "
         "claims: up while claims start late with every slot busy, down while slots sit "
         "idle (docs: operating/metrics.md, Scaling). Starts at MIN; replaces --concurrency.")


def scaling_options(fn: F) -> F:
    """The targets of the workers-wanted rule (scheduler/observe/capacity.py); defaults there."""
    from scheduler.core.bounds import SCALING_BOUNDS
    from scheduler.observe.capacity import ScalingTarget

    default = ScalingTarget()
    fn = click.option("--target-utilisation", "target_utilisation",
                      type=Finite(min=0, max=1, min_open=True),
                      default=default.utilisation,
                      help="Workers wanted: size the fleet so this share of its run slots "
                           "is busy.")(fn)
    fn = click.option("--target-lag", "target_lag_s",
                      type=Finite(min=0, max=SCALING_BOUNDS["target_lag_s"][1], min_open=True),
                      default=default.target_lag_s,
                      help="Workers wanted: enough to start the ready backlog within this "
                           "many seconds.")(fn)
    return fn


# The options every command takes, before its name (`sched --namespace X status`) or after it
# (`sched status --namespace X`): (flag, key in ctx.obj, environment variable, default, help).
GLOBAL_OPTIONS = (
    ("--redis-url", "redis_url", "SCHED_REDIS_URL", "redis://127.0.0.1:6379/0",
     "Redis to use"),
    ("--namespace", "namespace", "SCHED_NAMESPACE", "sched",
     "Key prefix isolating one scheduler from others"),
)


def global_options(fn: F) -> F:
    """The root group's: each read from its flag, else its environment variable, else its
    default, into ctx.obj for every command."""
    for flag, _, env, default, text in reversed(GLOBAL_OPTIONS):
        fn = click.option(flag, envvar=env, default=default, help=f"{text} (env {env}).")(fn)
    return fn


def _given_after(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def store(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:  # given after the command: it wins over what came before
            ctx.ensure_object(dict)[key] = value
    return store


def accept_global_options(cmd: click.Command) -> click.Command:
    """Let `cmd` and every command under it take the global options after their names too.
    Those copies have no environment variable or default of their own (the root's already
    gave ctx.obj its value); one given writes ctx.obj before the command runs. Idempotent; a
    command with an option of the same name keeps its own."""
    names = {p.name for p in cmd.params}
    for flag, key, env, default, text in GLOBAL_OPTIONS:
        if key not in names:
            cmd.params.append(click.Option(
                [flag, key], default=None, expose_value=False, is_eager=True,
                callback=_given_after(key),
                help=f"{text}; also accepted before the command (env {env}, default "
                     f"{default})."))
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            accept_global_options(sub)
    return cmd


class Root(click.Group):
    """`sched`: each command it resolves takes the global options after its name too
    (accept_global_options), whichever module defined the command and however it was added."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        return None if cmd is None else accept_global_options(cmd)


DURATION = re.compile(r"^(-?\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration_s(field: str, value: str | None) -> float | None:
    """A duration given as 90 (seconds), 30s, 5m, 1h, 2d or 250ms, in seconds; None for
    none; ValidationError naming `field` for text that is not one."""
    if value is None:
        return None
    m = DURATION.match(value.strip())
    seconds = float(m.group(1)) * UNIT_S[m.group(2)] if m else math.nan
    if not math.isfinite(seconds):  # 400 digits are a float too: infinity
        raise ValidationError(field, f"{value[:40]!r} is not a duration; use e.g. 90 "
                                     f"(seconds), 30s, 5m, 1h, 2d")
    return seconds
