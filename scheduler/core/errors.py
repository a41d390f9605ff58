"""Every exception the library raises, the two a handler raises to steer its own slot, and
the one warning it gives (`UnknownTaskWarning`)."""

from __future__ import annotations

import math
from typing import Any


class SchedulerError(Exception):
    """Base class of every error this library raises."""


class ValidationError(SchedulerError, ValueError):
    """Bad input from a caller. Raised before anything is written to Redis."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class UnknownTaskWarning(UserWarning):
    """A submit named a task that no worker of the namespace has registered (the task
    catalog, `Client.tasks()`): a typo, or a task whose workers have not started yet. Given
    once per task name per client; with the namespace setting `strict_tasks` on, such a
    submit is refused instead (ValidationError)."""


class ConfigError(SchedulerError, ValueError):
    """A component was configured with a value it cannot run with."""


class MissingExtra(ConfigError, ImportError):
    """A feature's optional dependency is not installed: the message says which extra to
    install (`psycopg` comes with `redis-sched[postgres]`)."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        self.extra = extra
        super().__init__(f"{feature} needs {module}: pip install 'redis-sched[{extra}]'")


class NamespaceError(SchedulerError):
    """The namespace in Redis disagrees with what the caller asked for."""


class NamespaceMissing(NamespaceError):
    """The namespace has no shard count in Redis yet: nothing was submitted to it (or Redis
    lost it). Services wait for it; `sched recover` rebuilds it from history."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        super().__init__(
            f"namespace {namespace!r} does not exist in Redis yet: it is created by its first "
            f"submit or `sched namespace create` (or by `sched recover` after Redis lost it); "
            f"check --namespace")


class JobNotFound(SchedulerError, LookupError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id!r} in this namespace (check --namespace and the id)")


class SlotNotFound(SchedulerError, LookupError):
    def __init__(self, slot_id: str) -> None:
        self.slot_id = slot_id
        super().__init__(f"no slot {slot_id!r} in this namespace (check --namespace and the id)")


class ResultExpired(JobNotFound):
    """Client.result: the job finished and has left Redis under the namespace's retention
    (the docs' "Retention" page), and no history store has it."""

    def __init__(self, job_id: str, retention_s: float, retain_max: int) -> None:
        self.retention_s = retention_s
        self.retain_max = retain_max
        SchedulerError.__init__(
            self, f"job {job_id!r} finished and its result expired under the namespace "
                  f"retention (finished work stays {retention_s:g} s, at most the last "
                  f"{retain_max:,} finished slots: `sched namespace show`); keep results "
                  f"longer with `sched namespace set --retention`, or keep history")
        self.job_id = job_id


class LeaseLost(SchedulerError):
    """This attempt no longer owns its slot (the lease expired and the slot was reclaimed or
    cancelled). Raised by `ctx.once`; the handler should stop without its effect."""


class RedisFailure(SchedulerError):
    """Redis failed a call: the base of the two below. The redis-py exception is chained as
    `__cause__`; `where` is the server's host:port."""

    def __init__(self, message: str, where: str = "") -> None:
        self.where = where
        super().__init__(message)


class RedisUnavailable(RedisFailure, ConnectionError):
    """Redis could not be reached, did not answer in time, is loading its data, or does not
    speak the Redis protocol. Whether a write in flight was applied is unknown."""


class RedisRefused(RedisFailure):
    """Redis answered, and refused: out of memory, a read-only replica, no such database,
    a wrong password or missing ACL permission, a script too busy. Nothing was written by
    the refused call."""


class SubmitError(RedisFailure):
    """`submit_many` wrote part of a batch: each per-shard chunk is one atomic script, and
    some ran while others failed. `written` holds exactly the ids that are in Redis (in
    input order); `not_written` the indexes (into the jobs given) of those that are not;
    `unknown` the indexes whose fate the failure hid (the connection broke before the
    reply, and Redis could not be asked again). Submitting a `not_written` job again is safe;
    an `unknown` one may then exist twice unless it has a dedupe key."""

    def __init__(self, message: str, where: str, written: list[str], not_written: list[int],
                 unknown: list[int]) -> None:
        super().__init__(message, where)
        self.written = written
        self.not_written = not_written
        self.unknown = unknown


class SubmitUnavailable(SubmitError, RedisUnavailable):
    """SubmitError because Redis could not be reached (also a RedisUnavailable)."""


class SubmitRefused(SubmitError, RedisRefused):
    """SubmitError because Redis refused (also a RedisRefused)."""


def submit_error(cause: RedisFailure, message: str, written: list[str], not_written: list[int],
                 unknown: list[int]) -> SubmitError:
    """The SubmitError of the kind of its cause, so that `except RedisUnavailable` (or
    RedisRefused) around a submit catches it too."""
    kind = SubmitUnavailable if isinstance(cause, RedisUnavailable) else SubmitRefused
    return kind(message, cause.where, written, not_written, unknown)


class DurabilityError(RedisFailure):
    """The jobs were written on the primary, but fewer replicas than asked confirmed them in
    time (durability="replicated"): they may or may not survive a failover. `written` holds
    their ids. Submitting them again with the same dedupe keys is safe (a dedupe key that
    exists writes nothing); without one, a job whose write did survive would run twice."""

    def __init__(self, message: str, where: str, written: list[str], confirmed: int,
                 wanted: int) -> None:
        super().__init__(message, where)
        self.written = written
        self.confirmed = confirmed
        self.wanted = wanted


class ScriptError(SchedulerError):
    """A Lua transition replied with a code the wrapper does not know; a bug, not bad input."""


# --- raised by handlers ---------------------------------------------------------------------


class Retry(Exception):
    """Raise from a handler to fail this attempt and retry after `after` seconds.

    The retry still counts against the job's max_attempts; when they are exhausted the slot
    goes to the dead-letter queue as with any other failure. An `at_most_once` job is never
    run again: its Retry ends it dead at once.
    """

    def __init__(self, after: float | None = None, reason: str = "retry requested") -> None:
        if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)
                                  or not math.isfinite(after) or after < 0):
            raise ValueError(f"Retry(after={after!r}) must be a finite number of seconds >= 0")
        self.after = after
        self.reason = reason
        super().__init__(reason)


class Cancel(Exception):
    """Raise from a handler to end this slot `cancelled` without further attempts."""

    def __init__(self, reason: str = "cancelled by handler") -> None:
        self.reason = reason
        super().__init__(reason)


class StoreUnavailable(SchedulerError):
    """The history store cannot be reached or opened (Postgres down, a wrong DSN, a path that
    cannot be written)."""


class RunFailed(SchedulerError):
    """Client.result: the slot ended without success; `status` says how (dead, cancelled,
    lost, skipped) and `error` is its last attempt's error, if any."""

    def __init__(self, slot_id: str, status: str, error: str | None) -> None:
        self.slot_id = slot_id
        self.status = status
        self.error = error
        super().__init__(f"slot {slot_id} ended {status}" + (f": {error}" if error else ""))


class ResultTimeout(SchedulerError, TimeoutError):
    """Client.result: the slot had not ended when the timeout ran out (it may still)."""

    def __init__(self, slot_id: str, status: str, timeout_s: float) -> None:
        self.slot_id = slot_id
        self.status = status
        super().__init__(f"slot {slot_id} is still {status} after {timeout_s:g}s")


class HandlerFailed(SchedulerError):
    """The testing mode (scheduler.testing): handlers raised during `drain()` or `advance()`.
    `runs` holds the failed runs (scheduler.testing.Ran); the first one's exception is the
    cause, so a test shows the handler's own traceback. Its slots moved on as a worker would
    move them (retry or dead letter) before this was raised."""

    def __init__(self, runs: list[Any]) -> None:
        self.runs = runs
        lines = [f"{r.task} (slot {r.slot_id}, attempt {r.attempt}): {r.error}" for r in runs[:5]]
        more = f"; and {len(runs) - 5} more" if len(runs) > 5 else ""
        super().__init__(f"{len(runs)} run(s) failed: " + "; ".join(lines) + more)
