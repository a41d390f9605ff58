"""The fire ledger: for each occurrence of a recurring job, did it fire, and if not, why.

Most occurrences already have a record: their slot (`<job_id>:<fire_ms>`, indexed by fire
time in the job's `runs:<job_id>` zset), which holds when it was claimed, started and
finished, its attempts and its outcome. What has no slot, or a slot that says too little,
is written to the job's ledger, `fires:<job_id>` (a zset scored by fire_ms, in the job's
shard), by the Lua transition that drops the occurrence, in the same script:

| reason      | written by        | what happened |
|-------------|-------------------|---------------|
| `overlap`   | promote.lua       | overlap="skip": the job's previous run was still active; the entry (and the skipped slot's `yielded_to` field) names that run |
| `catchup`   | materialize.lua   | no scheduler node made the slot in time (beyond the misfire grace) and the catch-up policy dropped it; listed one by one, at most CATCHUP_LISTED per pass (the most recent), the rest only counted (job fields `missed`, `missed_unlisted`) |
| `redefined` | redefine.lua      | a redefinition withdrew it before it started (the new definition makes its own), or dropped it unmade (see below) |
| `deleted`   | delete_job.lua    | `delete_job` cancelled it before it started, or dropped it unmade |

"Unmade": an occurrence between the job's watermark and now that no node made (every node
down or behind) has no slot for a redefinition or a delete to cancel; the caller computes
those fire times from the definition it read (`unmade`, at most CATCHUP_LISTED) and the
script lists each still at or past the watermark and without a slot.

A member is `<fire_ms>:<reason>` or `<fire_ms>:<reason>:<detail>` (the overlap's running
slot id). A ledger keeps its newest FIRES_CAP entries: each write trims the oldest past it,
so a schedule that skips forever costs a bounded key. Each new entry also counts in the
shard's stats `not_run:<reason>` (the exporter's sched_occurrences_not_run). Only those rare transitions write it:
submit, claim and commit, the hot path, touch no ledger key, and promote only on its
overlap-skip branch.

Some reasons are read, not written, because they are a state of the present rather than an
event: an occurrence whose fire time passed and

- whose slot is still `scheduled`/`queued`: `pending`; past its objective, `no_worker` when
  no live worker reads its queue, `paused_by_limit` when its queue has a limit (live workers
  hold back), `behind` otherwise (workers read the queue but have not reached it);
- that has no slot and no entry and lies at or past the job's watermark (the next occurrence
  a node will make): `pending`, `no_scheduler` (no scheduler node has made it yet);
- that has no slot and no entry below the watermark, in Redis or the history store:
  `not_run`, `unrecorded` (its records left Redis and no store holds them).

A slot whose attempt failed and whose next attempt waits for its retry time reads
`retrying` (it started: its start lag is its first attempt's). A slot cancelled by an
operator (`cancel`) reads `cancelled`. A run that started is `ran`
(or `running`) with its outcome (`succeeded`, `dead`, `lost`, `cancelled`), and no reason.

The fire times of a window are the job's cron expression's, enumerated (croniter) from
max(window start, the current definition's start) to min(window end, now, end_at,
deleted_ms), joined with the slots and the ledger entries in the same range: the old
cadence of a redefined job shows through its slots and entries, and a `trigger()`ed run
through its slot. A page enumerates at most `limit` fire times from its cursor, so it costs
the same whatever the schedule's age. Its summary covers the whole window: when the window
holds more than the page, the window is read again page after page (MAX_FIRES_PAGE each),
at most SUMMARY_CAP occurrences, and a summary cut there says so (`complete`, `through_ms`).

Redis holds the recent past; the snapshotter copies each slot and each ledger entry (the
`not_run` events of materialize, redefine and delete_job) to the history store, which keeps
them `history_days`. A page reads the store too when Redis may have forgotten part of its
range (its window starts before the oldest record Redis holds of the job, or one of its fire
times below the watermark has no record in Redis), in one read; Redis's records win.

An occurrence started on time when its start lag (its first attempt's start, else its
claim, minus its fire time) is at most the job's `on_time_within` (default 2 s).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum

import msgspec

from scheduler.core.cron import CronSpec
from scheduler.core.models import Slot
from scheduler.core.states import SlotStatus
from scheduler.core.timing import utc_of_ms

FIRES_CAP = 10_000  # ledger entries kept per job (the newest)
CATCHUP_LISTED = 1_000  # catch-up drops listed per materialize pass; the rest only counted
MAX_FIRES_PAGE = 10_000  # most fire times one page enumerates
# Most occurrences one summary reads (page after page): a window past it is summarized up to
# there, and says so, so that a year of a per-second schedule costs a bounded read (about
# 0.25 s: enumerating the cron expression's fire times is most of it).
SUMMARY_CAP = 10_000


class FireState(StrEnum):
    """Where one occurrence stands."""

    RAN = "ran"  # it started and ended (see `outcome`)
    RUNNING = "running"
    RETRYING = "retrying"  # an attempt failed; the next waits for its retry time
    PENDING = "pending"  # its fire time passed and it has not started yet
    NOT_RUN = "not_run"  # it will not run (see `reason`)


class Reason(StrEnum):
    """Why an occurrence did not start (or has not yet)."""

    OVERLAP = "overlap"
    CATCHUP = "catchup"
    REDEFINED = "redefined"
    DELETED = "deleted"
    CANCELLED = "cancelled"
    NO_WORKER = "no_worker"
    PAUSED_BY_LIMIT = "paused_by_limit"
    BEHIND = "behind"
    NO_SCHEDULER = "no_scheduler"
    UNRECORDED = "unrecorded"


# Each reason in words, for people (`sched schedules explain`, the console's job page).
REASON_WORDS = {
    Reason.OVERLAP: "overlap: the run before was still active",
    Reason.CATCHUP: "catchup: no scheduler node ran in time; the catch-up policy dropped it",
    Reason.REDEFINED: "redefined: withdrawn by a new definition",
    Reason.DELETED: "deleted: the schedule was deleted",
    Reason.CANCELLED: "cancelled by an operator",
    Reason.NO_WORKER: "no_worker: no live worker reads its queue",
    Reason.PAUSED_BY_LIMIT: "paused_by_limit: its queue's limit holds it",
    Reason.BEHIND: "behind: workers read its queue but have not reached it",
    Reason.NO_SCHEDULER: "no_scheduler: no scheduler node has made its slot",
    Reason.UNRECORDED: "unrecorded: no record left in Redis (see `sched history`)",
}


# The reasons the Lua transitions write (the others are read from the present).
WRITTEN = frozenset({Reason.OVERLAP, Reason.CATCHUP, Reason.REDEFINED, Reason.DELETED})


class Fire(msgspec.Struct, frozen=True, kw_only=True):
    """One occurrence: its fire time, where it stands, why it did not run (None when it
    ran or runs), its slot (None when it never had one), its start lag and outcome, and for
    `overlap` the run it yielded to."""

    fire_ms: int
    fire_at: datetime
    state: FireState
    reason: Reason | None = None
    slot_id: str | None = None
    start_lag_ms: int | None = None
    outcome: str | None = None
    yielded_to: str | None = None


class FiresSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The occurrences of a window (all its pages): how many fell due, how many started within the
    objective (`on_time_within_ms`) and after it, how many did not start by reason, and the
    start lag's nearest-rank p50 / p99 / max over those that started. `on_time_share` is
    on_time over the occurrences due less those skipped by overlap (a skip is the
    schedule's own policy), None when none is left."""

    due: int
    started: int
    on_time: int
    late: int
    not_started: dict[str, int]
    on_time_within_ms: int
    on_time_share: float | None
    lag_p50_ms: int | None
    lag_p99_ms: int | None
    lag_max_ms: int | None
    missed_unlisted: int = 0  # catch-up drops of the job only counted, never listed
    complete: bool = True  # False: the window held more than SUMMARY_CAP occurrences
    through_ms: int | None = None  # when not complete: the last fire time summarized


class Objective(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule against its objective, as the scheduler node counts it
    (scheduler/core/objective.py): over the node's last `window_s`, its occurrences started
    on time, started or left waiting past their objective (`late`) and dropped by
    `catchup`; the share on time of those (None while the window decided none); the
    node's `target`; and since when it is listed behind its objective (None: it is not)."""

    window_s: float
    target: float
    on_time: int
    late: int
    catchup: int
    on_time_share: float | None
    behind_since: datetime | None = None


class FirePage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a schedule's timeline (`Client.fires`): its occurrences in fire-time
    order, their summary, and `cursor`, to pass back for the next page (None: none left);
    `objective`: the schedule against its objective over the node's window (None until a
    scheduler node counted it)."""

    job_id: str
    fires: list[Fire]
    summary: FiresSummary
    cursor: int | None = None
    objective: Objective | None = None


def entry(fire_ms: int, reason: Reason, detail: str = "") -> str:
    """A ledger member, as the Lua transitions write it."""
    return f"{fire_ms}:{reason}:{detail}" if detail else f"{fire_ms}:{reason}"


def parse_entry(member: bytes | str) -> tuple[int, Reason, str] | None:
    """(fire_ms, reason, detail) of a ledger member; None for one that does not parse."""
    text = member.decode("utf-8", "replace") if isinstance(member, bytes) else member
    fire, _, rest = text.partition(":")
    reason, _, detail = rest.partition(":")
    if not fire.isdigit() or reason not in set(Reason):
        return None
    return int(fire), Reason(reason), detail


def start_lag_ms(slot: Slot) -> int | None:
    """Its first attempt's start (else its claim) minus its fire time; None before one."""
    for attempt in slot.attempts:
        at = attempt.started_ms or attempt.claimed_ms
        if at:
            return max(0, at - slot.fire_ms)
    return None


_RAN = {SlotStatus.SUCCEEDED, SlotStatus.DEAD, SlotStatus.LOST, SlotStatus.CANCELLED}


def from_slot(slot: Slot, entries: dict[int, tuple[Reason, str]], yielded_to: str | None,
              pending_reason: Reason | None) -> Fire:
    """An occurrence that has a slot. `pending_reason`: what holds a pending one back
    (None while it is within its objective); `yielded_to`: the skipped slot's field."""
    lag = start_lag_ms(slot)
    base = Fire(fire_ms=slot.fire_ms, fire_at=utc_of_ms(slot.fire_ms), slot_id=slot.slot_id,
                state=FireState.NOT_RUN)
    replace = msgspec.structs.replace
    if slot.status is SlotStatus.RUNNING:
        return replace(base, state=FireState.RUNNING, start_lag_ms=lag)
    if slot.status in (SlotStatus.SCHEDULED, SlotStatus.QUEUED) and lag is not None:
        # an attempt started and failed: it started (its lag counts), and waits to retry
        return replace(base, state=FireState.RETRYING, start_lag_ms=lag)
    if slot.status in (SlotStatus.SCHEDULED, SlotStatus.QUEUED):
        return replace(base, state=FireState.PENDING, reason=pending_reason)
    if slot.status is SlotStatus.SKIPPED:
        _, detail = entries.get(slot.fire_ms, (Reason.OVERLAP, ""))
        return replace(base, reason=Reason.OVERLAP, yielded_to=yielded_to or detail or None)
    if slot.status in _RAN and (lag is not None or slot.status is not SlotStatus.CANCELLED):
        return replace(base, state=FireState.RAN, start_lag_ms=lag, outcome=slot.status.value)
    # Cancelled before it started: the ledger says by what.
    return replace(base, reason=entries.get(slot.fire_ms, (Reason.CANCELLED, ""))[0])


def from_entry(fire_ms: int, reason: Reason, detail: str = "") -> Fire:
    """An occurrence that has no slot, from its ledger entry."""
    return Fire(fire_ms=fire_ms, fire_at=utc_of_ms(fire_ms),
                state=FireState.NOT_RUN, reason=reason,
                yielded_to=(detail or None) if reason is Reason.OVERLAP else None)


def unmade(spec: CronSpec, watermark_ms: int | None, now_ms: int, end_ms: int = 0) -> list[int]:
    """The occurrences from a job's watermark (the first no node has made yet) to now, the
    most recent CATCHUP_LISTED of them, ascending: what a redefinition or a delete drops
    when no node made them in time. Walked back from now, so a long gap costs no more."""
    if watermark_ms is None:
        return []
    out: list[int] = []
    for t in spec.before(min(now_ms, end_ms or now_ms) + 1):
        if t < watermark_ms or len(out) == CATCHUP_LISTED:
            break
        out.append(t)
    return out[::-1]


def nearest_rank(ordered: Sequence[int], q: float) -> int | None:
    """The nearest-rank q-quantile of an ascending list; None for an empty one."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize(fires: Iterable[Fire], on_time_within_ms: int, missed_unlisted: int = 0
              ) -> FiresSummary:
    """The summary of some occurrences (FiresSummary says what each figure is)."""
    due = started = on_time = overlap = 0
    lags: list[int] = []
    not_started: dict[str, int] = {}
    for f in fires:
        due += 1
        if f.start_lag_ms is not None:
            started += 1
            lags.append(f.start_lag_ms)
            on_time += f.start_lag_ms <= on_time_within_ms
            continue
        key = str(f.reason) if f.reason is not None else str(f.state)
        not_started[key] = not_started.get(key, 0) + 1
        overlap += f.reason is Reason.OVERLAP
    lags.sort()
    counted = due - overlap
    return FiresSummary(
        due=due, started=started, on_time=on_time, late=started - on_time,
        not_started=dict(sorted(not_started.items())), on_time_within_ms=on_time_within_ms,
        on_time_share=on_time / counted if counted else None,
        lag_p50_ms=nearest_rank(lags, 0.5), lag_p99_ms=nearest_rank(lags, 0.99),
        lag_max_ms=lags[-1] if lags else None, missed_unlisted=missed_unlisted)
