"""submit_many's batching, without I/O: every job of a call validated before anything is
written, then the Lua calls that write them, made one at a time.

The split is what lets a driver overlap the two processes (a ScriptStream request,
scheduler/sdk/requests.py): `Batch(...)`
does all that can refuse input (names, options, payload encoding and its size), draws the
ids and assigns the shards, so a bad job anywhere raises ValidationError before the first
write; `Batch.calls()` then packs the calls lazily, and the driver sends call k before it
asks for call k+1, so the client packs k+1 while Redis runs k. Packing cannot refuse
anything: it only lays out what was validated.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

import scheduler.scripts.calls as scripts
from scheduler.core.catalog import BUILT_IN, TaskDefaults
from scheduler.core.errors import RedisUnavailable, SubmitError, ValidationError, submit_error
from scheduler.core.jobspec import (
    DEFAULT_RETRY,
    IMMEDIATE,
    TASK_OPTIONS,
    JobSpec,
    WindowId,
    dedupe_job_id,
    job_ids,
    keyed_job_id,
    spec_of,
    window_job_id,
)
from scheduler.core.keys import check_concurrency_key, check_job_id, shard_of, shards_of
from scheduler.core.models import (
    RetryPolicy,
    check_dedupe_key,
    check_delivery,
    check_priority,
    check_queue,
    check_task,
    check_timeout,
    check_window_seconds,
    encode_payload,
    job_fields,
    schedule_fields,
)
from scheduler.core.timing import Schedule, delayed
from scheduler.redis.failures import REDIS_ERRORS, RedisErrors, translate

if TYPE_CHECKING:
    from scheduler.sdk.state import ClientState

SUBMIT_CHUNK = 500  # jobs per script call: bounds how long one call holds Redis
# Calls of at least this many jobs, all with generated ids, are `fresh` (submit.lua's ARGV[5]):
# one marker key per call, alive 10 minutes, instead of an EXISTS per job. Below it the
# EXISTS are cheap and a marker per small call (a single submit) would cost more memory.
FRESH_MIN_JOBS = 32


class FreshId(str):
    """A job id drawn afresh for this submit and placed in its concurrency key's home shard
    (jobspec.keyed_job_id): new as a generated id is, so a call of them stays `fresh`."""


# A validated job: (job id of its dedupe key, a keyed job's FreshId, or None for a generated
# one; task; queue; fire_ms; the payload's JSON text, or None for null; the other job-hash
# field/value pairs, a list shared by every job with the same options: never mutate it).
Validated = tuple[str | None, str, str, int, str | None, list[Any]]


def validate(core: ClientState, spec: JobSpec, now_ms: int) -> Validated:
    """Check one job and encode its payload. Raises ValidationError. An option left at None
    takes the task's default from the catalog (core.catalog), else the built-in one. A
    task the catalog does not list is noted in core.unseen (sdk/catalog.py's check_tasks
    decides what that means once the whole batch is validated)."""
    spec, queue, delivery, timeout, retry, priority = _options(core, spec)
    # Names repeat across a batch: each distinct (task, queue, delivery) of plain strings
    # is checked once (anything else, unhashable values included, every time).
    given = (spec.task, queue, delivery)
    plain = type(given[0]) is str and type(given[1]) is str and type(given[2]) is str
    names = core.checked_names.get(given) if plain else None
    if names is None:
        names = (check_task(spec.task), check_queue(queue), check_delivery(delivery))
        if plain:
            if len(core.checked_names) >= 4096:
                core.checked_names.clear()
            core.checked_names[given] = names
    task, queue, delivery = names
    schedule = spec.schedule(now_ms)
    timeout = None if timeout is None else check_timeout(timeout)
    priority = check_priority(priority)
    dedupe = None if spec.dedupe_key is None else check_dedupe_key(spec.dedupe_key)
    ckey = (None if spec.concurrency_key is None
            else check_concurrency_key(spec.concurrency_key))
    retry = retry or DEFAULT_RETRY
    if not isinstance(retry, RetryPolicy):
        raise ValidationError("retry", "must be a RetryPolicy")
    data = encode_payload(spec.payload, core.max_payload_bytes)
    # Redis's cmsgpack reads no msgpack `bin`: the JSON travels as a str (scripts.pack).
    payload = None if data == b"null" else data.decode()
    if dedupe is None:
        if spec.dedupe_ttl is not None or spec.debounce is not None:
            raise ValidationError("dedupe_key", "dedupe_ttl and debounce need a dedupe_key "
                                                "(the key they hold); give one or drop them")
        # The fields of a job's options, made once per distinct options; a schedule's own
        # fields (a delay's delay_ms) come last, as job_fields() lays them out.
        key = (timeout, retry, delivery, schedule.kind, priority)
        rest = core.option_fields.get(key)
        if rest is None:
            rest = core.option_fields[key] = job_fields(b"null", timeout, retry, delivery,
                                                        None, schedule.kind, None, priority)
        if ckey is not None:  # after the cached fields, as job_fields() lays them out
            rest = [*rest, "concurrency_key", ckey]
        if schedule.fields:
            rest = [*rest, *schedule_fields(schedule.fields)]
        fire_ms = now_ms if schedule is IMMEDIATE else schedule.fire_ms
        if ckey is not None:
            return (FreshId(keyed_job_id(ckey, core.shards, now_ms=now_ms)), task, queue,
                    fire_ms, payload, rest)
        return None, task, queue, fire_ms, payload, rest
    if spec.dedupe_ttl is None and spec.debounce is None:
        rest = job_fields(b"null", timeout, retry, delivery, dedupe, schedule.kind,
                          schedule.fields, priority, ckey)
    else:
        schedule, window = windowed(spec, schedule, dedupe, now_ms, core.shards, ckey)
        rest = job_fields(b"null", timeout, retry, delivery, dedupe, schedule.kind,
                          {**schedule.fields, "dedupe_ttl_ms": window.ttl_ms,
                           "debounce_ms": window.debounce_ms}, priority, ckey)
        return (window, task, queue, now_ms if schedule is IMMEDIATE else schedule.fire_ms,
                payload, rest)
    fire_ms = now_ms if schedule is IMMEDIATE else schedule.fire_ms
    return dedupe_id(dedupe, ckey, core.shards), task, queue, fire_ms, payload, rest


def _options(core: ClientState, spec: JobSpec) -> tuple[JobSpec, Any, Any, Any, Any, Any]:
    """(spec, queue, delivery, timeout, retry, priority) with the task's merged defaults
    (core/catalog.py's rule, one dict lookup), without a copy of the spec per job: only one
    whose window takes a default gets one."""
    defaults = core.catalog.get(spec.task) if type(spec.task) is str else BUILT_IN
    if defaults is None:
        defaults = BUILT_IN
        if spec.task not in core.vouched:
            core.unseen.add(spec.task)
    if (defaults.windowed and spec.dedupe_key is not None
            and (spec.dedupe_ttl is None or spec.debounce is None)):
        spec = with_defaults(spec, defaults)
    return (spec, defaults.queue if spec.queue is None else spec.queue,
            defaults.delivery if spec.delivery is None else spec.delivery,
            defaults.timeout if spec.timeout is None else spec.timeout,
            defaults.retry if spec.retry is None else spec.retry,
            defaults.priority if spec.priority is None else spec.priority)


def with_catalog(core: ClientState, spec: JobSpec) -> JobSpec:
    """`spec` with each option it leaves at None that its task's catalog entry declares
    (`dedupe_ttl` and `debounce` only with a dedupe key), and queue and delivery at their
    built-in defaults when neither says: what validate() applies, as a JobSpec (a named
    schedule's digest is of this)."""
    defaults = core.catalog.get(spec.task) if type(spec.task) is str else None
    return with_defaults(spec, BUILT_IN if defaults is None else defaults)


def with_defaults(spec: JobSpec, defaults: TaskDefaults) -> JobSpec:
    """`spec` with what `defaults` fill of the options it leaves at None."""
    changes = defaults.fill({option: getattr(spec, option) for option in TASK_OPTIONS},
                            spec.dedupe_key)
    return msgspec.structs.replace(spec, **changes) if changes else spec


def dedupe_id(dedupe_key: str, concurrency_key: str | None, shards: int) -> str:
    """A dedupe key's job id: the key's own, or with a concurrency key the id of the pair,
    placed in the concurrency key's home shard. The same pair gives the same id again; the
    same dedupe key with another concurrency key (of the same home shard or not) another id:
    the dedupe key is scoped by its concurrency key. (A space, which no concurrency key
    holds, ends the concurrency key: no two pairs hash the same text.)"""
    if concurrency_key is None:
        return dedupe_job_id(dedupe_key)
    return keyed_job_id(concurrency_key, shards,
                        stem=dedupe_job_id(f"{concurrency_key} {dedupe_key}"))


def windowed(spec: JobSpec, schedule: Schedule, key: str, now_ms: int, shards: int,
             concurrency_key: str | None = None) -> tuple[Schedule, WindowId]:
    """A job with dedupe_ttl or debounce: its schedule (a debounced job is one delayed by
    the debounce) and its drawn id. A debounce sets the fire time itself, so it is refused
    with delay, at or cron. With a concurrency key the window's record is named by the
    key's dedupe_id, which is in the concurrency key's home shard: window_job_id places the
    job in the record's shard, so there too."""
    ttl = check_window_seconds("dedupe_ttl", spec.dedupe_ttl)
    debounce = check_window_seconds("debounce", spec.debounce)
    if debounce:
        if schedule is not IMMEDIATE:
            raise ValidationError("debounce", "sets the run's time itself (debounce seconds "
                                              "after the latest submit): drop delay, at and "
                                              "cron, or drop debounce")
        schedule = delayed(now_ms, spec.debounce)
    base = dedupe_id(key, concurrency_key, shards)
    window = WindowId(window_job_id(base, now_ms, shards))
    window.base, window.ttl_ms, window.debounce_ms = base, ttl, debounce
    return schedule, window


def hash_fields(job: Validated) -> list[Any]:
    """The job-hash field/value pairs of a validated job beyond task/queue/fire_ms."""
    payload, rest = job[4], job[5]
    return rest if payload is None else ["payload", payload, *rest]


class Batch:
    """One submit_many call: `ids` in input order, `members` the input indexes each call
    holds (one shard's jobs, at most SUBMIT_CHUNK, in input order), `calls()` the calls.
    `extra` job-hash fields go with every job (scheduler/observe/tracing.py's traceparent)."""

    def __init__(self, core: ClientState, specs: Iterable[JobSpec | Mapping[str, Any]],
                 extra: tuple[Any, ...] = (), ids: Sequence[str] | None = None) -> None:
        self.now = now = core.clock.now_ms()
        core.unseen.clear()  # validate() notes the batch's tasks that the catalog lacks
        self.jobs = jobs = [validate(core, raw if isinstance(raw, JobSpec) else spec_of(raw),
                                     now) for raw in specs]
        self.named = ids is not None  # ids given: each one checked in Redis (not `fresh`)
        if ids is None:
            drawn = job_ids.take(len(jobs), now)  # one slice of the pool, not a call per job
            self.ids = [job[0] or fresh for job, fresh in zip(jobs, drawn, strict=True)]
        else:
            self.ids = named_ids(jobs, ids, core.shards)
        by_shard: list[list[int]] = [[] for _ in range(core.shards)]
        for i, shard in enumerate(shards_of(self.ids, core.shards)):
            by_shard[shard].append(i)
        self.members = [m[k:k + SUBMIT_CHUNK] for m in by_shard
                        for k in range(0, len(m), SUBMIT_CHUNK)]
        self.prefixes = [core.keys.prefix(s) for s, m in enumerate(by_shard)
                         for _ in range(0, len(m), SUBMIT_CHUNK)]
        self.maxlen = core.events_maxlen
        self.extra = list(extra)
        self.windowed = False  # a call had a windowed job (calls())

    def calls(self) -> Iterator[scripts.Call]:
        """The calls, each packed when asked for (so after the one before was sent)."""
        jobs, ids, extra = self.jobs, self.ids, self.extra
        for prefix, members in zip(self.prefixes, self.members, strict=True):
            rows: list[tuple[str, str, str, int, list[Any]]] = []
            fresh = not self.named and len(members) >= FRESH_MIN_JOBS  # and every id drawn
            windows: list[Any] = []  # submit.lua's ARGV[6]
            for i in members:
                job = jobs[i]
                fields = hash_fields(job)
                if extra:
                    fields = [*fields, *extra]
                if job[0] is not None:
                    if type(job[0]) is FreshId:
                        ids[i] = str(ids[i])  # a plain str for msgpack and the caller
                    else:
                        fresh = False
                    if type(job[0]) is WindowId:
                        window = job[0]
                        ids[i] = str(window)  # a plain str for msgpack and the caller
                        windows += (len(rows) + 1, window.base, window.ttl_ms,
                                    window.debounce_ms)
                rows.append((ids[i], job[1], job[2], job[3], fields))
            if windows:
                self.windowed = True
            yield scripts.submit(prefix, self.now, self.maxlen, rows, fresh=fresh,
                                 windows=windows)

    def settle(self, results: list[Any]) -> None:
        """A windowed job whose window was open has the first job's id: submit.lua replies
        it in the job's place (instead of a code)."""
        for members, reply in zip(self.members, results, strict=True):
            for i, code in zip(members, reply, strict=True):
                if isinstance(code, bytes):
                    self.ids[i] = code.decode()
                elif isinstance(code, str):
                    self.ids[i] = code

    def ask_exist(self, pipe: Any, core: ClientState) -> None:
        """After a broken submit round trip: which of its jobs are there?"""
        for job_id in self.ids:
            pipe.exists(core.job_key(job_id))

    def outcome(self, results: list[Any], exists: list[Any] | None, at: str,
                cause: BaseException | None = None) -> None:
        """Raise SubmitError unless every call succeeded. `results` has each call's reply or
        exception (None: unknown, the round trip broke with `cause`); `exists`, when Redis
        could be asked afterwards, whether each job id is there."""
        failures = [r for r in results if not isinstance(r, list)]
        if not failures:
            return
        ids = self.ids
        written, not_written, unknown = [], [], []
        for call_members, result in zip(self.members, results, strict=True):
            for i in call_members:
                if isinstance(result, list) or (exists is not None and exists[i]):
                    written.append(i)
                elif isinstance(result, BaseException) or exists is not None:
                    not_written.append(i)
                else:
                    unknown.append(i)
        cause = cause or next((r for r in failures if isinstance(r, BaseException)), None)
        failure = (translate(cause, at) if isinstance(cause, REDIS_ERRORS)
                   else RedisUnavailable(f"the connection to {at} broke ({cause})", at))
        written.sort()
        raise submit_error(
            failure, f"{failure}; submit_many wrote {len(written)} of {len(ids)} jobs"
            + (f", {len(unknown)} unknown" if unknown else "")
            + " (SubmitError.written has their ids)", [ids[i] for i in written],
            not_written, unknown) from cause


def named_ids(jobs: list[Validated], ids: Sequence[str], shards: int) -> list[str]:
    """submit_many's `ids`, checked: one valid job id per job, a dedupe key's own id for
    a job with one (else a repeat of the key could make a second job), and for a job with a
    concurrency key an id in the key's home shard (where its count and turns are)."""
    if isinstance(ids, str) or len(ids) != len(jobs):
        raise ValidationError("ids", f"must be a list of one job id per job ({len(jobs)}), "
                                     f"or None")
    out = []
    for i, (job, given) in enumerate(zip(jobs, ids, strict=True)):
        check_job_id(given)
        if type(job[0]) is WindowId:
            raise ValidationError("ids", f"job {i} has a dedupe_ttl or debounce: its id is "
                                         f"decided in Redis (the first job's, while the window "
                                         f"is open): give none")
        if type(job[0]) is FreshId:
            if shard_of(given, shards) != shard_of(job[0], shards):
                raise ValidationError("ids", f"job {i} has a concurrency_key, whose jobs live "
                                             f"in shard {shard_of(job[0], shards)} of "
                                             f"{shards}: {given!r} is in shard "
                                             f"{shard_of(given, shards)}; give an id placed "
                                             f"there (jobspec.keyed_job_id) or none")
        elif job[0] is not None and given != job[0]:
            raise ValidationError("ids", f"job {i} has a dedupe key, whose job id is "
                                         f"{job[0]}: give that id or none")
        out.append(given)
    return out


def nothing_written(n: int, exc: RedisErrors, at: str) -> SubmitError:
    failure = translate(exc, at)
    return submit_error(failure, f"{failure}; submit_many wrote none of its {n} jobs", [],
                        list(range(n)), [])
