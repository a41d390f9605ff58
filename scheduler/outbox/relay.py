"""The relay: moves committed outbox rows into Redis, a batch per Postgres transaction.

One pass (`run_once`): lock and delete the oldest rows no other relay holds (FOR UPDATE SKIP
LOCKED, so several relays share the work), `submit_many` them with each row's job id, then
commit. The delete commits only after Redis has the jobs; if the relay dies between the two,
its transaction rolls back, the rows are back and unlocked, and the next pass sends them again
under the same ids: submit.lua finds each job written and writes nothing (the resend is idempotent while
the job is in Redis, that is until the retention after it finished).

A row is refused alone: one that does not decode or validate, whatever the exception (a
payload nested past the decoder's depth, a cron whose first fire is past year 9999, a row
another service wrote), or one written for another namespace, moves to outbox_rejected with
the reason, and the rest of its batch goes on. Only a failure of Redis or Postgres keeps a
batch where it is.

Each outbox serves one namespace: the first relay records its own in the outbox, and a relay
of another namespace refuses to start (`bind`).

`run` repeats passes while a batch comes back full, then waits for a NOTIFY (the outbox's
trigger sends one at each inserting commit) or `poll_s`. When Redis or Postgres fails, rows
stay where they are: the relay logs one line per outage, backs off up to `max_backoff_s` and
tries again.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from typing import Any

import msgspec

import scheduler.redis.transport as transport
from scheduler.core.bounds import RELAY_BOUNDS
from scheduler.core.errors import (
    ConfigError,
    MissingExtra,
    RedisFailure,
    SchedulerError,
    ValidationError,
)
from scheduler.core.finite import check_bounds, check_finite
from scheduler.core.jobspec import JobSpec
from scheduler.observe import metrics
from scheduler.outbox.rows import channel, decode_spec, queries, status
from scheduler.outbox.writer import DEFAULT_SCHEMA
from scheduler.redis.failures import REDIS_ERRORS
from scheduler.sdk.client import Client

try:
    import psycopg
except ImportError:  # the `postgres` extra
    raise MissingExtra("the outbox's relay and schema", "postgres", "psycopg") from None

log = logging.getLogger("scheduler.outbox.relay")
APPLICATION_NAME = "sched outbox relay"  # what pg_stat_activity shows of its connections


class RelayConfig(msgspec.Struct, frozen=True, kw_only=True):
    """`batch`: most rows per transaction (and per submit_many); `poll_s`: the longest wait
    without a NOTIFY (one can be missed while the relay reconnects); `max_backoff_s`: the
    longest wait between tries while Redis or Postgres fails; `durability`: submit_many's
    (None: the client's)."""

    batch: int = 1000
    poll_s: float = 1.0
    max_backoff_s: float = 5.0
    lag_every_s: float = 1.0
    durability: str | None = None

    def __post_init__(self) -> None:
        check_finite(self)
        if self.batch < 1 or self.poll_s <= 0 or self.max_backoff_s <= 0 \
                or self.lag_every_s <= 0:
            raise ConfigError("batch must be >= 1, poll_s, max_backoff_s and lag_every_s > 0")
        check_bounds(self, RELAY_BOUNDS)


class OutboxRelay:
    """`client` submits into its namespace; `dsn` is the application's database."""

    def __init__(self, client: Client, dsn: str, *, schema: str = DEFAULT_SCHEMA,
                 config: RelayConfig | None = None) -> None:
        self.client = client
        # A row naming a task no worker registered goes on (unless the namespace is strict:
        # then it is rejected with the reason); the operator reads that in the relay's log.
        client._core.on_unknown_task = lambda text: log.warning("outbox: %s", text)
        self.dsn = dsn
        self.config = config or RelayConfig()
        self.schema = schema
        self.q = queries(schema)
        self.channel = channel(schema)
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._listen: psycopg.Connection[Any] | None = None
        self._lag_at = 0.0
        self._bound = False
        self.relayed = 0
        self.rejected = 0

    # --- connections ----------------------------------------------------------------------

    def _work(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, connect_timeout=5,
                                         application_name=APPLICATION_NAME)
        return self._conn

    def _listener(self) -> psycopg.Connection[Any]:
        if self._listen is None or self._listen.closed:
            self._listen = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5,
                                           application_name=APPLICATION_NAME)
            self._listen.execute(f'LISTEN "{self.channel}"')
        return self._listen

    def close(self) -> None:
        """Close the relay's Postgres connections (not the client's); idempotent."""
        for conn in (self._conn, self._listen):
            if conn is not None:
                conn.close()
        self._conn = self._listen = None

    # --- one pass -------------------------------------------------------------------------

    def run_once(self) -> int:
        """Move one batch; returns how many rows left the outbox (0: none waited). Raises
        RedisFailure / psycopg.Error with the rows still in place, ConfigError when the
        outbox serves another namespace."""
        if not self._bound:
            self.bind()
        conn = self._work()
        try:
            with conn.cursor() as cur:
                cur.execute(self.q["take"], {"limit": self.config.batch})
                rows = sorted(cur.fetchall())  # RETURNING keeps no order: by seq again
                # The rows' DELETE commits only below, once Redis has their jobs: a failure
                # in between leaves them in place, to be sent again under the same ids.
                good, bad = self._send(rows) if rows else (0, [])
                for row, error in bad:
                    cur.execute(self.q["reject"], {"seq": row[0], "job_id": row[1],
                                                   "spec": row[2], "created_at": row[3],
                                                   "namespace": row[4], "error": error})
            conn.commit()
        except BaseException:
            if not conn.closed:
                conn.rollback()
            raise
        self.relayed += good
        self.rejected += len(bad)
        metrics.OUTBOX_RELAYED.inc(good)
        if bad:
            metrics.OUTBOX_REJECTED.inc(len(bad))
            log.error("outbox: %d row(s) refused as jobs, moved to outbox_rejected (first: "
                      "%s)", len(bad), bad[0][1])
        return len(rows)

    def _send(self, rows: list[Any]) -> tuple[int, list[tuple[Any, str]]]:
        """Submit the rows' jobs under their ids; (jobs in Redis, [(row, why refused)])."""
        namespace = self.client.keys.ns
        specs: list[JobSpec] = []
        kept: list[Any] = []
        bad: list[tuple[Any, str]] = []
        for row in rows:
            if row[4] is not None and row[4] != namespace:
                bad.append((row, f"written for namespace {row[4]!r}; this outbox serves "
                                 f"{namespace!r} (write it to the outbox of its namespace)"))
                continue
            try:
                specs.append(decode_spec(row[2]))
                kept.append(row)
            except Exception as exc:  # noqa: BLE001 - whatever a row holds, it is the row's
                bad.append((row, reason(exc)))
        ids = [row[1] for row in kept]
        try:
            self.client.submit_many(specs, ids=ids, durability=self.config.durability)
            return len(specs), bad
        except Exception as exc:  # noqa: BLE001 - refused: find the row(s), one at a time
            if is_outage(exc):
                raise
        sent = 0
        for spec, row in zip(specs, kept, strict=True):
            try:
                self.client.submit_many([spec], ids=[row[1]], durability=self.config.durability)
                sent += 1
            except Exception as exc:  # noqa: BLE001 - the batch's others go on
                if is_outage(exc):
                    raise  # every row stays; the ones already sent are resent idempotently
                bad.append((row, reason(exc)))
        return sent, bad

    def bind(self) -> None:
        """Record the client's namespace as the one the outbox serves, unless one is; a
        ConfigError (one line naming both) when it serves another."""
        namespace = self.client.keys.ns
        conn = self._work()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(self.q["bind"], {"namespace": namespace})
            cur.execute(self.q["bound"])
            found = cur.fetchone()
        serves = found[0] if found else namespace
        if serves != namespace:
            raise ConfigError(f"outbox schema {self.schema!r} serves namespace {serves!r}, not "
                              f"{namespace!r}: give namespace {namespace!r} an outbox of its own "
                              f"(sched db upgrade --outbox --outbox-schema NAME, then "
                              f"--outbox-schema NAME here and schema=NAME in outbox.submit)")
        self._bound = True

    def lag(self) -> tuple[int, float]:
        """(rows waiting, the oldest one's age in seconds)."""
        conn = self._work()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(self.q["lag"])
            count, age = cur.fetchone() or (0, 0)
        return int(count), float(age)

    def lag_or_refuse(self) -> None:
        """ConfigError (one line) when the database has no outbox in the schema, or when it
        serves another namespace."""
        status(self._work(), self.schema)
        self.bind()

    def _publish_lag(self) -> None:
        now = time.monotonic()
        if now - self._lag_at < self.config.lag_every_s:
            return
        self._lag_at = now
        count, age = self.lag()
        metrics.OUTBOX_WAITING.set(count)
        metrics.OUTBOX_LAG.set(age)
        try:  # for `sched status`, which has no DSN: the last report of any relay
            transport.call_sync(self.client.redis, "hset", self.client.keys.outbox, mapping={
                "rows": count, "lag_ms": int(age * 1000), "at_ms": self.client.now_ms()})
        except (RedisFailure, *REDIS_ERRORS):
            pass  # Redis down: the relay's own loop notices and says so

    # --- the service ----------------------------------------------------------------------

    def run(self) -> None:
        """Relay until stop(). Failures of Redis or Postgres are waited out, never raised;
        so is any other failure of a pass (logged with its traceback): rows are refused one
        by one, so none should reach here. ConfigError (another namespace's outbox) is
        raised."""
        log.info("outbox relay started: namespace %r, schema %r", self.client.keys.ns,
                 self.schema)
        backoff = 0.0
        down: str | None = None  # what is failing, while it is: logged once per outage
        while not self._stop.is_set():
            try:
                moved = self.run_once()
                self._publish_lag()
                if down is not None:
                    log.warning("outbox: %s reachable again, relaying", down)
                    down, backoff = None, 0.0
                if moved < self.config.batch:
                    self._wait()  # its LISTEN connection may break too
            except (SchedulerError, psycopg.Error) as exc:  # RedisFailure and its kin
                if isinstance(exc, ConfigError) and not self._bound:
                    raise  # the outbox serves another namespace: waiting will not mend that
                what = "Postgres" if isinstance(exc, psycopg.Error) else "Redis"
                if down != what:
                    log.warning("outbox: %s failing, rows wait in the outbox: %s", what,
                                str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                    down = what
                if isinstance(exc, psycopg.Error):
                    self.close()
                else:  # the lag keeps growing in the metric while Redis is down
                    with contextlib.suppress(psycopg.Error):
                        self._publish_lag()
                backoff = min(self.config.max_backoff_s, max(0.05, backoff * 2))
                self._stop.wait(backoff)
            except Exception as exc:  # noqa: BLE001 - a relay outlives its own bugs
                what = f"a pass ({type(exc).__name__})"
                if down != what:
                    log.exception("outbox: %s failed, rows wait in the outbox", what)
                    down = what
                self.close()
                backoff = min(self.config.max_backoff_s, max(0.05, backoff * 2))
                self._stop.wait(backoff)
        self.close()
        log.info("outbox relay stopped: %d row(s) relayed, %d rejected", self.relayed,
                 self.rejected)

    def _wait(self) -> None:
        """Until a NOTIFY, poll_s, or stop() (seen within half a second)."""
        deadline = time.monotonic() + self.config.poll_s
        listen = self._listener()
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if any(True for _ in listen.notifies(timeout=min(left, 0.5), stop_after=1)):
                # Drain the ones already here: one pass serves every commit before it. (Not
                # from inside the loop above: its generator holds the connection's lock.)
                for _ in listen.notifies(timeout=0):
                    pass
                return

    def stop(self) -> None:
        """Ask `run` to return (from another thread or a signal handler); idempotent."""
        self._stop.set()


def is_outage(exc: BaseException) -> bool:
    """Whether a failure is Redis's or Postgres's (the rows wait) rather than a row's (it
    is refused)."""
    return (isinstance(exc, (SchedulerError, psycopg.Error, OSError, *REDIS_ERRORS))
            and not isinstance(exc, ValidationError))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # NUL breaks Postgres's text; ESC, terminals
REASON_CHARS = 1000  # of a refusal's text kept in outbox_rejected: a huge value stays out


def reason(exc: BaseException) -> str:
    """Why a row was refused, as one line Postgres can store (text holds no NUL)."""
    text = str(exc) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", " ".join(text.split()))
    return text[:REASON_CHARS]
