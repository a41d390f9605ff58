"""Schedules declared with the code (`registry.schedule(...)`): what a declaration holds, and
the start-time pass that applies an app's declarations to a namespace (`Client.declare`).

The pass upserts each declared schedule through `schedules.schedule`, the path
`Client.schedule` takes (idempotent, and race-safe when many processes start at once), and
marks each name in `<ns>:declared` with the app that declared it. A name the same app
marked earlier and no longer declares is deleted as `delete_job` deletes (its occurrences
that have not started are cancelled). Names another app marked, and schedules made through
the API, are never touched. When two versions of an app start in turn (a rolling deploy),
the last one to start wins: its declarations are applied and the names only the other
declared are deleted, until that one starts again."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from scheduler.core.cron import CronSpec
from scheduler.core.errors import JobNotFound, ValidationError
from scheduler.core.models import RetryPolicy, check_queue, check_task
from scheduler.sdk.requests import Op, Pipe
from scheduler.sdk.schedules import _named_spec, delete_job, named_id, schedule
from scheduler.sdk.state import ClientState, ensure_namespace, ready

REMOVED_REASON = "no longer declared by the code"


class DeclaredSchedule(msgspec.Struct, frozen=True):
    """One `registry.schedule(...)`: `Client.schedule`'s arguments, checked when declared."""

    name: str
    task: str
    payload: Any
    options: dict[str, Any]


class Marker(msgspec.Struct, frozen=True):
    """A `<ns>:declared` entry: which app declared the name, as which job id."""

    app: str
    job_id: str


class Declared(msgspec.Struct, frozen=True):
    """What `Client.declare` did: of the app's `declared` schedules, `created` are new,
    `updated` had another spec (the rest were unchanged); `removed`: the names the app
    declared before and no longer does, deleted."""

    declared: int
    created: int
    updated: int
    removed: list[str]

    def line(self) -> str:
        """The start line: "3 declared schedules: 1 created, 0 updated, 1 removed"."""
        return (f"{self.declared} declared schedules: {self.created} created, "
                f"{self.updated} updated, {len(self.removed)} removed")


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Marker).decode


def declare_schedule(name: str, task: str, payload: Any = None, *, cron: str,
                     queue: str | None = None, timeout: float | None = None,
                     retry: RetryPolicy | None = None, delivery: str | None = None,
                     priority: int | None = None, concurrency_key: str | None = None,
                     tz: str | None = None, catchup: str | None = None,
                     catchup_limit: int | None = None, overlap: str | None = None,
                     start_at: datetime | None = None, end_at: datetime | None = None,
                     on_time_within: float | None = None) -> DeclaredSchedule:
    """A declaration, checked now with no I/O (ValidationError naming the option): the name,
    the task, the cron expression and time zone, the queue and the timing options."""
    options = {"cron": cron, "queue": queue, "timeout": timeout, "retry": retry,
               "delivery": delivery, "priority": priority, "concurrency_key": concurrency_key,
               "tz": tz, "catchup": catchup, "catchup_limit": catchup_limit,
               "overlap": overlap, "start_at": start_at, "end_at": end_at,
               "on_time_within": on_time_within}
    spec = _named_spec(name, task, payload, options)
    check_task(task)
    if queue is not None:
        check_queue(queue)
    CronSpec(cron, tz or "UTC")
    spec.schedule(0)  # catchup, overlap, start_at / end_at: checked as a submit checks them
    return DeclaredSchedule(name, task, payload, options)


def declare(core: ClientState, app: str, schedules: Iterable[DeclaredSchedule]) -> Op[Declared]:
    """Apply `app`'s declared schedules: upsert each, delete those `app` declared before and
    no longer does. `app` names the code that declares them (`sched scheduler --app`'s
    MODULE:ATTRIBUTE): another app's declarations are left alone."""
    if not isinstance(app, str) or not app.strip():
        raise ValidationError("app", f"{app!r} is not an app name; give the one its "
                                     "processes start with (MODULE:ATTRIBUTE)")
    wanted = list(schedules)
    names = [s.name for s in wanted]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValidationError("name", f"{', '.join(map(repr, twice))} declared twice; give each "
                                      "declared schedule its own name")
    yield from ready(core)
    pipe = Pipe()
    pipe.hgetall(core.keys.declared)
    stored = {_text(name): _decode(marker) for name, marker in (yield pipe)[0].items()}
    keep = set(names)
    gone = {name: marker for name, marker in stored.items()
            if marker.app == app and name not in keep}
    if not wanted and not gone:
        return Declared(0, 0, 0, [])
    yield from ensure_namespace(core)  # its shard count, which places keyed schedules' ids
    ids = [named_id(s.name, s.options.get("concurrency_key"), core.shards) for s in wanted]
    before = yield from _specs(core, ids)
    # Their task names come from code, as a TaskHandle's do: no catalog check (a scheduler
    # node may start before the workers that register them).
    core.vouched.update(s.task for s in wanted)
    for s in wanted:
        yield from schedule(core, s.name, s.task, s.payload, **s.options)
    after = yield from _specs(core, ids)
    pipe = Pipe()
    if wanted:
        pipe.hset(core.keys.declared, mapping={
            name: _encode(Marker(app, job_id)) for name, job_id in zip(names, ids, strict=True)})
    for name, marker in gone.items():
        try:
            yield from delete_job(core, marker.job_id, REMOVED_REASON)
        except JobNotFound:
            pass  # removed by hand, or by retention
        # A later declaration of the same spec makes it a series again (schedule() leaves a
        # deleted job deleted while its spec is the one it was deleted with).
        pipe.hdel(core.job_key(marker.job_id), "spec")
        pipe.hdel(core.keys.declared, name)
    yield pipe
    created = sum(1 for b in before if b is None)
    updated = sum(1 for b, a in zip(before, after, strict=True) if b is not None and b != a)
    return Declared(len(wanted), created, updated, sorted(gone))


def _specs(core: ClientState, job_ids: list[str]) -> Op[list[str | None]]:
    """Each job's spec digest (None: no such job)."""
    if not job_ids:
        return []
    pipe = Pipe()
    for job_id in job_ids:
        pipe.hget(core.job_key(job_id), "spec")
    return [None if v is None else _text(v) for v in (yield pipe)]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
