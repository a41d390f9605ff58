"""What each Lua transition answers: one IntEnum of reply codes per script (the script's
header documents them), the structured replies, and `codes`, which decodes a list of codes
and refuses one it does not know. `scripts.py` re-exports them."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

import msgspec

from .errors import ScriptError


class Claimed(IntEnum):
    STALE = 0
    HELD = -1
    OK = 1


class Commit(IntEnum):
    REFUSED = 0
    OK = 1
    ALREADY = 2  # a repeat of this attempt's own commit


class Failed(IntEnum):
    REFUSED = 0
    RETRY = 1
    DEAD = 2
    CANCELLED = 3
    ALREADY = 4  # a repeat of this attempt's own failure


class Beat(IntEnum):
    LOST = 0
    OK = 1
    CANCEL = 2


class Released(IntEnum):
    REFUSED = 0
    REQUEUED = 1
    LOST = 2


class Cancelled(IntEnum):
    MISSING = -1
    TERMINAL = 0
    CANCELLED = 1
    REQUESTED = 2


class Once(IntEnum):
    LEASE_LOST = -1
    DONE_BEFORE = 0
    FIRST = 1
    MINE = 2  # recorded before by the same attempt


class Materialized(IntEnum):
    REFUSED = 0  # the watermark moved: another node materialized this job first
    OK = 1


class Leased(IntEnum):
    NOT_HELD = 0
    HELD = 1


class Swept(msgspec.Struct, frozen=True, array_like=True):
    """sweep.lua's reply: what it did to the orphans it found, and how many it left waiting
    for their lease."""

    redispatched: int
    rescheduled: int
    reindexed: int
    reclaimed: int
    lost: int
    dead: int
    cancelled: int
    waiting: int

    ACTIONS = ("redispatched", "rescheduled", "reindexed", "reclaimed", "lost", "dead",
               "cancelled")

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Swept:
        return cls(*(int(x) for x in reply))

    def repaired(self) -> dict[str, int]:
        return {a: getattr(self, a) for a in self.ACTIONS if getattr(self, a)}


def codes(reply: Sequence[int], kind: type[IntEnum]) -> list[Any]:
    try:
        return [kind(int(c)) for c in reply]
    except ValueError as exc:
        raise ScriptError(f"unexpected reply code from Lua ({kind.__name__}): {exc}") from None


def _ints(reply: Sequence[Any], n: int) -> list[int]:
    if len(reply) < n:
        raise ScriptError(f"unexpected reply from Lua: {n} values expected, got {reply!r}")
    return [int(x) for x in reply[:n]]


class Promoted(msgspec.Struct, frozen=True):
    """promote.lua: slots dispatched, the earliest score left in `due` (-1: empty), and
    occurrences that ended `skipped`."""

    promoted: int
    next_due_ms: int
    skipped: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Promoted:
        return cls(*_ints(reply, 3))


class Reclaimed(msgspec.Struct, frozen=True):
    """reclaim.lua: this pass's counts, and per queue (in the order given) the cursor for the
    next pass ("-": the scan reached the end)."""

    reclaimed: int
    lost: int
    dead: int
    redispatched: int
    cursors: list[str]

    COUNTS = ("reclaimed", "lost", "dead", "redispatched")

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Reclaimed:
        reclaimed, lost, dead, redispatched = _ints(reply, 4)
        return cls(reclaimed, lost, dead, redispatched,
                   [c.decode() if isinstance(c, bytes) else str(c) for c in reply[4:]])

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.COUNTS}


class MaterializeReply(msgspec.Struct, frozen=True):
    """materialize.lua: whether the watermark moved (REFUSED: another node did it first, or
    the job left the `cron` set), and how many slots are new."""

    code: Materialized
    created: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> MaterializeReply:
        code, created = _ints(reply, 2)
        return cls(codes([code], Materialized)[0], created)


class Restored(msgspec.Struct, frozen=True):
    """restore.lua: what one call put back."""

    jobs: int
    cron_watermarks: int
    slots_scheduled: int
    slots_dispatched: int
    slots_ended: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Restored:
        return cls(*_ints(reply, 5))


class Expired(msgspec.Struct, frozen=True):
    """expire.lua (retention): slot and job hashes deleted, and the score of the earliest
    `retain` entry left (-1: none)."""

    slots: int
    jobs: int
    next_ms: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Expired:
        return cls(*_ints(reply, 3))
