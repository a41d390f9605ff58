"""A schedule's objective over a window: the share of its occurrences started on time.

An occurrence is on time when it starts within its job's `on_time_within` of its fire time
(scheduler/core/ledger.py). A schedule is **behind its objective** when, over the last
`window_s` (default an hour), the share of its occurrences started on time is below the
`target` (default 0.99): one late run out of 3,600 is not behind; a schedule whose queue no
worker reads is, from its first occurrence left waiting past its objective.

Each occurrence is counted once, when it is decided: it started (on time or `late`), it
waited past its objective without starting (`late`: a later start does not make it on
time), or it will not run, with the fire ledger's reason. The share is

    on time / (on time + late + catchup)

Occurrences skipped by overlap (the schedule's own policy) and those withdrawn by an
operator (`cancelled`, `redefined`, `deleted`) count neither way; `catchup` drops (no node
made them in time) count as misses.

The counts live in the job's shard, in a hash `ontime:<job_id>`, in BUCKETS buckets per
window keyed by the bucket's start (ms): `<bucket_ms>:<kind>` -> count, and `through`, the
fire time of the last occurrence counted. The scheduler node's objective watch
(scheduler/node/objectives.py) writes it, not the scripts that start a run: claim and
promote, the hot path, stay as they were. Reading a window's share costs one HGETALL of at
most BUCKETS + 1 buckets times a few kinds, whatever the schedule's cadence.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.core.ledger import Objective, Reason
from scheduler.core.timing import utc_of_ms

DEFAULT_ON_TIME_TARGET = 0.99  # the share of a window's occurrences started on time
DEFAULT_OBJECTIVE_WINDOW_S = 3600.0  # the window the share is taken over
BUCKETS = 12  # a window's counts, in this many buckets: the window moves a bucket at a time
MIN_BUCKET_MS = 1_000
THROUGH = "through"  # the hash field: the fire time of the last occurrence counted (ms)
WINDOW = "window_ms"  # the hash field: the window of the node that counted last (ms)
TARGET = "target"  # the hash field: that node's target
ON_TIME = "on"
LATE = "late"
# What counts against the share besides a late start: an occurrence no node made in time.
MISSES = frozenset({LATE, Reason.CATCHUP.value})


def bucket_ms(window_ms: int) -> int:
    """A bucket's width for a window."""
    return max(MIN_BUCKET_MS, window_ms // BUCKETS)


def field(fire_ms: int, kind: str, width_ms: int) -> str:
    """The hash field an occurrence of this fire time counts in."""
    return f"{fire_ms - fire_ms % width_ms}:{kind}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def totals(raw: Mapping[bytes, bytes] | Mapping[str, str], now_ms: int, window_ms: int
           ) -> dict[str, int]:
    """Counts by kind (`on`, `late`, a reason) of the buckets that start within the window
    ending now."""
    out: dict[str, int] = {}
    for key, value in raw.items():
        start, _, kind = _text(key).partition(":")
        if kind and start.isdigit() and int(start) > now_ms - window_ms:
            out[kind] = out.get(kind, 0) + int(value)
    return out


def expired(raw: Mapping[bytes, bytes] | Mapping[str, str], now_ms: int, window_ms: int
            ) -> list[str]:
    """The fields of buckets that ended before the window ending now started."""
    width = bucket_ms(window_ms)
    out = []
    for key in raw:
        name = _text(key)
        start, _, kind = name.partition(":")
        if kind and start.isdigit() and int(start) + width <= now_ms - window_ms:
            out.append(name)
    return out


def on_time_share(counts: Mapping[str, int]) -> float | None:
    """On time over on time plus misses; None when the window decided none."""
    on = counts.get(ON_TIME, 0)
    counted = on + sum(counts.get(kind, 0) for kind in MISSES)
    return on / counted if counted else None


def is_behind(counts: Mapping[str, int], target: float) -> bool:
    """Whether a window's counts miss the target (a window that decided none does not)."""
    share = on_time_share(counts)
    return share is not None and share < target


def reading(raw: Mapping[bytes, bytes], behind_ms: float | None, now_ms: int
            ) -> Objective | None:
    """A schedule's `ontime` hash (and its score in `behind`) as a record; None until a
    node counted it."""
    window_ms, target = raw.get(WINDOW.encode()), raw.get(TARGET.encode())
    if not window_ms or not target:
        return None
    counts = totals(raw, now_ms, int(window_ms))
    return Objective(window_s=int(window_ms) / 1000, target=float(target),
                     on_time=counts.get(ON_TIME, 0), late=counts.get(LATE, 0),
                     catchup=counts.get(Reason.CATCHUP.value, 0),
                     on_time_share=on_time_share(counts),
                     behind_since=None if behind_ms is None else utc_of_ms(int(behind_ms)))
