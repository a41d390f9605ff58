"""Jobs: submitting them (`submit`, `submit_many`; scheduler/sdk/batching.py validates and
packs a batch), reading them and their slots (`get_job`, `list_jobs`, `slots`,
`latest_slots`, `get_slot`, `progress`), and the operator's actions on their slots (`cancel`, and the
dead-letter queue: `dead_letters`, `replay`, `purge`).

Operator actions are one Lua transition per shard, all shards in one pipelined round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

import scheduler.scripts.calls as scripts
from scheduler.core.errors import ConfigError, DurabilityError, SlotNotFound, ValidationError
from scheduler.core.jobspec import JobSpec, one_spec, schedule_arguments
from scheduler.core.keys import check_job_id, shard_of, slot_id, split_slot_id
from scheduler.core.models import Job, Progress, RetryPolicy, Slot, check_reason, slot_from_hash
from scheduler.core.states import Durability
from scheduler.redis.failures import REDIS_ERRORS, RedisErrors
from scheduler.scripts.replies import Code, codes
from scheduler.sdk.batching import Batch, nothing_written
from scheduler.sdk.catalog import check_tasks
from scheduler.sdk.requests import Op, Pipe, Scripts, ScriptStream
from scheduler.sdk.state import ClientState, durability_of, ensure_namespace, ready

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


def _check_fsync(core: ClientState) -> Op[None]:
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


def submit(core: ClientState, task: str, payload: Any = None, queue: str | None = None,
           timeout: float | None = None, retry: RetryPolicy | None = None,
           delivery: str | None = None, priority: int | None = None,
           dedupe_key: str | None = None,
           delay: float | timedelta | None = None, at: datetime | None = None,
           cron: str | None = None, tz: str | None = None, catchup: str | None = None,
           catchup_limit: int | None = None, overlap: str | None = None,
           start_at: datetime | None = None, end_at: datetime | None = None,
           durability: str | None = None, dedupe_ttl: float | None = None,
           debounce: float | None = None, concurrency_key: str | None = None,
           on_time_within: float | None = None) -> Op[str]:
    """Submit one job; returns its id (the first job's id for a repeated dedupe key).

    Runs now unless one of delay=, at=, cron= is given (with cron: tz=, catchup=,
    catchup_limit=, overlap=, start_at=, end_at=, on_time_within=); see JobSpec. `priority` 1 (first) to 5
    (last), default 3. `durability` as for submit_many. `dedupe_ttl`, `debounce`: a dedupe
    key's window and debounce (JobSpec; the docs' "Dedupe windows and debounce" guide).
    `concurrency_key`: the tenant the job runs for, 1-128 characters from A-Z a-z 0-9 _ . @
    + = / : - (a queue's per-key limit and fair turns between keys: the docs' "Many tenants
    on one queue" guide); the job's id is then drawn in the key's home shard."""
    # No `*`: the clients' submit (keyword-only there) passes its arguments in order, as
    # binding this many keywords costs more than the rest of the call's wrapping (bench
    # submit, single submits).
    jobs = one_spec(task, payload, queue, timeout, retry, delivery, dedupe_key,
                    schedule_arguments(locals()), priority, dedupe_ttl, debounce,
                    concurrency_key)
    return (yield from submit_many(core, jobs, durability=durability))[0]


def submit_many(core: ClientState, jobs: Iterable[JobSpec | Mapping[str, Any]], *,
                durability: str | None = None, ids: Sequence[str] | None = None
                ) -> Op[list[str]]:
    """Submit a batch in one pipelined round trip; ids in input order. Every job is
    validated before anything is written. Each shard's part (up to 500 jobs) is written
    atomically; if a Redis failure leaves any job unwritten, or its fate unknown,
    SubmitError says which (`written` holds exactly the ids that are in Redis).

    `durability` (default: the client's): "primary" returns once the primary has the jobs;
    "replicated" also waits (one WAIT for the batch) until the client's `replicas` confirm
    them, "fsynced" (Redis 7.2+ with the AOF on; refused before writing otherwise) until
    the primary's AOF fsynced them (WAITAOF); both up to the client's
    `replica_timeout_s`, else DurabilityError.

    `ids`: the ids the jobs are to have, in input order, instead of fresh ones (a job with a
    dedupe key has its key's, one with a concurrency key an id in the key's home shard:
    jobspec.keyed_job_id; scheduler/outbox/ names its jobs before they reach Redis). A
    job whose id is already in Redis is not written again, so the same batch sent twice
    writes each job once."""
    jobs = list(jobs)
    if core.tracer is not None:  # one span around the call (scheduler/observe/tracing.py)
        return (yield from core.tracer.submit(
            jobs, lambda extra: _submit(core, jobs, durability, extra, ids)))
    return (yield from _submit(core, jobs, durability, (), ids))


def _submit(core: ClientState, jobs: list[JobSpec | Mapping[str, Any]], durability: str | None,
            extra: tuple[Any, ...], ids: Sequence[str] | None = None) -> Op[list[str]]:
    at = core.at
    mode = core.durability if durability is None else durability_of(durability)
    wait: tuple[Any, ...] | None = None
    if mode is Durability.REPLICATED:
        wait = ("WAIT", core.replicas, core.replica_timeout_ms)
    elif mode is Durability.FSYNCED:
        wait = ("WAITAOF", 1, 0, core.replica_timeout_ms)
    try:
        yield from ready(core)
        if mode is Durability.FSYNCED:
            yield from _check_fsync(core)
        # validates every job before anything is written
        batch = Batch(core, jobs, extra, ids)
        if core.unseen and (yield from check_tasks(core, tuple(core.unseen))):
            batch = Batch(core, jobs, extra, ids)  # the catalog changed: its defaults too
        before = (core.shards, core.max_payload_bytes)
        yield from ensure_namespace(core)
        if (core.shards, core.max_payload_bytes) != before:  # another client made it first
            batch = Batch(core, jobs, extra, ids)
    except REDIS_ERRORS as exc:
        raise nothing_written(len(jobs), exc, at) from exc
    exists: list[bool] | None = None
    cause: RedisErrors | None = None
    try:
        # Each call is packed while Redis runs the one before (ScriptStream).
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
    if batch.windowed:
        batch.settle(results)
    wanted = 1 if mode is Durability.FSYNCED else core.replicas
    if wait is not None and confirmed < wanted:
        raise not_replicated(core, batch.ids, max(confirmed, 0), mode)
    return batch.ids


def get_job(core: ClientState, job_id: str) -> Op[Job]:
    """The job as submitted, with its next fire time (`next_fire_ms`) and, once deleted,
    `deleted_ms`; JobNotFound when Redis does not hold it."""
    yield from ready(core)
    pipe = Pipe()
    pipe.hgetall(core.job_key(job_id))
    pipe.zscore(core.cron_key(job_id), job_id)
    raw, watermark = yield pipe
    return core.job(job_id, raw, watermark)


def list_jobs(core: ClientState, limit: int = 100) -> Op[list[Job]]:
    """Jobs with a schedule (delayed, at, cron), newest first, with their next fire
    time. Immediate jobs are not indexed (see `sched runs` / `slots` for those)."""
    yield from ready(core)
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


def get_slot(core: ClientState, slot: str) -> Op[Slot]:
    """One run of a job (its id is `job_id:fire_ms`), with its status and attempts;
    SlotNotFound once it has left Redis (`runs()` reads the history store too)."""
    yield from ready(core)
    pipe = Pipe()
    pipe.hgetall(core.slot_key(slot))
    raw = (yield pipe)[0]
    if not raw:
        raise SlotNotFound(slot)
    return slot_from_hash(slot, raw)


def progress(core: ClientState, job_or_slot_id: str) -> Op[Progress | None]:
    """The last `ctx.progress` a handler reported (fraction, message, at_ms, attempt) for a
    slot (`job_id:fire_ms`), or for a job's latest slot (a recurring job's latest may be
    an occurrence made ahead that has not run: pass the slot id); None when it reported
    none.
    Reports reach Redis with the worker's next heartbeat (a third of the lease), not at
    once. SlotNotFound / JobNotFound once it has left Redis."""
    if ":" in job_or_slot_id:
        return (yield from get_slot(core, job_or_slot_id)).progress
    found = yield from slots(core, job_or_slot_id, last=1)
    return found[-1].progress if found else None


def slots(core: ClientState, job_id: str, last: int | None = None) -> Op[list[Slot]]:
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


def latest_slots(core: ClientState, job_ids: Iterable[str], last: int = 1
                 ) -> Op[dict[str, list[Slot]]]:
    """Each job's latest `last` slots of its runs set (a recurring job's occurrences, and the
    runs `trigger()` added to any job), in fire-time order, in two round trips for all the
    jobs (`slots()` costs three per job). A job that is not recurring and was never
    triggered has none here (`slots()` has its one)."""
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValidationError("last", f"{last!r} is not allowed; must be an integer >= 1")
    ids = [check_job_id(j) for j in job_ids]
    yield from ready(core)
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


def _by_shard(core: ClientState, slot_ids: Iterable[str]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for slot in slot_ids:
        job_id, _ = split_slot_id(slot)
        out.setdefault(shard_of(job_id, core.shards), []).append(slot)
    return out


def cancel(core: ClientState, ids: str | Iterable[str], reason: str = "cancelled by operator"
           ) -> Op[dict[str, str]]:
    """Cancel slots (or every slot of a job id); returns what happened to each slot.
    `reason`, recorded on each slot, is one line of printable text of at most
    MAX_REASON_CHARS characters (ValidationError otherwise, nothing cancelled)."""
    check_reason(reason)
    slot_ids: list[str] = []
    for item in [ids] if isinstance(ids, str) else ids:
        if ":" in item:
            slot_ids.append(item)
        else:
            slot_ids += [s.slot_id for s in (yield from slots(core, item))]
    yield from ready(core)
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


def dead_letters(core: ClientState, limit: int = 100) -> Op[list[DeadLetter]]:
    """The most recent dead slots across all shards, newest first."""
    yield from ready(core)
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


def _on_dead(core: ClientState, build: Callable[..., scripts.Call],
             slot_ids: Iterable[str] | None) -> Op[int]:
    yield from ready(core)
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


def replay(core: ClientState, slot_ids: Iterable[str] | None = None) -> Op[int]:
    """Dispatch dead slots again as new attempts of the same slots (None: all); returns how
    many were replayed."""
    return (yield from _on_dead(core, scripts.replay, slot_ids))


def purge(core: ClientState, slot_ids: Iterable[str] | None = None) -> Op[int]:
    """Remove slots from the dead-letter queue (None: all); their history stays."""
    return (yield from _on_dead(core, scripts.purge, slot_ids))


def not_replicated(core: ClientState, ids: list[str], confirmed: int,
                   mode: Durability = Durability.REPLICATED) -> DurabilityError:
    if mode is Durability.FSYNCED:
        what, wanted, loss = "its AOF did not fsync them", 1, "a restart"
    else:
        what = f"only {confirmed} of the {core.replicas} replica(s) asked confirmed them"
        wanted, loss = core.replicas, "a failover"
    return DurabilityError(
        f"Redis at {core.at} wrote the {len(ids)} job(s) but {what} within "
        f"{core.replica_timeout_ms} ms: they may or may not survive {loss}; submitting "
        f"them again with the same dedupe keys is safe (DurabilityError.written has their ids)",
        core.at, ids, confirmed, wanted)

