"""An outbox row's `spec`: a job's submit arguments as JSON, and back; and the outbox's SQL
(scheduler/outbox/sql/postgres/) with the operator's schema name in it."""

from __future__ import annotations

import re
from datetime import timedelta
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

import scheduler.history.sqlfiles as sqlfiles
from scheduler.core.errors import ConfigError, MissingExtra, ValidationError
from scheduler.core.jobspec import JobSpec

if TYPE_CHECKING:
    import psycopg

PACKAGE = "scheduler.outbox"
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class _RowSpec(JobSpec, forbid_unknown_fields=True):
    """A row's spec: a JobSpec that refuses a field it does not know, as `submit_many`'s
    mappings do (a row another service wrote may misspell one)."""


_encoder = msgspec.json.Encoder()
_as_jobspec = msgspec.json.Decoder(_RowSpec)
_FIELDS = JobSpec.__struct_fields__


def encode_spec(spec: JobSpec, payload_json: str | None) -> str:
    """A validated spec (`payload_json`: the payload as validation encoded it, written into
    the row as it is) as a row's JSON, the options left at None omitted; `delay` in
    seconds."""
    values: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(spec, name)
        if value is not None:
            values[name] = value
    if payload_json is not None:
        values["payload"] = msgspec.Raw(payload_json.encode())
    if isinstance(spec.delay, timedelta):
        values["delay"] = spec.delay.total_seconds()
    return _encoder.encode(values).decode()


def decode_spec(text: str) -> JobSpec:
    """A row's JSON as the JobSpec to submit; ValidationError if it is not one. Decoded
    straight into a JobSpec (the relay's per-row cost), its instants into datetimes."""
    try:
        spec = _as_jobspec.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValidationError("spec", f"the outbox row is not a job spec: {exc}") from None
    return spec


def check_schema(schema: str) -> str:
    if not isinstance(schema, str) or not _SCHEMA.fullmatch(schema):
        raise ValidationError("schema", f"{schema!r} is not allowed; must be a lowercase SQL "
                                        f"name: a-z, 0-9 and _, not starting with a digit")
    return schema


@cache
def queries(schema: str) -> dict[str, str]:
    """The outbox's named queries for tables in `schema` (checked: it is written into them)."""
    quoted = f'"{check_schema(schema)}"'
    return {name: text.replace("{schema}", quoted)
            for name, text in sqlfiles.queries("postgres", package=PACKAGE).items()}


def migrations(schema: str) -> list[tuple[int, str]]:
    quoted = f'"{check_schema(schema)}"'
    return [(v, text.replace("{schema}", quoted))
            for v, text in sqlfiles.migrations("postgres", package=PACKAGE)]


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's outbox (its trigger's pg_notify)."""
    return f"{check_schema(schema)}.outbox"


_LOCK = 7_301_946_118  # advisory lock id of outbox migrations (the history's is one less)


def postgres_driver() -> ModuleType:
    """psycopg, which the relay and the schema commands need (the `postgres` extra). Writing
    rows does not: `outbox.submit` takes the application's own connection, psycopg2's or
    SQLAlchemy's as well."""
    try:
        import psycopg
    except ImportError:
        raise MissingExtra("the outbox's relay and schema", "postgres", "psycopg") from None
    return psycopg


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A connection to the application's database, for the outbox's commands (the relay
    keeps its own)."""
    conn: psycopg.Connection[Any] = postgres_driver().connect(dsn, connect_timeout=5)
    return conn


def upgrade(conn: Any, schema: str) -> int:
    """Apply the outbox migrations `schema` lacks (creating it), in one transaction on a
    psycopg connection; returns the version it is at."""
    q = queries(schema)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        cur.execute(q["create_versions"])
        cur.execute(q["applied"])
        applied = {r[0] for r in cur.fetchall()}
        for version, script in migrations(schema):
            if version not in applied:
                cur.execute(script.encode())
                cur.execute(q["record"], {"version": version})
        cur.execute(q["applied"])
        return max((r[0] for r in cur.fetchall()), default=0)


def status(conn: Any, schema: str) -> tuple[int, float, int]:
    """(rows waiting, the oldest one's age in seconds, rows rejected)."""
    q = queries(schema)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(q["lag"])
            count, age = cur.fetchone()
            cur.execute(q["rejected"])
            rejected = cur.fetchone()[0]
    except postgres_driver().errors.UndefinedTable:
        raise ConfigError(f"no outbox in schema {schema!r} of this database: run `sched db "
                          f"upgrade --outbox --outbox-schema {schema}` first") from None
    return int(count), float(age), int(rejected)


def served(conn: Any, schema: str) -> str | None:
    """The namespace the outbox serves (recorded by its first relay); None before that."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(queries(schema)["bound"])
        found = cur.fetchone()
    return str(found[0]) if found else None
