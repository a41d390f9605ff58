"""The states of a slot, and the other closed sets of words a job is made of (its kind,
delivery, catch-up and overlap policies). The same strings are written and read by the Lua
transitions (a test checks the slot states)."""

from __future__ import annotations

from enum import StrEnum


class SlotStatus(StrEnum):
    """Where a slot is in its life: scheduled, queued, running, then one terminal status."""

    SCHEDULED = "scheduled"
    """In the shard's `due` set; the promoter moves it to a dispatch stream when due."""

    QUEUED = "queued"
    """In a dispatch stream; a worker's `claim` moves it to running."""

    RUNNING = "running"
    """Leased by one worker (token); its `complete`/`fail`/`release` moves it on, or the
    reclaimer when the lease expires."""

    SUCCEEDED = "succeeded"
    """Terminal: one committed success."""

    DEAD = "dead"
    """Terminal: attempts exhausted; in the shard's dead-letter set until replayed."""

    CANCELLED = "cancelled"
    """Terminal: cancelled by an operator or by the handler raising Cancel."""

    LOST = "lost"
    """Terminal: an at-most-once slot whose worker vanished; never re-run."""

    SKIPPED = "skipped"
    """Terminal: an occurrence of an `overlap="skip"` cron job that fell due while the job's
    previous slot was still active; set by the promoter instead of dispatching it."""


TERMINAL = frozenset({SlotStatus.SUCCEEDED, SlotStatus.DEAD, SlotStatus.CANCELLED, SlotStatus.LOST,
                      SlotStatus.SKIPPED})
ACTIVE = frozenset({SlotStatus.SCHEDULED, SlotStatus.QUEUED, SlotStatus.RUNNING})


class Outcome(StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # The handler raised Retry: it asked for another attempt, which is not a failure of the
    # handler; the attempt still counts against the job's max_attempts.
    RETRIED = "retried"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    RELEASED = "released"  # handed back at shutdown; does not count as a failure
    LOST = "lost"


class Delivery(StrEnum):
    """What a job's handler may count on when a worker dies mid-run."""

    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"
    EXACTLY_ONCE = "exactly_once"


class JobKind(StrEnum):
    IMMEDIATE = "immediate"
    DELAYED = "delayed"
    AT = "at"
    CRON = "cron"


class Catchup(StrEnum):
    """What a cron job does with occurrences missed while no scheduler node ran."""

    ALL = "all"  # run every missed occurrence (up to catchup_limit)
    LATEST = "latest"  # run only the most recent one
    NONE = "none"  # run none; count them in `missed`


class Overlap(StrEnum):
    """What a cron occurrence does when the job's previous slot is still active."""

    ALLOW = "allow"  # run anyway
    SKIP = "skip"  # end it `skipped`


class Durability(StrEnum):
    """When a submit returns."""

    PRIMARY = "primary"  # the primary has the write (lost if it dies before replicating)
    REPLICATED = "replicated"  # and WAIT saw the replicas confirm it
    FSYNCED = "fsynced"  # and WAITAOF saw the primary's AOF fsync it (Redis 7.2+, AOF on)
