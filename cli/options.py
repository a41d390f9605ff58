"""Options shared by several commands."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from scheduler.store import DEFAULT_SQLITE_PATH

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
    from scheduler.errors import ConfigError
    from scheduler.masking import masked
    from scheduler.store.interface import is_postgres

    if postgres_dsn is not None:
        if not is_postgres(postgres_dsn):
            shown = masked(postgres_dsn, postgres_dsn)[:60]  # masked before it is cut
            raise ConfigError(f"--postgres-dsn {shown!r} is not a Postgres DSN: "
                              f"use postgresql://user@host/db (or 'host=... dbname=...')")
        return postgres_dsn
    return f"sqlite://{history_file}" + ("?mode=ro" if read_only else "")


def _autoscale(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    from scheduler.autoscale import AutoscaleConfig
    from scheduler.errors import ConfigError

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
         "idle (README: Scaling). Starts at MIN; replaces --concurrency.")


def scaling_options(fn: F) -> F:
    """The targets of the workers-wanted rule (scheduler/capacity.py); defaults there."""
    from scheduler.capacity import ScalingTarget

    default = ScalingTarget()
    fn = click.option("--target-utilisation", "target_utilisation",
                      type=Finite(min=0, max=1, min_open=True),
                      default=default.utilisation,
                      help="Workers wanted: size the fleet so this share of its run slots "
                           "is busy.")(fn)
    fn = click.option("--target-lag", "target_lag_s", type=Finite(min=0, min_open=True),
                      default=default.target_lag_s,
                      help="Workers wanted: enough to start the ready backlog within this "
                           "many seconds.")(fn)
    return fn
