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
