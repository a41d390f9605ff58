"""The canary: a task every worker serves unless told not to, which `sched verify` submits to
prove the scheduler's guarantees on a running deployment. Its name is reserved: no user task
may take it, and the worker's catalog does not list it (it is no task of the user's app).

Each run records its start and its end (or its planned failure) as a line of its verify run's
log, a list in the namespace named by the run's id (`Keys.verify_log`), apart from the slot
it runs: a bug that rewrites or drops the slot cannot erase that a run started or ended.

A verify run ends by pushing its summary (`VerifyRun`) onto `Keys.verify_runs`, capped at the
last RUNS_KEPT: the one key a run leaves, what the console's Verify page lists.
"""

from __future__ import annotations

from typing import Any

import msgspec

TASK = "sched.canary"
RESERVED_PREFIX = "sched."  # task names kept for the scheduler's own tasks
# A canary never keeps its worker longer: a lease canary holds the workers' lease (30 s by
# default) and a second.
MAX_HOLD_MS = 60_000
LOG_TTL_S = 86_400  # a run's log outlives a verify that died before removing it, for a day
RUNS_KEPT = 20  # the verify runs' summaries kept (Keys.verify_runs)
MAX_FIGURE = 300  # a summary keeps this much of an invariant's figure or a run's reason


class Payload(msgspec.Struct, frozen=True, kw_only=True):
    """What a canary is asked to do: record into run `run`'s log; `fail_first` fails its
    first attempt, `fail_attempts` its first that many (so its retries are seen to follow the
    policy, its cap included); `hold_ms` keeps its worker that long between start and end (so
    a worker killed by a chaos run holds attempts in flight, and a run outlives its lease;
    at most MAX_HOLD_MS)."""

    run: str
    fail_first: bool = False
    fail_attempts: int = 0
    hold_ms: int = 0


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a run's log: `event` "start", "end" or "failed" (the planned failure of
    a first attempt), by `worker`, for attempt `attempt` of slot `slot`, at `ms` (the
    worker's wall clock)."""

    slot: str
    attempt: int
    worker: str
    event: str
    ms: int


_payload_decoder = msgspec.json.Decoder(Payload)
_record_encoder = msgspec.json.Encoder()
_record_decoder = msgspec.json.Decoder(Record)


def decode_payload(data: bytes | None) -> Payload:
    """A canary's payload (msgspec.ValidationError on one that is not a canary's)."""
    return _payload_decoder.decode(data or b"null")


def encode_record(record: Record) -> bytes:
    return _record_encoder.encode(record)


def decode_records(lines: list[Any]) -> list[Record]:
    """A run's log as its lines (LRANGE's reply), oldest first."""
    return [_record_decoder.decode(line) for line in lines]


def is_reserved(task: str) -> bool:
    """Whether `task` is a name kept for the scheduler's own tasks."""
    return task.startswith(RESERVED_PREFIX)


class Check(msgspec.Struct, frozen=True):
    """One invariant as a verify run judged it: its name, whether it held, its figure."""

    name: str
    holds: bool
    figure: str


class VerifyRun(msgspec.Struct, frozen=True, kw_only=True):
    """The summary of one `sched verify` run (Client.verify_runs; the console's Verify page):
    its id, when it started and how long it took (ms), its exit code (0 every invariant
    held, 1 one did not, 2 it could not run: `reason` says why), whether it ran `--chaos`
    (with its `seed`), how many canary slots it judged, and each invariant with its figure."""

    run: str
    started_ms: int
    took_ms: int
    exit_code: int
    chaos: bool = False
    seed: int | None = None
    slots: int = 0
    checks: tuple[Check, ...] = ()
    reason: str = ""


_run_encoder = msgspec.json.Encoder()
_run_decoder = msgspec.json.Decoder(VerifyRun)


def encode_run(summary: VerifyRun) -> bytes:
    return _run_encoder.encode(summary)


def decode_runs(lines: list[Any]) -> list[VerifyRun]:
    """The summaries in `lines` (LRANGE's reply), in order; a line that is not one (written
    by something else) is left out."""
    out = []
    for line in lines:
        try:
            out.append(_run_decoder.decode(line))
        except (msgspec.DecodeError, TypeError):
            continue
    return out
