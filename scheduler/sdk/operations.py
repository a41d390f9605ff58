"""Every SDK operation, written once without I/O (scheduler/sdk/core.py says how): `Client`
and `AsyncClient` (scheduler/sdk/client.py) drive these generators, so each method exists in both
by construction (tests/test_client.py checks it) and behaves the same in both.

Operator actions (cancel, the dead-letter queue) are one Lua transition per shard, all shards
in one pipelined round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import msgspec

import scheduler.scripts.calls as scripts
from scheduler.core.errors import (
    ConfigError,
    JobNotFound,
    NamespaceError,
    SlotNotFound,
    StoreUnavailable,
    ValidationError,
)
from scheduler.core.jobspec import JobSpec, one_spec, schedule_arguments
from scheduler.core.keys import check_job_id, shard_of, slot_id, split_slot_id
from scheduler.core.models import Job, RetryPolicy, Slot, slot_from_hash
from scheduler.core.namespace import META_FIELDS, check_payload_limit
from scheduler.core.states import Durability
from scheduler.observe.status import (
    Status,
    WorkerStatus,
    read_status,
    read_status_async,
    read_workers,
    read_workers_async,
)
from scheduler.redis.failures import REDIS_ERRORS, RedisErrors
from scheduler.scripts.replies import Code, codes
from scheduler.sdk.batching import Batch, nothing_written
from scheduler.sdk.core import (
    Core,
    Io,
    Op,
    Pipe,
    Scripts,
    ScriptStream,
    StoreCall,
    durability_of,
    history_query,
    merge_runs,
    not_replicated,
)

CANCEL_RESULTS = {
    Code.CANCELLED: "cancelled",
    Code.CANCEL_REQUESTED: "cancel requested (running: the worker stops it at its next "
                           "heartbeat)",
    Code.TERMINAL: "already finished",
    Code.MISSING: "not found",
}


class DeadLetter(msgspec.Struct, frozen=True):
    slot: Slot
    died_ms: int

    @property
    def error(self) -> str | None:
        return self.slot.attempts[-1].error if self.slot.attempts else None


def _check_fsync(core: Core) -> Op[None]:
    """durability="fsynced" needs WAITAOF (Redis 7.2+) and the AOF on: refused before any
    write otherwise (asked once per client)."""
    if core.fsync_checked:
        return
    pipe = Pipe()
    pipe.info("server")
    pipe.info("persistence")
    server, persistence = yield pipe
    version = str(server.get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < (7, 2) or not int(persistence.get("aof_enabled", 0)):
        raise ConfigError(f'durability="fsynced" needs WAITAOF (Redis 7.2 or later) and '
                          f"appendonly yes; Redis at {core.at} is {version} with the AOF "
                          f"{'on' if int(persistence.get('aof_enabled', 0)) else 'off'}: use "
                          f'durability="replicated" or turn the AOF on')
    core.fsync_checked = True


def _ready(core: Core) -> Op[None]:
    """Learn the namespace's shard count and anchor the clock, in one round trip, when
    either is not known yet."""
    need_meta, need_time = not core.shards, core.clock.stale()
    if not (need_meta or need_time):
        return
    pipe = Pipe()
    if need_meta:
        pipe.hmget(core.keys.meta, *META_FIELDS)
    if need_time:
        pipe.time()
    replies = yield pipe
    if need_meta:
        core.adopt(replies[0], written=False)
    if need_time:
        core.clock.anchor(replies[-1])


def _ensure_namespace(core: Core) -> Op[None]:
    """Create the namespace (namespace.py's policy) the first time this client writes."""
    if not core.created:
        pipe = Pipe()
        core.namespace_writes(pipe)
        core.adopt((yield pipe)[-1], written=True)
        pipe = Pipe()
        core.config_writes(pipe)
        yield pipe
        core.created = True


def create_namespace(core: Core, max_payload_bytes: int | None = None) -> Op[int]:
    """Create the namespace now, with this client's shard count and payload limit (or
    `max_payload_bytes`), as its first submit would. A no-op when it exists with them; a
    shard count given to the client, or a `max_payload_bytes`, that differs from the stored
    one is a NamespaceError naming both. For deployments that start workers and scheduler
    nodes before anything is submitted: they wait for the namespace, and start within about
    a second of its creation. Returns its shard count."""
    if max_payload_bytes is not None:
        check_payload_limit(max_payload_bytes)
    yield from _ready(core)
    if max_payload_bytes is not None and not core.created:
        core.max_payload_bytes = max_payload_bytes
    yield from _ensure_namespace(core)
    if max_payload_bytes is not None and core.max_payload_bytes != max_payload_bytes:
        raise NamespaceError(
            f"namespace {core.namespace!r} has a payload limit of {core.max_payload_bytes:,} "
            f"bytes in Redis, not the {max_payload_bytes:,} asked for: the limit is fixed when "
            f"a namespace is created (omit it to keep {core.max_payload_bytes:,}, or use a new "
            f"namespace)")
    return core.shards


def shards(core: Core) -> Op[int]:
    """The namespace's shard count (the one it will be created with, before its first
    write)."""
    yield from _ready(core)
    return core.shards


def now_ms(core: Core) -> Op[int]:
    """Redis time, as every transition sees it."""
    yield from _ready(core)
    return core.clock.now_ms()


def submit(core: Core, task: str, payload: Any = None, *, queue: str = "default",
           timeout: float | None = None, retry: RetryPolicy | None = None,
           delivery: str = "at_least_once", priority: int | None = None,
           dedupe_key: str | None = None,
           delay: float | timedelta | None = None, at: datetime | None = None,
           cron: str | None = None, tz: str | None = None, catchup: str | None = None,
           catchup_limit: int | None = None, overlap: str | None = None,
           start_at: datetime | None = None, end_at: datetime | None = None,
           durability: str | None = None) -> Op[str]:
    """Submit one job; returns its id (the first job's id for a repeated dedupe key).

    Runs now unless one of delay=, at=, cron= is given (with cron: tz=, catchup=,
    catchup_limit=, overlap=, start_at=, end_at=); see JobSpec. `priority` 1 (first) to 5
    (last), default 3. `durability` as for submit_many."""
    jobs = one_spec(task, payload, queue, timeout, retry, delivery, dedupe_key,
                    schedule_arguments(locals()), priority)
    return (yield from submit_many(core, jobs, durability=durability))[0]


def submit_many(core: Core, jobs: Iterable[JobSpec | Mapping[str, Any]], *,
                durability: str | None = None) -> Op[list[str]]:
    """Submit a batch in one pipelined round trip; ids in input order. Every job is
    validated before anything is written. Each shard's part (up to 500 jobs) is written
    atomically; if a Redis failure leaves any job unwritten, or its fate unknown,
    SubmitError says which (`written` holds exactly the ids that are in Redis).

    `durability` (default: the client's): "primary" returns once the primary has the jobs;
    "replicated" also waits (one WAIT for the batch) until the client's `replicas` confirm
    them, "fsynced" (Redis 7.2+ with the AOF on; refused before writing otherwise) until
    the primary's AOF fsynced them (WAITAOF); both up to the client's
    `replica_timeout_s`, else DurabilityError."""
    jobs = list(jobs)
    if core.tracer is not None:  # one span around the call (tracing.py)
        return (yield from core.tracer.submit(jobs, lambda extra: _submit(core, jobs,
                                                                          durability, extra)))
    return (yield from _submit(core, jobs, durability, ()))


def _submit(core: Core, jobs: list[JobSpec | Mapping[str, Any]], durability: str | None,
            extra: tuple[Any, ...]) -> Op[list[str]]:
    at = core.at
    mode = core.durability if durability is None else durability_of(durability)
    wait: tuple[Any, ...] | None = None
    if mode is Durability.REPLICATED:
        wait = ("WAIT", core.replicas, core.replica_timeout_ms)
    elif mode is Durability.FSYNCED:
        wait = ("WAITAOF", 1, 0, core.replica_timeout_ms)
    try:
        yield from _ready(core)
        if mode is Durability.FSYNCED:
            yield from _check_fsync(core)
        batch = Batch(core, jobs, extra)  # validates every job before anything is written
        before = (core.shards, core.max_payload_bytes)
        yield from _ensure_namespace(core)
        if (core.shards, core.max_payload_bytes) != before:  # another client made it first
            batch = Batch(core, jobs, extra)
    except REDIS_ERRORS as exc:
        raise nothing_written(len(jobs), exc, at) from exc
    exists: list[bool] | None = None
    cause: RedisErrors | None = None
    try:
        # Each call is packed while Redis runs the one before (script_stream.py).
        results, confirmed = yield ScriptStream(batch.calls(), wait)
    except REDIS_ERRORS as exc:  # unknown which calls ran: ask
        results, cause = [None] * len(batch.members), exc
        try:
            pipe = Pipe()
            batch.ask_exist(pipe, core)
            exists = [bool(x) for x in (yield pipe)]
        except REDIS_ERRORS:
            pass
    batch.outcome(results, exists, at, cause)
    wanted = 1 if mode is Durability.FSYNCED else core.replicas
    if wait is not None and confirmed < wanted:
        raise not_replicated(core, batch.ids, max(confirmed, 0), mode)
    return batch.ids


def get_job(core: Core, job_id: str) -> Op[Job]:
    yield from _ready(core)
    pipe = Pipe()
    pipe.hgetall(core.job_key(job_id))
    pipe.zscore(core.cron_key(job_id), job_id)
    raw, watermark = yield pipe
    return core.job(job_id, raw, watermark)


def list_jobs(core: Core, limit: int = 100) -> Op[list[Job]]:
    """Jobs with a schedule (delayed, at, cron), newest first, with their next fire
    time. Immediate jobs are not indexed (see `sched runs` / `slots` for those)."""
    yield from _ready(core)
    pipe = Pipe()
    for shard in range(core.shards):
        pipe.zrevrange(core.keys.jobs(shard), 0, limit - 1, withscores=True)
    ids = core.list_order((yield pipe), limit)
    pipe = Pipe()
    for job_id in ids:
        pipe.hgetall(core.job_key(job_id))
        pipe.zscore(core.cron_key(job_id), job_id)
    out = yield pipe
    return [core.job(j, out[2 * i], out[2 * i + 1]) for i, j in enumerate(ids)]


def get_slot(core: Core, slot: str) -> Op[Slot]:
    yield from _ready(core)
    pipe = Pipe()
    pipe.hgetall(core.slot_key(slot))
    raw = (yield pipe)[0]
    if not raw:
        raise SlotNotFound(slot)
    return slot_from_hash(slot, raw)


def slots(core: Core, job_id: str, last: int | None = None) -> Op[list[Slot]]:
    """Every slot of the job in fire-time order (one for a job that is not recurring);
    `last`: only the latest that many (a recurring job's in Redis can be many)."""
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
        raise ValidationError("last", f"{last!r} is not allowed; must be an integer >= 1")
    job = yield from get_job(core, job_id)
    if not job.cron:
        return [(yield from get_slot(core, slot_id(job_id, job.fire_ms)))]
    pipe = Pipe()
    pipe.zrange(core.runs_key(job_id), 0 if last is None else -last, -1)
    ids = (yield pipe)[0]
    pipe = Pipe()
    for s in ids:
        pipe.hgetall(core.slot_key(s.decode()))
    return [slot_from_hash(s.decode(), raw)
            for s, raw in zip(ids, (yield pipe), strict=True) if raw]


def latest_slots(core: Core, job_ids: Iterable[str], last: int = 1
                 ) -> Op[dict[str, list[Slot]]]:
    """Each job's latest `last` slots of its runs set (a recurring job's occurrences, and the
    runs `trigger()` added to any job), in fire-time order, in two round trips for all the
    jobs (`slots()` costs three per job). A job that is not recurring and was never
    triggered has none here (`slots()` has its one)."""
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValidationError("last", f"{last!r} is not allowed; must be an integer >= 1")
    ids = [check_job_id(j) for j in job_ids]
    yield from _ready(core)
    if not ids:
        return {}
    pipe = Pipe()
    for job_id in ids:
        pipe.zrange(core.runs_key(job_id), -last, -1)
    runs = [[s.decode() for s in found] for found in (yield pipe)]
    pipe = Pipe()
    for found in runs:
        for s in found:
            pipe.hgetall(core.slot_key(s))
    raws = iter((yield pipe))
    return {job_id: [slot_from_hash(s, raw) for s, raw in ((s, next(raws)) for s in found)
                     if raw]
            for job_id, found in zip(ids, runs, strict=True)}


def history(core: Core, *, job_id: str | None = None, status: str | None = None,
            since: datetime | int | None = None, until: datetime | int | None = None,
            limit: int = 100) -> Op[list[Slot]]:
    """Slots from the history store, newest fire time first. since/until bound the fire
    time (aware datetimes or ms); status is a slot status."""
    query = history_query(core.namespace, job_id, status, since, until, limit)
    namespace = query.pop("namespace")
    return (yield StoreCall("history", (namespace,), query))  # type: ignore[no-any-return]


def runs(core: Core, job_id: str) -> Op[list[Slot]]:
    """A job's slots: those still in Redis, and from the history store those that have
    left it (retention); JobNotFound when neither knows the job."""
    try:
        live = yield from slots(core, job_id)
    except JobNotFound:
        live = []
    try:
        past = yield from history(core, job_id=job_id, limit=10_000)
    except StoreUnavailable:
        if not live:
            raise
        past = []  # Redis alone still answers for the slots it holds
    return merge_runs(job_id, live, past)


def status(core: Core) -> Op[Status]:
    """The namespace at a glance: queues (depth, lag, rates), due backlog, dead letters,
    workers, shard owners. Read-only; a few pipelined round trips (scheduler/observe/status.py)."""
    return (yield Io(lambda r, *a: read_status(r, *a)[0], read_status_async,  # type: ignore[no-any-return]
                     (core.keys, core.clock)))


def workers(core: Core) -> Op[list[WorkerStatus]]:
    """The most recently seen workers (alive first), with heartbeats and in-flight counts."""
    return (yield Io(read_workers, read_workers_async,  # type: ignore[no-any-return]
                     (core.keys, core.clock)))


# --- operator actions -------------------------------------------------------------------

def _by_shard(core: Core, slot_ids: Iterable[str]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for slot in slot_ids:
        job_id, _ = split_slot_id(slot)
        out.setdefault(shard_of(job_id, core.shards), []).append(slot)
    return out


def cancel(core: Core, ids: str | Iterable[str], reason: str = "cancelled by operator"
           ) -> Op[dict[str, str]]:
    """Cancel slots (or every slot of a job id); returns what happened to each slot."""
    slot_ids: list[str] = []
    for item in [ids] if isinstance(ids, str) else ids:
        if ":" in item:
            slot_ids.append(item)
        else:
            slot_ids += [s.slot_id for s in (yield from slots(core, item))]
    yield from _ready(core)
    groups = _by_shard(core, slot_ids)
    now = core.clock.now_ms()
    calls = [scripts.cancel(core.keys.prefix(s), now, core.events_maxlen, reason, group)
             for s, group in groups.items()]
    replies = yield Scripts(calls)
    result: dict[str, str] = {}
    for group, reply in zip(groups.values(), replies, strict=True):
        for slot, code in zip(group, codes(reply, "cancel"), strict=True):
            result[slot] = CANCEL_RESULTS[code]
    return result


def dead_letters(core: Core, limit: int = 100) -> Op[list[DeadLetter]]:
    """The most recent dead slots across all shards, newest first."""
    yield from _ready(core)
    pipe = Pipe()
    for shard in range(core.shards):
        pipe.zrevrange(core.keys.dlq(shard), 0, limit - 1, withscores=True)
    entries: list[tuple[int, str, int]] = []
    for shard, rows in enumerate((yield pipe)):
        entries += [(shard, member.decode(), int(score)) for member, score in rows]
    entries.sort(key=lambda e: -e[2])
    entries = entries[:limit]
    pipe = Pipe()
    for shard, slot, _ in entries:
        pipe.hgetall(core.keys.slot(shard, slot))
    raws = yield pipe
    return [DeadLetter(slot_from_hash(slot, raw), died)
            for (_, slot, died), raw in zip(entries, raws, strict=True) if raw]


def _on_dead(core: Core, build: Callable[..., scripts.Call],
             slot_ids: Iterable[str] | None) -> Op[int]:
    yield from _ready(core)
    if slot_ids is None:
        pipe = Pipe()
        for shard in range(core.shards):
            pipe.zrange(core.keys.dlq(shard), 0, -1)
        slot_ids = [m.decode() for rows in (yield pipe) for m in rows]
    groups = _by_shard(core, slot_ids)
    now = core.clock.now_ms()
    calls = [build(core.keys.prefix(s), now, core.events_maxlen, group)
             for s, group in groups.items()]
    return sum(c is Code.OK for call, reply in zip(calls, (yield Scripts(calls)), strict=True)
               for c in codes(reply, call.script))


def replay(core: Core, slot_ids: Iterable[str] | None = None) -> Op[int]:
    """Dispatch dead slots again as new attempts of the same slots (None: all); returns how
    many were replayed."""
    return (yield from _on_dead(core, scripts.replay, slot_ids))


def purge(core: Core, slot_ids: Iterable[str] | None = None) -> Op[int]:
    """Remove slots from the dead-letter queue (None: all); their history stays."""
    return (yield from _on_dead(core, scripts.purge, slot_ids))
