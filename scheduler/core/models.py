"""Records: msgspec Structs for jobs, slots, attempts and retry policies, with validation.

Validation happens here, before anything is written to Redis; every error names the field and
what is allowed.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

import msgspec

from scheduler.core.cron import LATEST_MS
from scheduler.core.errors import ValidationError
from scheduler.core.finite import finite_number
from scheduler.core.keys import DEFAULT_PRIORITY, PRIORITIES, check_name, control_character
from scheduler.core.states import Catchup, Delivery, JobKind, Outcome, Overlap, SlotStatus

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
_DELIVERY_VALUES = ", ".join(d.value for d in Delivery)


MAX_ATTEMPTS = 1000
MAX_SECONDS = 365 * 86400  # the longest duration anything takes: a year
MAX_REASON_CHARS = 1000  # a cancel or delete reason, stored on every slot it ends
# The longest lease: a worker's heartbeat renews it well before it ends, so a longer one only
# makes a dead worker's runs wait longer to be taken over.
MAX_LEASE_S = 86400
MAX_COUNT = 1_000_000  # the most any count option takes (entries per read, rows, keys/s)
MAX_EVENTS_MAXLEN = 100 * MAX_COUNT  # the longest events stream a shard may keep
# The furthest ahead cron slots are made: each occurrence in it is a slot in Redis.
MAX_LOOKAHEAD_S = 86400


def retry_after_ms(after: float) -> tuple[int, bool]:
    """A handler's `Retry(after=...)` as the ms fail.lua adds to now, and whether it was cut
    to MAX_SECONDS: an upstream Retry-After may say anything, and the handler must not fail
    for passing it on (the retry then waits a year; the worker logs the cut)."""
    return int(min(after, MAX_SECONDS) * 1000), after > MAX_SECONDS


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Exponential backoff with jitter: delay(n) = min(max_s, base_s * 2**(n-1)) * (1 - jitter*u),
    u uniform in [0, 1), n the number of failed attempts so far."""

    max_attempts: int = 3
    base_s: float = 1.0
    max_s: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool):
            raise ValidationError("max_attempts", "must be an integer >= 1")
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS:
            raise ValidationError("max_attempts", f"{self.max_attempts} is not allowed; must be "
                                                  f"from 1 to {MAX_ATTEMPTS}")
        for field in ("base_s", "max_s"):
            value = getattr(self, field)
            if not finite_number(value) or not 0 <= value <= MAX_SECONDS:
                raise ValidationError(field, f"{value!r} is not allowed; must be a number of "
                                             f"seconds from 0 to {MAX_SECONDS:,} (a year)")
        if self.max_s < self.base_s:
            raise ValidationError("max_s", f"{self.max_s} is below base_s {self.base_s}")
        if not finite_number(self.jitter) or not 0 <= self.jitter <= 1:
            raise ValidationError("jitter", f"{self.jitter!r} is not allowed; must be in [0, 1]")

    def delay_s(self, failures: int, u: float) -> float:
        raw: float = min(self.max_s, self.base_s * 2 ** max(failures - 1, 0))
        return raw * (1 - self.jitter * u)


# A cron job's objective when it names none (`on_time_within`): a run starting within this of
# its fire time is on time (the fire ledger's summary, scheduler/core/ledger.py).
DEFAULT_ON_TIME_MS = 2_000

class Job(msgspec.Struct, frozen=True, kw_only=True):
    """A job as submitted (`Client.get_job`, `list_jobs`): what to run and how, and for a
    recurring job its schedule and next fire time. Options left at their default read as the
    default."""

    job_id: str
    task: str
    queue: str = "default"
    priority: int = DEFAULT_PRIORITY  # 1 runs first, 5 last
    payload: Any = None
    timeout_s: float | None = None
    retry: RetryPolicy = RetryPolicy()
    delivery: Delivery = Delivery.AT_LEAST_ONCE
    dedupe_key: str | None = None
    dedupe_ttl_s: float | None = None  # the key's window, from the first submit
    debounce_s: float | None = None  # a repeat moves the pending run this far ahead
    concurrency_key: str | None = None  # its tenant: per-key limit and turns (guide/tenants)
    kind: JobKind = JobKind.IMMEDIATE
    created_ms: int = 0
    fire_ms: int = 0  # the fire time of the first slot (cron: the first occurrence)
    delay_s: float | None = None  # delayed jobs: the delay asked for
    cron: str | None = None  # cron jobs: the expression, 5 fields or 6 with seconds first
    tz: str | None = None  # cron jobs: IANA zone of the expression's wall-clock times
    catchup: Catchup | None = None  # cron jobs
    catchup_limit: int | None = None  # cron jobs: most missed occurrences `all` backfills
    overlap: Overlap | None = None  # cron jobs
    start_ms: int | None = None
    end_ms: int | None = None
    missed: int = 0  # cron jobs: occurrences dropped by the catch-up policy
    on_time_within_s: float | None = None  # cron jobs: a run starting this soon is on time
    next_fire_ms: int | None = None  # the next fire time still ahead, None when there is none
    deleted_ms: int | None = None  # when its series was ended (Client.delete_job)
    deleted: str | None = None  # why (the reason given)
    unreadable: str | None = None  # numbers in its hash that could not be read (see Slot)

    @property
    def dedupe_until_ms(self) -> int | None:
        """When the dedupe key's window ends (dedupe_ttl from the first submit); a debounced
        run holds its key at least until it fires."""
        return self.created_ms + round(self.dedupe_ttl_s * 1000) if self.dedupe_ttl_s else None

    def dedupe_text(self, when: Any) -> list[tuple[str, str]]:
        """The dedupe lines of `sched jobs show` and the console's job page; `when` formats
        a time in ms."""
        if not self.dedupe_key:
            return [("dedupe key", "-")]
        lines = [("dedupe key", self.dedupe_key)]
        if self.dedupe_ttl_s:
            lines.append(("dedupe window", f"{self.dedupe_ttl_s:g}s, until "
                                           f"{when(self.dedupe_until_ms)}"))
        if self.debounce_s:
            lines.append(("debounce", f"{self.debounce_s:g}s (a repeat before the run moves "
                                      f"it and replaces the payload)"))
        return lines


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt of a slot: which worker claimed it under which token (its number), its
    lease, when it started and finished, how it ended, and the lines the handler logged."""

    number: int
    worker: str | None = None
    token: int | None = None
    claimed_ms: int | None = None
    lease_until_ms: int | None = None
    started_ms: int | None = None
    finished_ms: int | None = None
    outcome: Outcome | None = None
    error: str | None = None
    log: list[str] | None = None  # the lines the handler logged (ctx.logger, INFO and up)


PROGRESS_MESSAGE_CHARS = 200  # a progress message is one line, cut to this many characters


class Progress(msgspec.Struct, frozen=True):
    """A running handler's latest `ctx.progress(fraction, message)`: the fraction done
    (0..1), its message (None: it gave none) and when it reported it (`at_ms`, the worker's
    clock), by attempt `attempt` (a retry starts with its predecessor's last until it
    reports its own). It rides the worker's next heartbeat into the slot hash, fields
    `progress`, `progress_msg`, `progress_ms` and `progress_attempt` (heartbeat.lua), fenced
    by the attempt's token: a stale attempt writes none."""

    fraction: float
    message: str | None
    at_ms: int
    attempt: int = 0

    def line(self) -> str:
        """For people: "40% step 4 of 10" (`sched runs`, the console)."""
        percent = f"{self.fraction * 100:.0f}%"
        return f"{percent} {self.message}" if self.message else percent


def check_progress(fraction: object, message: object = None) -> tuple[float, str | None]:
    """ctx.progress's arguments as stored: a finite fraction 0..1, and a message on one line
    cut to PROGRESS_MESSAGE_CHARS, unprintable characters replaced by U+FFFD; ValueError
    naming the bad one."""
    if (isinstance(fraction, bool) or not isinstance(fraction, int | float)
            or not math.isfinite(fraction) or not 0 <= fraction <= 1):
        raise ValueError(f"ctx.progress: fraction must be a number from 0 to 1, not "
                         f"{fraction!r:.60}")
    if message is None:
        return float(fraction), None
    if not isinstance(message, str):
        raise ValueError(f"ctx.progress: message must be a string or None, not "
                         f"{type(message).__name__}")
    line = " ".join(message[:4 * PROGRESS_MESSAGE_CHARS].split())[:PROGRESS_MESSAGE_CHARS]
    # Shown as is by `sched runs`: no terminal escape gets through.
    line = "".join(c if c.isprintable() else "\ufffd" for c in line)
    # A lone surrogate cannot be encoded: it would fail the heartbeat that carries it.
    return float(fraction), line.encode("utf-8", "backslashreplace").decode("utf-8")


def progress_from_hash(raw: dict[bytes, bytes]) -> Progress | None:
    value = raw.get(b"progress")
    if not value:
        return None
    try:
        fraction = float(value)
    except ValueError:  # written past the worker's checks: fails no listing
        return None
    return Progress(fraction, _s(raw, "progress_msg") or None, _i(raw, "progress_ms"),
                    _i(raw, "progress_attempt"))


class Slot(msgspec.Struct, frozen=True, kw_only=True):
    """One occurrence of a job, `<job_id>:<fire_ms>` (`Client.get_slot`, `slots`, `runs`):
    its status, its current attempt and lease, every attempt so far, and a success's result.
    `attempt` is the current attempt's number (each claim adds one; `token` is the same
    number, the fence its commit presents); `failures` counts the attempts that count
    against `max_attempts`."""

    slot_id: str
    job_id: str
    fire_ms: int
    status: SlotStatus
    attempt: int = 0
    failures: int = 0
    queue: str = "default"
    priority: int = DEFAULT_PRIORITY
    concurrency_key: str | None = None  # its job's, copied onto the slot
    task: str = ""
    token: int = 0
    worker: str | None = None
    lease_until_ms: int | None = None
    available_ms: int | None = None
    attempts: list[Attempt] = []
    result: Any = None  # a succeeded handler's return value (None when it returned none)
    progress: Progress | None = None  # the latest attempt's last ctx.progress, if it gave one
    unreadable: str | None = None
    """Set when a number in its hash could not be read (it says which): those read as 0 or
    None, and listings mark the slot unreadable instead of failing."""


_attempt_decoder = msgspec.json.Decoder(Attempt)
_payload_encoder = msgspec.json.Encoder()


def check_task(task: object) -> str:
    if isinstance(task, str) and (control := control_character(task)):
        raise ValidationError("task", f"{task[:60]!r} holds the control character {control}; "
                                      f"a task name is 1-200 printable characters")
    if isinstance(task, str) and not _is_unicode(task):
        raise ValidationError("task", f"{task[:60]!r} is not valid text (bytes that are not "
                                      f"UTF-8, or a lone surrogate)")
    if not isinstance(task, str) or not task or len(task.encode()) > 200 or task != task.strip():
        raise ValidationError("task", f"{task!r} is not a task name (a non-empty string, at "
                                      f"most 200 bytes in UTF-8, no space at either end)")
    return task


def _is_unicode(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (a lone surrogate does not: bytes a shell passed that
    were not UTF-8 arrive as one)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if not finite_number(timeout) or not 0 < float(timeout) <= MAX_SECONDS:
        raise ValidationError("timeout", f"{timeout!r} is not allowed; must be a number of "
                                         f"seconds > 0 and at most {MAX_SECONDS:,} (a year)")
    return float(timeout)


def check_priority(priority: Any) -> int:
    if priority is None:
        return DEFAULT_PRIORITY
    if type(priority) is not int or priority not in PRIORITIES:
        raise ValidationError("priority", f"{priority!r} is not a priority; use an integer from "
                                          f"1 (runs first) to 5 (runs last), default "
                                          f"{DEFAULT_PRIORITY}")
    return priority


def check_delivery(delivery: Any) -> Delivery:
    try:
        return Delivery(delivery)
    except ValueError:
        raise ValidationError(
            "delivery", f"{delivery!r} is not a delivery mode; use one of {_DELIVERY_VALUES}"
        ) from None


def check_dedupe_key(key: object) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > 512:
        raise ValidationError("dedupe_key", "must be a non-empty string of at most 512 characters")
    # `sched jobs show` and the console print the key: no terminal escape may ride in it.
    if control := control_character(key):
        raise ValidationError("dedupe_key", f"{key[:60]!r} holds the control character "
                                            f"{control}; use printable characters only")
    return key


def check_reason(reason: object) -> str:
    """A cancel or delete reason: one line of printable text, at most MAX_REASON_CHARS
    (it is stored on each slot or job and printed to operators as given)."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError("reason", f"{reason!r} is not a reason; give a line of text "
                                        f"(at most {MAX_REASON_CHARS:,} characters)")
    if len(reason) > MAX_REASON_CHARS:
        raise ValidationError("reason", f"is {len(reason):,} characters long; give at most "
                                        f"{MAX_REASON_CHARS:,}")
    if control := control_character(reason):
        raise ValidationError("reason", f"{reason[:60]!r} holds the control character "
                                        f"{control}; give one line of printable text")
    if not _is_unicode(reason):
        raise ValidationError("reason", f"{reason[:60]!r} is not valid text (bytes that are "
                                        f"not UTF-8, or a lone surrogate)")
    return reason


def check_window_seconds(name: str, seconds: Any) -> int:
    """dedupe_ttl and debounce: seconds, as whole ms >= 1 (0 when not given)."""
    if seconds is None:
        return 0
    if not finite_number(seconds) or not 0.001 <= float(seconds) <= MAX_SECONDS:
        raise ValidationError(name, f"{seconds!r} is not allowed; must be a number of seconds "
                                    f"from 0.001 to {MAX_SECONDS:,} (a year)")
    return round(float(seconds) * 1000)


MAX_DEPTH = 64  # how deep a payload (or a result) may nest lists and objects


def _check_json(value: Any, depth: int = 0) -> None:
    """Refuse what JSON cannot hold as it is: msgspec would quietly turn NaN into null, bytes
    into base64, a set or a tuple into a list, a datetime into a string, and the handler
    would get something else than was submitted. And refuse nesting past MAX_DEPTH: every
    reader decodes a payload recursively."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError("payload", f"holds {value!r}, which JSON cannot represent; "
                                             f"use None or a string")
        return
    if not isinstance(value, dict | list):
        raise ValidationError("payload", f"holds a {type(value).__name__} ({str(value)[:40]!r}"
                                         f"), which is not a JSON value: convert it first "
                                         f"(str, int, float, bool, None, list, dict)")
    if depth >= MAX_DEPTH:
        raise ValidationError("payload", f"nests lists and objects deeper than {MAX_DEPTH} "
                                         f"levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError("payload", f"has a key {key!r} that is not a string "
                                                 f"(JSON object keys are strings)")
            _check_json(item, depth + 1)
    else:
        for item in value:
            _check_json(item, depth + 1)


def encode_payload(payload: Any, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    """JSON values only (_check_json); nothing is pickled."""
    if payload is not None and not isinstance(payload, str | int):
        _check_json(payload)
    try:
        data = _payload_encoder.encode(payload)
    except UnicodeEncodeError:
        raise ValidationError("payload", "holds text that is not valid Unicode (a lone "
                                         "surrogate: bytes that were not UTF-8)") from None
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValidationError("payload", f"is not JSON-serializable: {exc}") from None
    if len(data) > max_bytes:
        raise ValidationError(
            "payload", f"is {len(data)} bytes encoded, over the limit of {max_bytes} bytes"
        )
    return data


def decode_payload(data: bytes | None) -> Any:
    if not data:
        return None
    return msgspec.json.decode(data)


def shown_payload(data: bytes | None) -> Any:
    """A stored payload or result as a reader shows it: decoded, or, when it does not decode
    (written past the SDK's checks, straight to the scripts: not JSON, not UTF-8, nested
    past MAX_DEPTH), a string that says so, so one such job fails no listing."""
    deep = f"(not shown: {len(data or b'')} bytes of JSON nested deeper than {MAX_DEPTH} levels)"
    try:
        value = decode_payload(data)
    except RecursionError:
        return deep
    except (msgspec.DecodeError, UnicodeDecodeError):
        return f"(not shown: {len(data or b'')} bytes that do not decode as JSON)"
    if data and data.count(b"[") + data.count(b"{") > MAX_DEPTH and _deeper(value):
        return deep
    return value


def _deeper(value: Any) -> bool:
    """Whether a decoded value nests past MAX_DEPTH; without recursion (encoding it for a
    page or `--json` would recurse past Python's limit)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                   else item))
    return False


def check_queue(queue: object) -> str:
    return check_name("queue", queue)  # type: ignore[arg-type]


# --- Redis hash <-> Struct -------------------------------------------------------------------


# Fields of the job hash that Lua reads, with the value a missing field stands for. submit
# writes only fields that differ, and fail.lua falls back to the same numbers.
JOB_FIELD_DEFAULTS: dict[str, str | int | float] = {
    "timeout_ms": 0,
    "max_attempts": 3,
    "backoff_base_ms": 1000,
    "backoff_max_ms": 300_000,
    "jitter": 0.2,
    "delivery": Delivery.AT_LEAST_ONCE.value,
    "dedupe_key": "",
    # dedupe windows and debounce (scheduler/core/jobspec.py's window_job_id)
    "dedupe_ttl_ms": 0,
    "debounce_ms": 0,
    "kind": JobKind.IMMEDIATE.value,
    "priority": DEFAULT_PRIORITY,
    # a tenant's key (keys.check_concurrency_key): per-key limits and turns, lua/take.lua
    "concurrency_key": "",
    # schedules (scheduler/core/timing.py); immediate jobs store none of them
    "delay_ms": 0,
    "cron": "",
    "tz": "",
    "catchup": "",
    "catchup_limit": 0,
    "overlap": "",
    "start_ms": 0,
    "end_ms": 0,
    "on_time_ms": 0,  # 0: DEFAULT_ON_TIME_MS
}


# Every job-hash field a submit may write besides task, queue, fire_ms and created_ms:
# submit.lua refuses any other (scripts/source.py gives it this table as JOB_FIELD_TYPES). Those
# with a default above, the payload, a named schedule's digest of its definition
# (schedules.py) and a traced submit's W3C traceparent (tracing.FIELD).
SUBMIT_FIELDS = (*JOB_FIELD_DEFAULTS, "payload", "spec", "traceparent")
# The fields whose value is one of an enum's (a reader turns it into the enum: another
# value would fail every listing of the job).
ENUM_FIELDS: dict[str, type[StrEnum]] = {"kind": JobKind, "delivery": Delivery,
                                         "catchup": Catchup, "overlap": Overlap}


def job_fields(payload: bytes, timeout_s: float | None, retry: RetryPolicy, delivery: Delivery,
               dedupe_key: str | None, kind: str,
               schedule: dict[str, str | int] | None = None,
               priority: int = DEFAULT_PRIORITY,
               concurrency_key: str | None = None) -> list[str | bytes | int | float]:
    """The job hash beyond task/queue/fire_ms/created_ms, as flat field/value pairs, leaving
    out every field equal to its default (less for Redis to store and the script to write)."""
    values: dict[str, str | int | float] = {
        "timeout_ms": int(timeout_s * 1000) if timeout_s else 0,
        "max_attempts": retry.max_attempts,
        "backoff_base_ms": int(retry.base_s * 1000),
        "backoff_max_ms": int(retry.max_s * 1000),
        "jitter": retry.jitter,
        "delivery": delivery.value,
        "dedupe_key": dedupe_key or "",
        "kind": kind,
        "priority": priority,
        "concurrency_key": concurrency_key or "",
        **(schedule or {}),
    }
    out: list[str | bytes | int | float] = []
    if payload != b"null":
        out += ["payload", payload]
    for name, value in values.items():
        if value != JOB_FIELD_DEFAULTS[name]:
            out += [name, value]
    return out


def schedule_fields(schedule: dict[str, str | int]) -> list[str | int]:
    """A schedule's job-hash field/value pairs as job_fields() lays them out (defaults left
    out), for a caller that has the rest of them already."""
    out: list[str | int] = []
    for name, value in schedule.items():
        if value != JOB_FIELD_DEFAULTS[name]:
            out += [name, value]
    return out


def _s(raw: dict[bytes, bytes], name: str, default: str = "") -> str:
    # Bytes that are not UTF-8 (written straight to a script) read as U+FFFD: such a job
    # must fail no listing.
    value = raw.get(name.encode())
    return value.decode("utf-8", "replace") if value is not None else default


def whole_number(value: bytes | str) -> int | None:
    """A hash field's whole number, None when it holds anything else."""
    try:
        return int(value)
    except ValueError:
        return None


class _Numbers:
    """A hash's number fields as a reader takes them. One that is not a whole number (a
    script once stored a time of 1e17 ms and up as "1e+17"; a hand edit may store anything),
    or a time past the last one a datetime shows, reads as its default and is named in
    `problems`: the record then shows as unreadable, and its listing, page or snapshot goes
    on."""

    def __init__(self, raw: dict[bytes, bytes]) -> None:
        self.raw = raw
        self.problems: list[str] = []

    def get(self, name: str, default: int | None = 0) -> int | None:
        value = self.raw.get(name.encode())
        if value in (None, b""):
            return default
        number = whole_number(value)
        if number is None or (name.endswith(("_ms", "_until")) and not 0 <= number <= LATEST_MS):
            self.problems.append(f"{name}={value.decode('utf-8', 'replace')[:40]}")
            return default
        return number

    def i(self, name: str, default: int = 0) -> int:
        value = self.get(name, default)
        return default if value is None else value

    def unreadable(self) -> str | None:
        if not self.problems:
            return None
        return "fields that are not whole numbers in range: " + ", ".join(self.problems)


def _i(raw: dict[bytes, bytes], name: str, default: int = 0) -> int:
    return _Numbers(raw).i(name, default)


def job_from_hash(job_id: str, raw: dict[bytes, bytes]) -> Job:
    raw = {**{k.encode(): str(v).encode() for k, v in JOB_FIELD_DEFAULTS.items()}, **raw}
    n = _Numbers(raw)

    def i(name: str) -> int:
        default = JOB_FIELD_DEFAULTS.get(name, 0)
        return n.i(name, default if isinstance(default, int) else 0)

    timeout_ms = i("timeout_ms")
    try:
        retry = RetryPolicy(max_attempts=i("max_attempts"), base_s=i("backoff_base_ms") / 1000,
                            max_s=i("backoff_max_ms") / 1000,
                            jitter=float(_s(raw, "jitter", "0")))
    except ValueError:  # ValidationError too: numbers no submit writes
        n.problems.append("retry policy")
        retry = RetryPolicy()
    return Job(
        job_id=job_id,
        task=_s(raw, "task"),
        queue=_s(raw, "queue", "default"),
        priority=i("priority"),
        payload=shown_payload(raw.get(b"payload")),
        timeout_s=timeout_ms / 1000 if timeout_ms else None,
        retry=retry,
        delivery=Delivery(_s(raw, "delivery", Delivery.AT_LEAST_ONCE.value)),
        dedupe_key=_s(raw, "dedupe_key") or None,
        dedupe_ttl_s=i("dedupe_ttl_ms") / 1000 or None,
        debounce_s=i("debounce_ms") / 1000 or None,
        concurrency_key=_s(raw, "concurrency_key") or None,
        kind=JobKind(_s(raw, "kind", JobKind.IMMEDIATE)),
        created_ms=i("created_ms"),
        fire_ms=i("fire_ms"),
        delay_s=i("delay_ms") / 1000 if _s(raw, "kind") == JobKind.DELAYED else None,
        cron=_s(raw, "cron") or None,
        tz=(_s(raw, "tz") or "UTC") if raw.get(b"cron") not in (None, b"") else None,
        catchup=Catchup(_s(raw, "catchup")) if _s(raw, "catchup") else None,
        catchup_limit=i("catchup_limit") or None,
        overlap=Overlap(_s(raw, "overlap")) if _s(raw, "overlap") else None,
        start_ms=i("start_ms") or None,
        end_ms=i("end_ms") or None,
        missed=i("missed"),
        on_time_within_s=((i("on_time_ms") or DEFAULT_ON_TIME_MS) / 1000
                          if raw.get(b"cron") not in (None, b"") else None),
        deleted_ms=i("deleted_ms") or None,
        deleted=_s(raw, "deleted") or None,
        unreadable=n.unreadable(),
    )


def _attempts(raw: dict[bytes, bytes], n: _Numbers) -> dict[int, Attempt]:
    """The archived attempts (`a:<n>`); one whose JSON does not decode (a number stored as
    1e+14) is left out and named in n.problems."""
    out = {}
    for key, value in raw.items():
        if key.startswith(b"a:"):
            try:
                a = _attempt_decoder.decode(value)
            except (msgspec.ValidationError, msgspec.DecodeError):
                n.problems.append(key.decode("utf-8", "replace"))
                continue
            late = {t: None for t in _ATTEMPT_TIMES if not 0 <= (getattr(a, t) or 0) <= LATEST_MS}
            if late:
                n.problems.append(key.decode("utf-8", "replace"))
                a = msgspec.structs.replace(a, **late)
            out[a.number] = a
    return out


_ATTEMPT_TIMES = ("claimed_ms", "lease_until_ms", "started_ms", "finished_ms")


def slot_from_hash(slot: str, raw: dict[bytes, bytes]) -> Slot:
    """Archived attempts are JSON in fields `a:<n>`; the latest attempt, when not archived,
    is read from the slot's own fields (complete.lua keeps the hot path free of JSON). A
    number that cannot be read leaves the slot `unreadable` (it says which), never fails."""
    n = _Numbers(raw)
    attempts = _attempts(raw, n)
    current = n.i("attempt")
    if current and current not in attempts:
        attempts[current] = Attempt(
            number=current, worker=_s(raw, "worker") or None,
            claimed_ms=n.get("claimed_ms", None), lease_until_ms=n.get("lease_until", None),
            started_ms=n.get("started_ms", None), finished_ms=n.get("finished_ms", None),
            outcome=Outcome(_s(raw, "outcome")) if raw.get(b"outcome") else None)
    for key, value in raw.items():
        if key.startswith(b"log:") and key[4:].isdigit() and int(key[4:]) in attempts:
            number = int(key[4:])
            attempts[number] = msgspec.structs.replace(attempts[number], log=decode_payload(value))
    status = SlotStatus(_s(raw, "status"))
    fire_ms = n.i("fire_ms")
    return Slot(
        slot_id=slot,
        job_id=_s(raw, "job_id"),
        fire_ms=fire_ms,
        status=status,
        attempt=current,
        failures=n.i("failures"),
        queue=_s(raw, "queue", "default"),
        priority=n.i("priority", DEFAULT_PRIORITY),
        concurrency_key=_s(raw, "concurrency_key") or None,
        task=_s(raw, "task"),
        token=current,
        worker=_s(raw, "worker") or None,
        lease_until_ms=n.get("lease_until", None) if status is SlotStatus.RUNNING else None,
        available_ms=n.get("available_ms", None) or fire_ms,
        attempts=[attempts[k] for k in sorted(attempts)],
        result=shown_payload(raw.get(b"result")),
        progress=progress_from_hash(raw) if b"progress" in raw else None,
        unreadable=n.unreadable(),
    )
