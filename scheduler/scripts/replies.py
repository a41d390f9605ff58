"""What each Lua transition answers, decoded here and nowhere else: `Code`, the one table of
reply codes (Lua reads the same table: `R.NAME`), which codes each script may answer, and one
decoder per structured reply. A reply of the wrong shape or an unknown code is a
ScriptError naming the script, not an IndexError somewhere in a loop."""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

import msgspec

from scheduler.core.errors import ScriptError

# WAIT's count is the transport's, which sends the WAIT; named here with the other replies.
from scheduler.redis.transport import confirmed as confirmed
from scheduler.redis.transport import wait_replies as wait_replies


class Code(IntEnum):
    """Every code a Lua transition answers, one meaning per number across all scripts. Lua
    reads this same table: a script writes `R.OK`, and source.py puts the number in its
    place when it loads the script, so no script writes a bare number for a code. `ANSWERS`
    says which codes each script gives (a test holds each script's `R.` names to it)."""

    OK = 1  # done as asked: claimed, committed, renewed, released, recorded, held, created
    STALE = 2  # what the caller presented (an attempt token, a stream entry) is out of date:
    #            the slot moved on without it (lease lost, reclaimed, cancelled); nothing
    #            written but a 'refused' event
    REPEAT = 3  # this very attempt did this before (its first reply was lost): nothing changed
    HELD = 4  # another holds it: the slot another consumer's claim, the lease another node
    RETRY = 5  # fail: rescheduled for a retry
    DEAD = 6  # fail: out of attempts, dead-lettered
    CANCELLED = 7  # the slot ended cancelled (fail saw a cancel request; cancel did it)
    CANCEL_REQUESTED = 8  # running: the worker is asked to stop it (cancel, heartbeat)
    TERMINAL = 9  # the slot had already ended: nothing to do
    MISSING = 10  # no such slot, or not in the dead-letter queue
    DONE_BEFORE = 11  # once: an earlier attempt recorded this effect; skip it
    EXISTS = 12  # submit: the job id is taken (a dedupe hit); nothing written
    LOST = 13  # release of an at_most_once run: it ends lost, never re-run
    MOVED = 14  # materialize: the watermark moved (another node did it first) or the job was
    #            redefined since the caller read it; redefine: the definition changed
    #            meanwhile; nothing written
    EARLY = 15  # claim: the slot was dispatched early and its time has not come; nothing written
    GRANT = 16  # claim: claimed, with the job fields the worker holds from the stream entry
    LIMITED = 17  # claim: the queue has a queue-wide limit and the claim held no permit;
    #               nothing written


ANSWERS: dict[str, frozenset[Code]] = {
    "claim": frozenset({Code.OK, Code.GRANT, Code.STALE, Code.HELD, Code.EARLY,
                        Code.LIMITED}),
    "take": frozenset({Code.OK}),
    "complete": frozenset({Code.OK, Code.REPEAT, Code.STALE}),
    "fail": frozenset({Code.RETRY, Code.DEAD, Code.CANCELLED, Code.REPEAT, Code.STALE}),
    "release": frozenset({Code.OK, Code.LOST, Code.STALE}),
    "heartbeat": frozenset({Code.OK, Code.CANCEL_REQUESTED, Code.STALE}),
    "once": frozenset({Code.OK, Code.REPEAT, Code.DONE_BEFORE, Code.STALE}),
    "cancel": frozenset({Code.CANCELLED, Code.CANCEL_REQUESTED, Code.TERMINAL, Code.MISSING}),
    "lease": frozenset({Code.OK, Code.HELD}),
    "materialize": frozenset({Code.OK, Code.MOVED}),
    "submit": frozenset({Code.OK, Code.EXISTS}),
    "replay": frozenset({Code.OK, Code.MISSING}),
    "purge": frozenset({Code.OK, Code.MISSING}),
    "delete_job": frozenset({Code.OK, Code.TERMINAL, Code.MISSING}),
    "trigger": frozenset({Code.OK, Code.TERMINAL, Code.MISSING}),
    "redefine": frozenset({Code.OK, Code.MOVED, Code.MISSING}),
}

# Decoding is a dict lookup, not Code(c): the committer decodes one code per finished run.
_DECODE = {script: {int(c): c for c in allowed} for script, allowed in ANSWERS.items()}


def codes(reply: Sequence[Any], script: str) -> list[Code]:
    """A script's reply of one code per item, checked against what the script may answer."""
    table = _DECODE[script]
    try:
        return [table[int(c)] for c in reply]
    except (KeyError, TypeError, ValueError):
        raise ScriptError(f"unexpected reply code from {script}.lua: {list(reply)!r} "
                          f"(it answers {sorted(c.name for c in ANSWERS[script])})") from None


def code(reply: Any, script: str) -> Code:
    """A script's reply of one code (once.lua)."""
    return codes([reply], script)[0]


class Deleted(msgspec.Struct, frozen=True):
    """delete_job.lua: OK (ended now), TERMINAL (deleted before) or MISSING; the slots it
    cancelled and those still running (they finish)."""

    code: Code
    cancelled: int
    running: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Deleted:
        return cls(code(reply[0], "delete_job"), int(reply[1]), int(reply[2]))


def triggered(reply: Sequence[Any]) -> tuple[Code, str]:
    """trigger.lua: (OK, the new slot's id), or (TERMINAL | MISSING, "")."""
    slot = reply[1]
    return code(reply[0], "trigger"), slot.decode() if isinstance(slot, bytes) else str(slot)


class Grant(msgspec.Struct, gc=False):
    """One claimed entry: what its run needs (claim.lua or take.lua granted it)."""
    token: int  # the attempt number, which fences the run's commit
    task: str
    payload: bytes | None
    timeout_ms: int  # 0: none
    delivery: str
    fire_ms: int  # from the slot id (JOB_ID:FIRE_MS), not sent back


_OK, _STALE, _HELD, _EARLY = int(Code.OK), int(Code.STALE), int(Code.HELD), int(Code.EARLY)
_GRANT, _LIMITED = int(Code.GRANT), int(Code.LIMITED)
LIMITED = -1
"""claimed()'s item for an entry refused for want of a queue-wide permit (LIMITED)."""
Carried = tuple[str, bytes | None, int, str]
"""The job fields a dispatch-stream entry carries (carry_entry in _lib.lua): task, payload
(None: null), timeout_ms (0: none), delivery; see carried()."""


def carried(fields: Sequence[bytes]) -> Carried:
    """An entry's t, p, o and d values (reader.py finds them by position) as a grant has them."""
    task, payload, timeout, delivery = fields
    return (task.decode(), payload or None, int(timeout or 0),
            delivery.decode() if delivery else "at_least_once")


def taken(reply: Sequence[Any], lane: str
          ) -> tuple[list[tuple[str, bytes, str]], Any, int, bool, list[bytes]]:
    """take.lua's reply for one shard: the entries it stands for ((lane, b"~" + key, slot
    id): a keyed slot has no stream entry; `lane` names the queue, for the run's metrics and
    its commit, which the key after the mark fences: complete.lua), the grants for them in
    claim.lua's form (claimed() or a tracer decodes them), how long (ms) until a key its rate
    held back has a token (-1: none was), whether the take was refused for want of
    queue-wide permits, and each entry's concurrency key."""
    try:
        ids, grants, wait, limited, keys = reply
        entries = [(lane, b"~" + key, slot_id.decode())
                   for slot_id, key in zip(ids, keys, strict=True)]
        return entries, grants, int(wait), bool(int(limited)), list(keys)
    except (TypeError, ValueError, AttributeError):
        raise ScriptError(f"unexpected reply from take.lua: {list(reply)[:4]!r}") from None


def claimed(reply: Sequence[Any], entries: Sequence[tuple[Any, Any, str]],
            traced: bool = False,
            carry: Sequence[Carried | None] | None = None) -> list[Grant | int | None]:
    """claim.lua's reply for one shard (one flat array: each entry's code, then its
    values), one item per entry of `entries` (the (lane, msg_id, slot_id) the call was
    built from), in order: its grant; None when the entry was not claimed (STALE: acked, the
    slot moved on; HELD: another consumer has it); or, for EARLY, the int time (ms) before
    which the slot may not start, so the worker holds its entry until then; LIMITED (-1)
    for an entry refused for want of a queue-wide permit. The grant's
    fire_ms is the slot id's (JOB_ID:FIRE_MS), not sent back; a GRANT's job fields are the
    ones `carry` holds for its entry (the call's ARGV[8] said so). `traced`: the call was sent
    with trace "1" (each grant 3 values longer, see traces). This runs once per claimed slot
    on the worker's hot path: Grant structs (built in C) and ints."""
    out: list[Grant | int | None] = []
    width = 9 if traced else 6  # the code and its values
    i, end = 0, len(reply)
    try:
        for k, (_, _, slot_id) in enumerate(entries):
            c = reply[i]
            if c == _GRANT:
                job: Any = carry[k]  # type: ignore[index]
                out.append(Grant(int(reply[i + 1]), job[0], job[1], job[2], job[3],
                                 int(slot_id[slot_id.rindex(":") + 1:])))
                i += 2
            elif c == _OK:
                task, delivery = reply[i + 2], reply[i + 5]
                out.append(Grant(int(reply[i + 1]), task.decode() if task else "",
                                 reply[i + 3], int(reply[i + 4] or 0),
                                 delivery.decode() if delivery else "at_least_once",
                                 int(slot_id[slot_id.rindex(":") + 1:])))
                i += width
            elif c == _STALE or c == _HELD:
                out.append(None)
                i += 1
            elif c == _EARLY:
                out.append(int(reply[i + 1]))
                i += 2
            elif c == _LIMITED:
                out.append(LIMITED)
                i += 1
            else:
                raise ScriptError(f"unexpected reply code from claim.lua: {c!r}")
    except (IndexError, TypeError, ValueError):
        i = -1
    if i != end:
        raise ScriptError(f"claim.lua's reply does not match its {len(entries)} entries: "
                          f"{list(reply)[:12]!r}...")
    return out


def claim_items(reply: Sequence[Any], traced: bool = False) -> list[list[Any]]:
    """claim.lua's flat reply cut into one list per entry ([code, values...]): for tests and
    traces, not the hot path."""
    items, i = [], 0
    width = {_OK: 9 if traced else 6, _EARLY: 2, _GRANT: 2}
    while i < len(reply):
        n = width.get(reply[i], 1)
        items.append(list(reply[i:i + n]))
        i += n
    return items


def traces(reply: Sequence[Any]) -> dict[str, tuple[str | None, bool]]:
    """The trace part of claim.lua's reply (sent with trace "1"): for each granted slot, its
    job's traceparent (None: stored without one) and whether it is a cron job. Only a
    tracing worker calls it (tracing.py)."""
    return {item[8].decode(): (item[6].decode() if item[6] else None, item[7] == b"cron")
            for item in claim_items(reply, traced=True) if item[0] == _OK}


class Lease(msgspec.Struct, frozen=True):
    """lease.lua: whether this node holds (acquire) or gave back (release) the shard's lease,
    its epoch if so, else the current holder's value ("" if none)."""

    held: bool
    epoch: int
    holder: str

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Lease:
        if len(reply) < 2:
            raise ScriptError(f"unexpected reply from lease.lua: {reply!r}")
        if code(reply[0], "lease") is Code.OK:
            return cls(True, int(reply[1]), "")
        value = reply[1]
        return cls(False, 0, value.decode() if isinstance(value, bytes) else str(value))


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


class Cleaned(msgspec.Struct, frozen=True):
    """clean_lanes.lua: lanes dropped from the shard's index, lanes kept (they hold
    something), idle lanes still to look at (call again), and idle queues whose keys hold
    nothing queued dropped from the shard's `kqueues`."""

    removed: int
    kept: int
    left: int
    keyed_removed: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Cleaned:
        return cls(*_ints(reply, 4))


class MaterializeReply(msgspec.Struct, frozen=True):
    """materialize.lua: whether it was refused because the watermark moved (another node did
    it first, or the job left the `cron` set), and how many slots are new."""

    moved: bool
    created: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> MaterializeReply:
        answer, created = _ints(reply, 2)
        return cls(code(answer, "materialize") is Code.MOVED, created)


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


class Retired(msgspec.Struct, frozen=True):
    """retire.lua (retention): slot and job hashes deleted, and the score of the earliest
    `retain` entry left (-1: none)."""

    slots: int
    jobs: int
    next_ms: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Retired:
        return cls(*_ints(reply, 3))


class Expired(msgspec.Struct, frozen=True):
    """expire.lua (the node's expirer): slots, jobs and dead-lettered slots removed, slots
    held until the history store has them, and the shard's `finished` entries left with the
    finished_ms of the oldest (-1: none)."""

    slots: int
    jobs: int
    dead: int
    held: int
    finished: int
    oldest_ms: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Expired:
        return cls(*_ints(reply, 6))


class Acquired(msgspec.Struct, frozen=True):
    """acquire.lua: how many permits were granted, how long until the rate allows the next
    (-1: it did not hold the grant back), and the members granted ("" each when the queue
    has no concurrency limit: nothing to give back)."""

    granted: int
    wait_ms: int
    members: list[str]

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> Acquired:
        granted, wait = _ints(reply, 2)
        members = [m.decode() if isinstance(m, bytes) else str(m) for m in reply[2:]]
        if len(members) != granted:
            raise ScriptError(f"acquire: {granted} permits granted but {len(members)} members")
        return cls(granted, wait, members)
