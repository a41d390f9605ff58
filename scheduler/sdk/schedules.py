"""Managing a job's series: end it (`delete_job`), see its next fire times (`next_fires`),
run it once more now (`trigger`), and named schedules (`schedule`) that a deploy declares
again and again. SDK operations: generators that yield requests (scheduler/sdk/requests.py),
driven by Client and AsyncClient alike."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import msgspec

import scheduler.scripts.calls as scripts
from scheduler.core.cron import CronSpec
from scheduler.core.errors import JobNotFound, SchedulerError, ValidationError
from scheduler.core.jobspec import SCHEDULE_OPTIONS, JobSpec, placed_id
from scheduler.core.keys import check_job_id, key_shard, shard_of
from scheduler.core.ledger import unmade
from scheduler.core.models import RetryPolicy, check_reason
from scheduler.core.timing import utc_of_ms
from scheduler.redis.failures import REDIS_ERRORS
from scheduler.scripts.replies import Code, Deleted, codes, triggered
from scheduler.sdk.batching import hash_fields, nothing_written, validate, with_catalog
from scheduler.sdk.catalog import check_tasks
from scheduler.sdk.jobs import get_job
from scheduler.sdk.requests import Op, Pipe, Scripts
from scheduler.sdk.state import ClientState, ensure_namespace, ready

MAX_NEXT_FIRES = 1000


class JobDeleted(msgspec.Struct, frozen=True):
    """What `delete_job` did: `cancelled` slots that had not started, `running` slots left to
    finish; `before` when the job had been deleted already (nothing changed)."""

    job_id: str
    cancelled: int
    running: int
    before: bool = False


def delete_job(core: ClientState, job_id: str, reason: str = "deleted by operator") -> Op[JobDeleted]:
    """End a job's series: a recurring job creates no occurrence after this, every slot of
    it that has not started is cancelled, and a running one finishes. The definition stays
    (`get_job` shows `deleted_ms`). Deleting twice changes nothing the second time.
    `reason`, recorded on the job, is one line of printable text of at most MAX_REASON_CHARS
    characters (ValidationError otherwise, nothing changed)."""
    check_reason(reason)
    yield from ready(core)
    pipe = Pipe()
    pipe.hmget(core.job_key(job_id), "cron", "tz", "end_ms")
    pipe.zscore(core.cron_key(job_id), job_id)
    (cron, tz, end), watermark = yield pipe
    now = core.clock.now_ms()
    call = scripts.delete_job(core.prefix_of(job_id), now, core.events_maxlen,
                              job_id, " ".join(reason.split()),
                              _unmade(cron, tz, end, watermark, now))
    done = Deleted.decode((yield Scripts([call]))[0])
    if done.code is Code.MISSING:
        raise JobNotFound(job_id)
    return JobDeleted(job_id, done.cancelled, done.running, before=done.code is Code.TERMINAL)


class Forgotten(msgspec.Struct, frozen=True):
    """What `forget` did: `jobs` removed from Redis with `keys` keys of theirs; `left` jobs
    kept whole because a slot of theirs had not ended."""

    jobs: int
    keys: int
    left: int


FORGET_BATCH = 500  # job ids per script call


def forget(core: ClientState, job_ids: list[str]) -> Op[Forgotten]:
    """Remove ended jobs from Redis now: each job whose slots have all ended leaves with its
    slots and their index entries (a success's entry in the completion list waits for the
    node's expirer, which drops entries whose slot is gone); a job with a slot that has not
    ended stays whole (delete_job it first to cancel what has not started). Jobs Redis does
    not hold are skipped. The history store keeps what it recorded. For work whose record
    nobody needs, such as `sched verify`'s canaries; other work leaves by the namespace's
    retention."""
    ids = [check_job_id(j) for j in job_ids]
    yield from ready(core)
    by_prefix: dict[str, list[str]] = {}
    for job_id in ids:
        by_prefix.setdefault(core.prefix_of(job_id), []).append(job_id)
    calls = [scripts.forget(prefix, batch[i:i + FORGET_BATCH])
             for prefix, batch in by_prefix.items()
             for i in range(0, len(batch), FORGET_BATCH)]
    if not calls:
        return Forgotten(0, 0, 0)
    replies = yield Scripts(calls)
    return Forgotten(*(sum(int(r[k]) for r in replies) for k in range(3)))


def next_fires(core: ClientState, job_id: str, n: int = 10) -> Op[list[datetime]]:
    """The next `n` fire times of a job, from now, as timezone-aware UTC datetimes (to the
    millisecond; `.astimezone(zone)` for local time): a recurring job's coming occurrences
    (within its start_at / end_at), a delayed or `at` job's one fire time while it is ahead;
    none for a job that was deleted or has run."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_NEXT_FIRES:
        raise ValidationError("n", f"{n!r} is not allowed; must be an integer from 1 to "
                                   f"{MAX_NEXT_FIRES}")
    job = yield from get_job(core, job_id)
    if job.next_fire_ms is None:
        return []
    if not job.cron:
        return [utc_of_ms(job.next_fire_ms)]
    out: list[datetime] = []
    for fire in CronSpec(job.cron, job.tz or "UTC").after(job.next_fire_ms - 1):
        if (job.end_ms and fire > job.end_ms) or len(out) == n:
            break
        out.append(utc_of_ms(fire))
    return out


def trigger(core: ClientState, job_id: str) -> Op[str]:
    """Run a job once more now, beside its schedule: a new slot, dispatched at once; returns
    its id. Refused for a deleted job (ValidationError)."""
    yield from ready(core)
    call = scripts.trigger(core.prefix_of(job_id), core.clock.now_ms(), core.events_maxlen,
                           job_id)
    code, slot = triggered((yield Scripts([call]))[0])
    if code is Code.MISSING:
        raise JobNotFound(job_id)
    if code is Code.TERMINAL:
        raise ValidationError("job_id", f"job {job_id!r} was deleted: it cannot be triggered")
    return slot


REDEFINE_TRIES = 8


def schedule(core: ClientState, /, name: str, task: str, payload: Any = None, *, cron: str,
             queue: str | None = None, timeout: float | None = None,
             retry: RetryPolicy | None = None, delivery: str | None = None,
             priority: int | None = None, concurrency_key: str | None = None,
             tz: str | None = None, catchup: str | None = None,
             catchup_limit: int | None = None, overlap: str | None = None,
             start_at: datetime | None = None, end_at: datetime | None = None,
             on_time_within: float | None = None) -> Op[str]:
    """A recurring job identified by `name` (its job id), declared idempotently: the same
    spec writes nothing, a changed spec replaces the definition from the next occurrence
    (occurrences created or dispatched ahead that have not started end cancelled, and the new
    one makes its own; running scheduler nodes take it in their next pass), and any number
    of processes declaring it at once make one series. `cron` is required; the other options
    are submit's that fit a series (jobspec.SCHEDULE_OPTIONS: no dedupe key or window, no
    delay or at). A deleted schedule declared again with the same spec stays deleted; with
    another spec it is a series again. Returns
    the job id: the name, or with a concurrency_key the name placed in the key's home shard
    (`name.<n>`, the same every time: jobspec.placed_id). The concurrency key is then part of
    the schedule's identity: declaring the name with another key (or none) while its series
    lives is refused (ValidationError naming the live job: delete_job it first)."""
    arguments = locals()
    options = {option: arguments[option] for option in SCHEDULE_OPTIONS}
    spec = _named_spec(name, task, payload, options)
    try:
        yield from ready(core)
        if type(task) is str and task not in core.catalog and task not in core.vouched:
            yield from check_tasks(core, (task,))  # before anything is written
        yield from ensure_namespace(core)
        spec = with_catalog(core, spec)  # the task's defaults, in the digest too
        digest = _digest(spec)
        job = validate(core, spec, core.clock.now_ms())
        _, task, queue, fire_ms, _, _ = job
        fields = hash_fields(job)
    except REDIS_ERRORS as exc:
        raise nothing_written(1, exc, core.at) from exc
    job_id = named_id(name, spec.concurrency_key, core.shards)
    yield from _same_key(core, name, job_id, spec.concurrency_key)
    fields = ["task", task, "queue", queue, *fields, "spec", digest]
    prefix = core.keys.prefix(shard_of(job_id, core.shards))
    call = scripts.submit(prefix, core.clock.now_ms(), core.events_maxlen,
                          [(job_id, task, queue, fire_ms, fields[4:])])
    if codes((yield Scripts([call]))[0], "submit")[0] is not Code.OK:  # taken
        yield from _redefine(core, prefix, job_id, spec, digest, fire_ms, fields)
    return job_id


def _unmade(cron: bytes | None, tz: bytes | None, end: bytes | None, watermark: Any,
            now: int) -> list[int]:
    """A recurring job's occurrences from its watermark to now that no node made (what a
    delete or a redefinition drops: the script lists them in the fire ledger); none for a
    job that does not recur, or whose definition does not parse."""
    if not cron or watermark is None:
        return []
    try:
        spec = CronSpec(cron.decode(), (tz or b"UTC").decode())
        return unmade(spec, int(watermark), now, int(end or 0))
    except (SchedulerError, ValueError):
        return []  # a hash written past the SDK: the delete goes on without the listing


def named_id(name: str, concurrency_key: str | None, shards: int) -> str:
    """A named schedule's job id: its name, or with a concurrency key the name placed in the
    key's home shard, where every job of the key lives."""
    if concurrency_key is None:
        return name
    job_id = placed_id(name, key_shard(concurrency_key, shards), shards)
    try:
        return check_job_id(job_id)
    except ValidationError:
        raise ValidationError("name", f"{name!r} is too long for a schedule with a "
                                      f"concurrency_key (its id adds a suffix: {job_id!r}); "
                                      f"use a shorter name") from None


def _placements(name: str, shards: int) -> list[str]:
    """Every id a schedule named `name` can have: the name, and the name placed in each
    shard (one pass over the counters, not a search per shard)."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < shards:
        job_id = f"{name}.{n:x}"
        found.setdefault(shard_of(job_id, shards), job_id)
        n += 1
    return [name, *found.values()]


def _same_key(core: ClientState, name: str, job_id: str, concurrency_key: str | None
              ) -> Op[None]:
    """Refuse a declaration whose concurrency key differs from the one the name's live series
    was declared with: the key decides the id, so it would start a second series beside the
    first (or, at the same id, take over another schedule whose name it is)."""
    ids = [job_id, *(i for i in _placements(name, core.shards) if i != job_id and len(i) <= 128)]
    pipe = Pipe()
    for other in ids:
        pipe.hmget(core.job_key(other), "cron", "deleted_ms", "concurrency_key")
    for other, (cron, deleted, key) in zip(ids, (yield pipe), strict=True):
        key = (key.decode() if isinstance(key, bytes) else key) or None
        if not cron or deleted:
            continue  # none, or its series ended
        if other == job_id:
            if key == concurrency_key:
                continue  # this schedule: the same spec, or one to redefine
        elif other != (placed_id(name, key_shard(key, core.shards), core.shards) if key
                       else name):
            continue  # a job of its own name, not a form of this schedule
        raise ValidationError("concurrency_key", (
            f"schedule {name!r}: job {other!r} is a live series declared "
            + (f"with concurrency_key {key!r}" if key else "without a concurrency_key")
            + f", and a schedule's key decides its id; declare it as it was, or "
              f"delete_job({other!r}) first"))


def _named_spec(name: str, task: str, payload: Any, options: dict[str, Any]) -> JobSpec:
    """The schedule's JobSpec, as declared."""
    try:
        check_job_id(name)
    except ValidationError:
        raise ValidationError("name", f"{name!r} is not allowed; use 1-128 characters from "
                                      "A-Z a-z 0-9 _ . -") from None
    if not options.get("cron"):
        raise ValidationError("cron", "a named schedule needs cron= (for one run, submit)")
    try:
        spec = JobSpec(task=task, payload=payload, **options)
    except TypeError as exc:
        raise ValidationError("options", str(exc)) from None
    return spec


def _digest(spec: JobSpec) -> str:
    """What tells a changed spec from the same: of the spec with the catalog's defaults and
    the built-in queue and delivery in (batching.with_catalog)."""
    fields = msgspec.structs.asdict(spec)
    for option in ("priority", "dedupe_ttl", "debounce", "concurrency_key", "on_time_within"):
        if fields[option] is None:  # specs declared before these options keep their digest
            del fields[option]
    return hashlib.blake2b(msgspec.json.encode(fields, order="sorted"),
                           digest_size=12).hexdigest()


def _redefine(core: ClientState, prefix: str, name: str, spec: JobSpec, digest: str, fire_ms: int,
              fields: list[Any]) -> Op[None]:
    """The name is taken: nothing to do if its spec is this one, else replace it (a
    compare-and-set on the spec read, so racing declarations settle on one)."""
    for _ in range(REDEFINE_TRIES):
        pipe = Pipe()
        pipe.hmget(core.job_key(name), "spec", "cron", "tz", "end_ms")
        pipe.zscore(core.cron_key(name), name)
        (stored, cron, tz, end), watermark = yield pipe
        stored = stored.decode() if isinstance(stored, bytes) else stored or ""
        if stored == digest:
            return
        now = core.clock.now_ms()
        first = CronSpec(spec.cron or "", spec.tz or "UTC").next_after(max(now, fire_ms - 1))
        call = scripts.redefine(prefix, now, core.events_maxlen, name, stored, first, fields,
                                _unmade(cron, tz, end, watermark, now))
        code = codes((yield Scripts([call]))[0][:1], "redefine")[0]
        if code is Code.OK:
            return
        if code is Code.MISSING:
            raise JobNotFound(name)
        if not (yield from get_job(core, name)).cron:
            raise ValidationError("name", f"{name!r} is the id of a job that does not recur; "
                                          "use another name")
    raise ValidationError("name", f"{name!r} kept changing while it was being declared "
                                  f"({REDEFINE_TRIES} tries); try again")
