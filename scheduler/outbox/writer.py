"""Submitting in the caller's transaction: `submit` and `submit_many` validate each job as
`Client.submit` does (scheduler/sdk/batching.py's `validate`, the same code) and write one
outbox row per job with the caller's own connection, so the jobs exist exactly when the
caller's transaction commits. The relay (scheduler/outbox/relay.py) hands them to Redis.

The connection may be a DB-API connection to Postgres with the pyformat parameter style
(psycopg 3, psycopg2, Django's `django.db.connection`) or an SQLAlchemy `Connection` or
`Session` (its transaction's connection: the session begins one if none is open).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from scheduler.core.errors import ValidationError
from scheduler.core.jobspec import JobSpec, job_ids, one_spec, schedule_arguments, spec_of
from scheduler.core.keys import check_name
from scheduler.core.models import DEFAULT_MAX_PAYLOAD_BYTES, RetryPolicy
from scheduler.core.namespace import EVENTS_MAXLEN
from scheduler.outbox.rows import encode_spec, queries
from scheduler.sdk.batching import validate
from scheduler.sdk.state import ClientState

DEFAULT_SCHEMA = "scheduler"

# validate()'s caches live on a ClientState; one per payload limit and shard count, never
# connected to Redis.
_states: dict[tuple[int, int], ClientState] = {}


def _state(max_payload_bytes: int, shards: int | None) -> ClientState:
    state = _states.get((max_payload_bytes, shards or 0))
    if state is None:
        state = _states[max_payload_bytes, shards or 0] = ClientState(
            "outbox", shards, None, max_payload_bytes, EVENTS_MAXLEN)
        state.shards = shards or 0
    return state


def rows_of(jobs: Iterable[JobSpec | Mapping[str, Any]],
            max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
            shards: int | None = None) -> tuple[list[str], list[str]]:
    """(job ids, row specs) of the jobs, every one validated before any is returned."""
    state = _state(max_payload_bytes, shards)
    now = time.time_ns() // 1_000_000
    specs = [raw if isinstance(raw, JobSpec) else spec_of(raw) for raw in jobs]
    for spec in specs:
        if spec.dedupe_ttl is not None or spec.debounce is not None:
            # The id is the first job's while the window is open, known only in Redis.
            raise ValidationError("dedupe_ttl", "dedupe_ttl and debounce are not taken by the "
                                                "outbox (a windowed job's id is decided in "
                                                "Redis): submit such jobs with Client.submit")
        if spec.concurrency_key is not None and not shards:
            # The id must land in the key's home shard, which depends on the shard count.
            raise ValidationError("shards", "a job with a concurrency_key needs the "
                                            "namespace's shard count (Client.shards): pass "
                                            "shards= to outbox.submit / submit_many")
    checked = [validate(state, spec, now) for spec in specs]
    state.unseen.clear()  # no catalog here: the relay's submit checks the task names
    drawn = iter(job_ids.take(sum(c[0] is None for c in checked), now))
    ids = [str(c[0]) if c[0] is not None else next(drawn) for c in checked]
    return ids, [encode_spec(spec, c[4]) for spec, c in zip(specs, checked, strict=True)]


def _check_namespace(namespace: str | None) -> None:
    if namespace is not None:
        check_name("namespace", namespace)


def _execute(conn: Any, statement: str, params: dict[str, Any]) -> None:
    if hasattr(conn, "__aenter__") and not hasattr(conn, "__enter__"):
        raise ValidationError("conn", f"{type(conn).__name__} is an asyncio connection: "
                                      f"outbox.submit takes a blocking one (psycopg.Connection, "
                                      f"an SQLAlchemy Session or Connection, Django's)")
    if hasattr(conn, "exec_driver_sql"):  # an SQLAlchemy Connection
        conn.exec_driver_sql(statement, params)
    elif type(conn).__module__.startswith("sqlalchemy"):  # an SQLAlchemy Session
        conn.connection().exec_driver_sql(statement, params)
    else:
        with conn.cursor() as cur:
            cur.execute(statement, params)


def submit(conn: Any, task: str, payload: Any = None, *, queue: str | None = None,
           timeout: float | None = None, retry: RetryPolicy | None = None,
           delivery: str | None = None, priority: int | None = None,
           dedupe_key: str | None = None, delay: float | timedelta | None = None,
           at: datetime | None = None, cron: str | None = None, tz: str | None = None,
           catchup: str | None = None, catchup_limit: int | None = None,
           overlap: str | None = None, start_at: datetime | None = None,
           end_at: datetime | None = None, dedupe_ttl: float | None = None,
           debounce: float | None = None, concurrency_key: str | None = None,
           on_time_within: float | None = None, schema: str = DEFAULT_SCHEMA,
           max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
           shards: int | None = None, namespace: str | None = None) -> str:
    """Submit one job in `conn`'s transaction: it reaches Redis once the transaction commits
    (never if it rolls back). Returns the id the job will have. The options are
    `Client.submit`'s, validated the same way (ValidationError before anything is written);
    `delay` counts from when the relay hands the job to Redis. `schema`: where
    `sched db upgrade --outbox` made the outbox; `max_payload_bytes`: the namespace's limit
    (a larger payload is refused here; the relay checks the namespace's own); `shards`: the
    namespace's shard count (`Client.shards`), needed with a `concurrency_key` only: the
    job's id is drawn in the key's home shard (the relay refuses an id that is not there,
    so the count must be the namespace's); `namespace`: the namespace the job is for (a
    relay of another namespace moves the row to outbox_rejected instead of submitting it;
    None: the namespace the outbox serves)."""
    _check_namespace(namespace)
    jobs = one_spec(task, payload, queue, timeout, retry, delivery, dedupe_key,
                    schedule_arguments(locals()), priority, dedupe_ttl, debounce,
                    concurrency_key)
    ids, specs = rows_of(jobs, max_payload_bytes, shards)
    _execute(conn, queries(schema)["insert_one"], {"job_id": ids[0], "spec": specs[0],
                                                    "namespace": namespace})
    return ids[0]


def submit_many(conn: Any, jobs: Iterable[JobSpec | Mapping[str, Any]], *,
                schema: str = DEFAULT_SCHEMA,
                max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                shards: int | None = None, namespace: str | None = None) -> list[str]:
    """Submit a batch in `conn`'s transaction, in one INSERT: every job validated first (as
    `Client.submit_many` does); returns the ids the jobs will have, in input order.
    `shards`, `namespace`: as for `submit` (`shards` needed when a job has a
    concurrency_key)."""
    _check_namespace(namespace)
    ids, specs = rows_of(jobs, max_payload_bytes, shards)
    if ids:
        _execute(conn, queries(schema)["insert_many"], {"job_ids": ids, "specs": specs,
                                                         "namespace": namespace})
    return ids
