"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from scheduler.store import DEFAULT_SQLITE_PATH

F = TypeVar("F", bound=Callable[..., Any])


def store_options(fn: F) -> F:
    fn = click.option("--history-file", envvar="SCHED_HISTORY_FILE",
                      default=str(DEFAULT_SQLITE_PATH),
                      help="Embedded (SQLite) history file, used when no Postgres DSN is given "
                           "(env SCHED_HISTORY_FILE).")(fn)
    fn = click.option("--postgres-dsn", envvar="SCHED_POSTGRES_DSN", default=None,
                      help="History store, recommended for production, e.g. "
                           "postgresql://user@host/db (env SCHED_POSTGRES_DSN).")(fn)
    return fn


def history_source(postgres_dsn: str | None, history_file: str) -> str:
    return postgres_dsn or f"sqlite://{history_file}"
