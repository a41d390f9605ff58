"""What a caller submits: `JobSpec`, and the job ids it gets back.

A job's id is a UUIDv7 in 32 hex digits (the submit's time in ms, then 74 random bits) or,
with a `dedupe_key`, derived from the key so a repeated submit finds the first job. With a
`dedupe_ttl` or `debounce` too, the key holds for a window (window_job_id): its job's id is the
key's id plus the window's start, placed in the key's shard. With a `concurrency_key`, every
id is placed in the key's home shard (keyed_job_id): a fresh one, a dedupe key's (whose id, and
window record, are then the concurrency key's own: the dedupe key is scoped by it) alike.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import msgspec

from scheduler.core.errors import ValidationError
from scheduler.core.keys import key_shard, shard_of
from scheduler.core.models import RetryPolicy
from scheduler.core.states import Delivery, JobKind
from scheduler.core.timing import Schedule, delayed, resolve


class JobSpec(msgspec.Struct, kw_only=True):
    """One job for `submit_many`; the fields are `submit`'s arguments.

    At most one of `delay` (seconds or timedelta), `at` (timezone-aware datetime) and `cron`
    (5 fields, or 6 with seconds first); the rest apply to `cron` only: `tz` (IANA zone,
    default UTC), `catchup` (all | latest | none, default all) with `catchup_limit` (default
    1000), `overlap` (allow | skip, default allow), `start_at` / `end_at` (aware datetimes),
    `on_time_within` (seconds, default 2: a run starting within this of its fire time is on
    time; `Client.fires` and `sched schedules explain` report the share).
    `priority`: 1 (runs first) to 5 (runs last), default 3 (Reader says how ties and
    starvation are settled). `dedupe_ttl` (seconds, with `dedupe_key`): the key holds for
    that long from its first submit, whatever became of the job, then a submit makes a new
    job; `debounce` (seconds, with `dedupe_key`, without delay/at/cron): the job runs that
    long after its latest submit, with the latest payload (the docs' "Dedupe windows and
    debounce" guide).
    `concurrency_key`: the tenant (customer, account, domain...) the job runs for: a queue's
    per-key limit counts runs of one key, and keys take turns (the docs' "Many tenants on
    one queue" guide). The
    job lives in its key's home shard; a dedupe key is then scoped by the concurrency key.
    `queue`, `timeout`, `retry`, `delivery`, `priority` left at None (and `dedupe_ttl`,
    `debounce` with a dedupe key) take the task's defaults from the namespace's task
    catalog (what its workers registered: `Client.tasks()`), else queue "default",
    delivery "at_least_once", no timeout, the default retry policy, priority 3.

    Its fields past `task` and `payload` are the submit options (SUBMIT_OPTIONS): every
    entry point that takes them (both clients' `submit` and `schedule`, the outbox, task
    handles, the registry's per-task defaults, `sched submit`) states them by these names,
    with these defaults and types, which the project's tests hold them to.
    """

    task: str
    payload: Any = None
    queue: str | None = None
    timeout: float | None = None
    retry: RetryPolicy | None = None
    delivery: str | None = None
    priority: int | None = None
    dedupe_key: str | None = None
    dedupe_ttl: float | None = None
    debounce: float | None = None
    concurrency_key: str | None = None
    delay: float | timedelta | None = None
    at: datetime | None = None
    cron: str | None = None
    tz: str | None = None
    catchup: str | None = None
    catchup_limit: int | None = None
    overlap: str | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    on_time_within: float | None = None

    def schedule(self, now_ms: int) -> Schedule:
        """When and how often the job runs (IMMEDIATE: now). A plain immediate job and one
        with only a delay, submit_many's common cases, are kept off resolve()'s slower path
        (building and testing a dict of the options is a large share of submit_many's CPU:
        bench submit)."""
        if (self.at is None and self.cron is None and self.tz is None
                and self.catchup is None and self.catchup_limit is None and self.overlap is None
                and self.start_at is None and self.end_at is None
                and self.on_time_within is None):
            return IMMEDIATE if self.delay is None else delayed(now_ms, self.delay)
        return resolve(now_ms, **{name: getattr(self, name) for name in TIMING_OPTIONS})


# What a job gets for an option that neither its submit nor its task's catalog entry gives.
DEFAULT_RETRY = RetryPolicy()
DEFAULT_QUEUE = "default"
DEFAULT_DELIVERY = Delivery.AT_LEAST_ONCE.value
IMMEDIATE = Schedule(kind=JobKind.IMMEDIATE, fire_ms=0, fields={})  # fire_ms: the submit's now

# The submit options, in JobSpec's order: its fields past the task and the payload.
SUBMIT_OPTIONS: tuple[str, ...] = JobSpec.__struct_fields__[2:]
# When and how often a job runs (JobSpec.schedule resolves them).
TIMING_OPTIONS = ("delay", "at", "cron", "tz", "catchup", "catchup_limit", "overlap",
                  "start_at", "end_at", "on_time_within")
# Options a named schedule refuses: its name identifies it, and it recurs.
NOT_IN_A_SCHEDULE = ("dedupe_key", "dedupe_ttl", "debounce", "delay", "at")
# A named schedule's options (Client.schedule), `cron` among them.
SCHEDULE_OPTIONS = tuple(n for n in SUBMIT_OPTIONS if n not in NOT_IN_A_SCHEDULE)
# Options a task declares its defaults for (Registry.task): what a job of the task is, not
# when it runs or which one it is.
TASK_OPTIONS = ("queue", "timeout", "retry", "delivery", "priority", "dedupe_ttl", "debounce")


def option_defaults() -> dict[str, Any]:
    """Each submit option's default, as JobSpec has it."""
    return {f.name: f.default for f in msgspec.structs.fields(JobSpec)
            if f.name in SUBMIT_OPTIONS}


_VARIANT = bytes(b"89ab"[i & 3] for i in range(256))  # a random byte -> RFC 9562 variant digit


class _JobIds:
    """Job ids in UUIDv7's layout (RFC 9562), as 32 hex digits: the submit's Unix time in ms,
    then 74 random bits from os.urandom. Time first, because history's primary keys start
    with the job id: ids in time order land at the right edge of those B-trees, where random
    ones touch a random page each once the index outgrows Postgres's cache, a cost that grows
    with the table (bench snapshot). The random part is drawn 4,096 ids at a time, one
    os.urandom call for many ids (bench submit); a forked child drops what it inherited, so it
    never repeats its parent's ids."""

    def __init__(self) -> None:
        self._hex = ""   # 18 random hex digits an id
        self._var = ""   # one variant digit an id
        self._at = 0
        os.register_at_fork(after_in_child=self._drop)

    def _drop(self) -> None:
        self._hex, self._var, self._at = "", "", 0

    def _refill(self, n: int) -> None:
        self._hex = os.urandom(9 * n).hex()
        self._var = os.urandom(n).translate(_VARIANT).decode()
        self._at = 0

    def next(self, now_ms: int | None = None) -> str:
        return self.take(1, now_ms)[0]

    def take(self, n: int, now_ms: int | None = None) -> list[str]:
        """`n` ids at once (submit_many): one slice of the pool, not a call per id. `now_ms`:
        the submit's time on the scheduler's clock (clock.py), else this host's."""
        if self._at + n > len(self._var):
            self._refill(max(4096, n))
        at, self._at = self._at, self._at + n
        pool = self._hex
        ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        head = f"{ms:012x}7"
        starts = range(18 * at, 18 * (at + n), 18)
        return [f"{head}{pool[k:k + 3]}{v}{pool[k + 3:k + 18]}"
                for k, v in zip(starts, self._var[at:at + n], strict=True)]


job_ids = _JobIds()


def dedupe_job_id(key: str) -> str:
    """A dedupe key maps to one job id, so a repeat submit finds the first job."""
    return "k" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


class WindowId(str):
    """A windowed dedupe key's job id as the client draws it (window_job_id), with what
    submit.lua's ARGV[6] needs: `base` (the key's dedupe_job_id, naming the record),
    `ttl_ms` and `debounce_ms`. The job may come back with another id: the first job's,
    when the window is still open."""

    base: str
    ttl_ms: int
    debounce_ms: int


def placed_id(stem: str, shard: int, shards: int) -> str:
    """`stem`, then "." and the first counter (hex) that puts the id in `shard` (a shard is
    the crc32 of the whole id: about `shards` tries). The same stem and shard always give
    the same id."""
    n = 0
    while True:
        job_id = f"{stem}.{n:x}"
        if shard_of(job_id, shards) == shard:
            return job_id
        n += 1


def keyed_job_id(concurrency_key: str, shards: int, stem: str | None = None,
                 now_ms: int | None = None) -> str:
    """The id of a job with a concurrency key: it lives in the key's home shard
    (keys.key_shard), where its key's count and turn are. `stem` is the id it would have
    had (a dedupe key's id: the same key and concurrency key give the same id again), or a
    fresh UUIDv7."""
    return placed_id(stem if stem is not None else job_ids.next(now_ms),
                     key_shard(concurrency_key, shards), shards)


def window_job_id(base: str, start_ms: int, shards: int) -> str:
    """The id of a windowed dedupe key's job (`base`: the key's dedupe_job_id) whose window
    starts at `start_ms`: the key's id, then a UUIDv7 of the start (unique even when two
    windows of a key start in one ms, as on a client's clock that stands still). A shard
    is the crc32 of the whole id, so a counter follows, the first that puts the id in the
    key's own shard: the dedupe record (`dedupe:<base>`) and the job it names are then
    written by one script on one Redis Cluster slot. It takes about `shards` tries."""
    return placed_id(f"{base}.{job_ids.next(start_ms)}", shard_of(base, shards), shards)


def spec_of(raw: Mapping[str, Any]) -> JobSpec:
    """A submit_many item given as a mapping of submit's arguments."""
    try:
        return JobSpec(**raw)
    except TypeError as exc:
        raise ValidationError("jobs", f"each item must be a JobSpec or a mapping of submit "
                                      f"arguments: {exc}") from None


def one_spec(task: str, payload: Any, queue: str | None, timeout: float | None,
             retry: RetryPolicy | None, delivery: str | None, dedupe_key: str | None,
             schedule: dict[str, Any], priority: int | None = None,
             dedupe_ttl: float | None = None, debounce: float | None = None,
             concurrency_key: str | None = None) -> list[JobSpec]:
    """`submit`'s arguments as the one-job batch it submits."""
    return [JobSpec(task=task, payload=payload, queue=queue, timeout=timeout, retry=retry,
                    delivery=delivery, priority=priority, dedupe_key=dedupe_key,
                    dedupe_ttl=dedupe_ttl, debounce=debounce,
                    concurrency_key=concurrency_key, **schedule)]


def schedule_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The timing options among a submit call's arguments (its `locals()`)."""
    return {name: arguments[name] for name in TIMING_OPTIONS}
