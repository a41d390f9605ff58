"""scheduler.outbox against a real Postgres and the test Redis, the relay run in-process one
pass at a time: what a transaction writes, what the relay sends, and what a failure between
the two leaves (tests/faults/test_outbox.py runs the real processes)."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import redis

from conftest import POSTGRES_DSN
from helpers import sched
from scheduler import (
    Client,
    JobSpec,
    RedisFailure,
    RetryPolicy,
    UnknownTaskWarning,
    ValidationError,
    outbox,
)
from scheduler.core.errors import ConfigError
from scheduler.outbox.relay import OutboxRelay, RelayConfig
from scheduler.outbox.rows import upgrade


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"ob_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
        upgrade(admin, name)
        yield name
        admin.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(POSTGRES_DSN) as c:
        yield c


@pytest.fixture
def client(redis_url: str, ns: str) -> Iterator[Client]:
    with Client(redis_url, ns) as c:
        yield c


@pytest.fixture
def relay(client: Client, schema: str) -> Iterator[OutboxRelay]:
    service = OutboxRelay(client, POSTGRES_DSN, schema=schema)
    yield service
    service.close()


def rows(conn: psycopg.Connection[Any], schema: str, table: str = "outbox") -> int:
    with psycopg.connect(POSTGRES_DSN) as other:  # what a committed reader sees
        found = other.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
    return int(found[0]) if found else 0


def jobs_in_redis(r: redis.Redis, ns: str) -> int:
    return sum(1 for _ in r.scan_iter(match=f"{ns}:*job:*", count=10_000)
               if b":job:" in _ and b"submitted" not in _)


def test_a_rolled_back_submit_never_reaches_redis(conn: psycopg.Connection[Any], schema: str,
                                                  relay: OutboxRelay, r: redis.Redis,
                                                  ns: str) -> None:
    outbox.submit(conn, "send", {"order": 1}, schema=schema)
    outbox.submit_many(conn, [JobSpec(task="send", payload=i) for i in range(5)], schema=schema)
    conn.rollback()
    assert rows(conn, schema) == 0
    assert relay.run_once() == 0
    assert jobs_in_redis(r, ns) == 0


def test_a_committed_submit_becomes_the_job_it_named(conn: psycopg.Connection[Any], schema: str,
                                                     relay: OutboxRelay,
                                                     client: Client) -> None:
    at = datetime.now(UTC) + timedelta(hours=1)
    one = outbox.submit(conn, "send", {"order": 1, "to": "a@b"}, queue="mail", priority=1,
                        timeout=30, retry=RetryPolicy(max_attempts=5), schema=schema)
    later = outbox.submit(conn, "remind", None, at=at, schema=schema)
    delayed, keyed, cron = outbox.submit_many(conn, [
        {"task": "t", "payload": [1, 2], "delay": timedelta(minutes=5)},
        JobSpec(task="t", dedupe_key="order-1"),
        JobSpec(task="c", cron="0 3 * * *", tz="Europe/Paris"),
    ], schema=schema)
    conn.commit()
    assert relay.run_once() == 5 and relay.run_once() == 0
    assert rows(conn, schema) == 0
    job = client.get_job(one)
    assert (job.task, job.queue, job.priority, job.payload) == ("send", "mail", 1,
                                                                 {"order": 1, "to": "a@b"})
    assert job.retry.max_attempts == 5 and job.timeout_s == 30
    assert client.get_job(later).fire_ms == int(at.timestamp() * 1000)
    assert client.get_job(delayed).payload == [1, 2]
    assert client.get_job(delayed).delay_s == 300
    assert keyed == client.submit("t", dedupe_key="order-1")  # the key's own id
    assert client.get_job(cron).cron == "0 3 * * *"


@pytest.mark.parametrize("bad", [
    {"task": "bad\ntask"}, {"task": "t", "queue": "no spaces"}, {"task": "t", "priority": 9},
    {"task": "t", "payload": {1: "not a string key"}}, {"task": "t", "payload": float("nan")},
    {"task": "t", "cron": "not cron"}, {"task": "t", "delay": 1, "at": datetime.now(UTC)},
    {"task": "t", "at": datetime(2030, 1, 1)}, {"task": "t", "delivery": "twice"},
    {"task": "t", "retry": "3 times"}, {"task": "t", "nope": 1},
])
def test_bad_input_is_refused_as_client_submit_refuses_it_and_nothing_is_written(
        conn: psycopg.Connection[Any], schema: str, client: Client, bad: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError) as by_client:
        client.submit_many([bad])
    with pytest.raises(ValidationError) as by_outbox:
        outbox.submit_many(conn, [{"task": "fine"}, bad], schema=schema)
    assert str(by_outbox.value) == str(by_client.value)
    conn.commit()
    assert rows(conn, schema) == 0


def test_a_resend_after_redis_acknowledged_writes_nothing_twice(
        conn: psycopg.Connection[Any], schema: str, relay: OutboxRelay, client: Client,
        r: redis.Redis, ns: str) -> None:
    """Postgres fails the relay's commit once, after Redis took the batch (as a relay killed
    at that moment, or a Postgres restart, would leave it): the rows stay, the next pass
    sends them again, and Redis holds each job once, under the id outbox.submit returned.
    The failure is a deferred constraint trigger: it runs at COMMIT."""
    ids = outbox.submit_many(conn, [JobSpec(task="send", payload=i) for i in range(300)],
                             schema=schema)
    conn.execute(f"""
        CREATE FUNCTION "{schema}".fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM "{schema}".outbox_rejected WHERE seq = -1) THEN
                RAISE EXCEPTION 'planted failure of the first commit';
            END IF;
            RETURN OLD;
        END $$;
        CREATE CONSTRAINT TRIGGER fail_once AFTER DELETE ON "{schema}".outbox
            DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW EXECUTE FUNCTION "{schema}".fail_once();""")
    conn.commit()
    with pytest.raises(psycopg.Error, match="planted failure"):
        relay.run_once()
    assert rows(conn, schema) == 300 and jobs_in_redis(r, ns) == 300
    conn.execute(f"""INSERT INTO "{schema}".outbox_rejected (seq, job_id, spec, created_at,
                     error) VALUES (-1, '', '', now(), 'lets the commit through')""")
    conn.commit()
    assert relay.run_once() == 300
    assert rows(conn, schema) == 0
    assert jobs_in_redis(r, ns) == 300
    assert [j.payload for j in map(client.get_job, ids)] == list(range(300))
    assert all(len(client.slots(j)) == 1 for j in ids[:20])


def test_rows_wait_while_redis_is_unreachable(conn: psycopg.Connection[Any], schema: str,
                                              relay: OutboxRelay, ns: str,
                                              r: redis.Redis) -> None:
    ids = outbox.submit_many(conn, [JobSpec(task="send")] * 10, schema=schema)
    conn.commit()
    with Client("redis://127.0.0.1:1/0", ns, timeout_s=0.5) as down:
        cut_off = OutboxRelay(down, POSTGRES_DSN, schema=schema)
        try:
            with pytest.raises(RedisFailure):
                cut_off.run_once()
        finally:
            cut_off.close()
    assert rows(conn, schema) == 10 and jobs_in_redis(r, ns) == 0
    assert relay.run_once() == 10
    assert jobs_in_redis(r, ns) == 10 and sorted(ids) == sorted(
        k.decode().rsplit(":", 1)[1] for k in r.scan_iter(match=f"{ns}:*job:*", count=10_000)
        if b"submitted" not in k)


def test_a_job_redis_refuses_is_kept_aside_and_the_rest_go(
        conn: psycopg.Connection[Any], schema: str, redis_url: str, ns: str) -> None:
    """A payload over the namespace's limit (which only Redis knows) cannot block the
    outbox: its row moves to outbox_rejected with the reason; the batch's others go."""
    with Client(redis_url, ns, max_payload_bytes=1000) as small:
        small.create_namespace()
        ok = outbox.submit(conn, "t", "x" * 10, schema=schema)
        big = outbox.submit(conn, "t", "x" * 5000, schema=schema)
        conn.commit()
        service = OutboxRelay(small, POSTGRES_DSN, schema=schema)
        try:
            assert service.run_once() == 2
        finally:
            service.close()
        assert small.get_job(ok).payload == "x" * 10
    assert rows(conn, schema) == 0 and rows(conn, schema, "outbox_rejected") == 1
    with psycopg.connect(POSTGRES_DSN) as other:
        job_id, error = other.execute(
            f'SELECT job_id, error FROM "{schema}".outbox_rejected').fetchone() or ("", "")
    assert job_id == big and "over the limit" in error


def test_a_keyed_job_is_named_in_its_home_shard_and_a_misplaced_one_kept_aside(
        conn: psycopg.Connection[Any], schema: str, relay: OutboxRelay, client: Client) -> None:
    """The outbox names a keyed job in its key's home shard, so it needs the namespace's
    shard count; a row named for another count is refused by the relay, not misplaced."""
    from scheduler.core.keys import key_shard, shard_of

    shards = client.shards
    with pytest.raises(ValidationError, match="shards=") as err:
        outbox.submit(conn, "t", concurrency_key="tenant-1", schema=schema)
    assert "\n" not in str(err.value)
    good = outbox.submit(conn, "t", concurrency_key="tenant-1", schema=schema, shards=shards)
    [many] = outbox.submit_many(conn, [JobSpec(task="t", concurrency_key="tenant-1")],
                                schema=schema, shards=shards)
    wrong = next(j for j in (outbox.submit(conn, "t", concurrency_key="tenant-1",
                                           schema=schema, shards=7) for _ in range(50))
                 if shard_of(j, shards) != key_shard("tenant-1", shards))
    conn.commit()
    assert relay.run_once() >= 3
    for job_id in (good, many):
        assert shard_of(job_id, shards) == key_shard("tenant-1", shards)
        assert client.get_job(job_id).concurrency_key == "tenant-1"
    with psycopg.connect(POSTGRES_DSN) as other:
        refused = dict(other.execute(
            f'SELECT job_id, error FROM "{schema}".outbox_rejected').fetchall())
    assert wrong in refused and "concurrency_key" in refused[wrong]


def test_lag_is_the_oldest_rows_age(conn: psycopg.Connection[Any], schema: str,
                                    relay: OutboxRelay) -> None:
    assert relay.lag() == (0, 0.0)
    outbox.submit(conn, "t", schema=schema)
    conn.commit()
    waiting, age = relay.lag()
    assert waiting == 1 and 0 <= age < 60


def test_relay_config_is_checked() -> None:
    for bad in ({"batch": 0}, {"poll_s": 0}, {"poll_s": float("nan")}):
        with pytest.raises(ConfigError):
            RelayConfig(**bad)
    with pytest.raises(ValidationError, match="schema"):
        outbox.submit(None, "t", schema="Robert'); DROP TABLE students;--")


async def _async_refused() -> None:
    conn = await psycopg.AsyncConnection.connect(POSTGRES_DSN)
    try:
        with pytest.raises(ValidationError, match="asyncio connection"):
            outbox.submit(conn, "t")
    finally:
        await conn.close()


def test_an_asyncio_connection_is_refused_with_what_to_use() -> None:
    import asyncio

    asyncio.run(_async_refused())


def test_the_cli_makes_the_outbox_and_reports_it(capsys: pytest.CaptureFixture[str],
                                                 redis_url: str, ns: str) -> None:
    name = f"ob_{uuid.uuid4().hex[:12]}"
    try:
        code, out, _ = sched(capsys, redis_url, ns, "db", "upgrade", "--outbox",
                             "--outbox-schema", name, "--postgres-dsn", POSTGRES_DSN)
        assert code == 0 and out.strip() == f"outbox schema {name!r} at version 2"
        code, out, _ = sched(capsys, redis_url, ns, "outbox", "status", "--outbox-schema",
                             name, "--postgres-dsn", POSTGRES_DSN)
        assert code == 0 and "0 row(s) waiting" in out and "no relay has run yet" in out
        with Client(redis_url, ns) as client:
            first = OutboxRelay(client, POSTGRES_DSN, schema=name)
            try:
                first.lag_or_refuse()
            finally:
                first.close()
        code, out, _ = sched(capsys, redis_url, ns, "outbox", "status", "--outbox-schema",
                             name, "--postgres-dsn", POSTGRES_DSN)
        assert code == 0 and out.rstrip().endswith(f"serves namespace {ns!r}"), out
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.mark.parametrize("args, says", [
    (["db", "upgrade", "--outbox"], "give --postgres-dsn"),
    (["outbox", "relay"], "give --postgres-dsn"),
    (["db", "upgrade", "--outbox", "--postgres-dsn", "mysql://x"], "is not a Postgres DSN"),
    (["db", "upgrade", "--outbox", "--outbox-schema", "Bad-Name", "--postgres-dsn",
      POSTGRES_DSN], "must be a lowercase SQL name"),
    (["outbox", "status", "--outbox-schema", "ob_none_here", "--postgres-dsn", POSTGRES_DSN],
     "no outbox in schema 'ob_none_here'"),
    (["outbox", "relay", "--outbox-schema", "ob_none_here", "--postgres-dsn", POSTGRES_DSN],
     "no outbox in schema 'ob_none_here'"),
    (["scheduler", "--outbox-schema", "ob_none_here", "--outbox-dsn", POSTGRES_DSN],
     "no outbox in schema 'ob_none_here'"),
])
def test_bad_cli_input_is_one_line_and_changes_nothing(capsys: pytest.CaptureFixture[str],
                                                       redis_url: str, ns: str,
                                                       args: list[str], says: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, *args)
    assert code != 0 and len(err.strip().splitlines()) == 1 and says in err, err
    assert "Traceback" not in err + out


def test_a_running_relay_reports_the_outbox_to_sched_status(
        capsys: pytest.CaptureFixture[str], conn: psycopg.Connection[Any], schema: str,
        relay: OutboxRelay, client: Client, redis_url: str, ns: str) -> None:
    """`sched status` has no DSN: what it shows of the outbox is what the relays last wrote
    into the namespace (about once a second)."""
    import threading
    import time

    client.create_namespace()
    assert client.status().outbox is None
    job_id = outbox.submit(conn, "send", schema=schema)
    conn.commit()
    running = threading.Thread(target=relay.run)
    running.start()
    try:
        deadline = time.monotonic() + 10
        while client.status().outbox is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        relay.stop()
        running.join()
    assert client.get_job(job_id).task == "send"
    box = client.status().outbox
    assert box is not None and box.rows == 0 and 0 <= box.reported_age_s < 10
    _, out, _ = sched(capsys, redis_url, ns, "status")
    assert "outbox:       0 row(s) waiting (a relay said so" in out
    code, out, _ = sched(capsys, redis_url, ns, "outbox", "status")
    assert code == 0 and out.startswith("outbox: 0 row(s) waiting, oldest 0.000 s (a relay")


def test_a_relay_whose_postgres_connections_drop_logs_once_and_goes_on(
        conn: psycopg.Connection[Any], schema: str, client: Client,
        caplog: pytest.LogCaptureFixture) -> None:
    """Postgres ends the relay's sessions (as a restart or a failover does): the relay logs
    the failure once, connects again, and the rows committed meanwhile still go."""
    import threading
    import time

    from scheduler.outbox.relay import APPLICATION_NAME

    service = OutboxRelay(client, POSTGRES_DSN, schema=schema,
                          config=RelayConfig(poll_s=0.1, max_backoff_s=0.2))
    running = threading.Thread(target=service.run)
    running.start()
    try:
        first = outbox.submit(conn, "first", schema=schema)
        conn.commit()
        deadline = time.monotonic() + 10
        while rows(conn, schema) and time.monotonic() < deadline:
            time.sleep(0.02)
        with caplog.at_level("WARNING", logger="scheduler.outbox.relay"):
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                         "application_name = %s AND pid <> pg_backend_pid()",
                         (APPLICATION_NAME,))
            conn.commit()
            later = outbox.submit(conn, "later", schema=schema)
            conn.commit()
            deadline = time.monotonic() + 10
            while rows(conn, schema) and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        service.stop()
        running.join()
    assert rows(conn, schema) == 0
    assert [client.get_job(j).task for j in (first, later)] == ["first", "later"]
    said = [r.getMessage().split(",")[0] for r in caplog.records
            if "Postgres" in r.getMessage()]  # not the tasks no worker registered
    assert said == ["outbox: Postgres failing", "outbox: Postgres reachable again"], said


def test_a_commit_wakes_the_relay_long_before_its_poll(conn: psycopg.Connection[Any],
                                                       schema: str, client: Client) -> None:
    """The outbox's trigger NOTIFYs at commit: a relay polling every 30 s moves the row at
    once (a generous bound: far under the poll, far over the wake-up)."""
    import threading
    import time

    service = OutboxRelay(client, POSTGRES_DSN, schema=schema, config=RelayConfig(poll_s=30))
    running = threading.Thread(target=service.run)
    running.start()
    try:
        time.sleep(0.3)  # in its wait by now: its first pass found nothing
        job_id = outbox.submit(conn, "woken", schema=schema)
        conn.commit()
        committed = time.monotonic()
        while rows(conn, schema) and time.monotonic() - committed < 10:
            time.sleep(0.005)
        took = time.monotonic() - committed
    finally:
        service.stop()
        running.join()
    assert client.get_job(job_id).task == "woken"
    assert took < 3.0, took


def test_sched_status_warns_of_rows_that_wait(client: Client) -> None:
    import msgspec

    from scheduler.observe.records import OutboxStatus

    client.create_namespace()
    now = client.status()
    fine = msgspec.structs.replace(now, outbox=OutboxStatus(rows=3, oldest_age_s=0.2,
                                                           reported_age_s=1.0))
    waiting = msgspec.structs.replace(now, outbox=OutboxStatus(rows=3, oldest_age_s=5.0,
                                                              reported_age_s=40.0))
    empty = msgspec.structs.replace(now, outbox=OutboxStatus(rows=0, oldest_age_s=0.0,
                                                            reported_age_s=400.0))
    assert not [w for w in fine.warnings() + empty.warnings() if "outbox" in w]
    [warned] = [w for w in waiting.warnings() if "outbox" in w]
    assert warned.startswith("3 outbox row(s) waiting, the oldest committed 45s ago")


def test_outbox_submit_takes_client_submits_options() -> None:
    """The two signatures repeat each other on purpose (real, annotated parameters): this
    keeps them from drifting apart."""
    import inspect

    ours = inspect.signature(outbox.submit).parameters
    theirs = inspect.signature(Client.submit).parameters
    shared = [n for n in theirs if n not in ("self", "durability")]
    assert [n for n in ours if n not in ("conn", "schema", "max_payload_bytes", "shards",
                                         "namespace")
            ] == shared
    for name in shared:
        assert (ours[name].default, ours[name].annotation, ours[name].kind) == (
            theirs[name].default, theirs[name].annotation, theirs[name].kind), name


@pytest.mark.parametrize("window", [{"dedupe_ttl": 60}, {"debounce": 1}],
                         ids=["dedupe_ttl", "debounce"])
def test_the_outbox_refuses_a_dedupe_window_and_a_debounce_in_one_line(
        conn: psycopg.Connection[Any], schema: str, window: dict[str, float]) -> None:
    """A windowed job's id is decided in Redis (the first job's while the window is open),
    and the outbox names its jobs before they get there: it takes neither option."""
    for write in (lambda: outbox.submit(conn, "t", dedupe_key="k", schema=schema, **window),
                  lambda: outbox.submit_many(conn, [JobSpec(task="t"), JobSpec(
                      task="t", dedupe_key="k", **window)], schema=schema)):
        with pytest.raises(ValidationError, match="not taken by the outbox") as err:
            write()
        assert "\n" not in str(err.value)
    conn.commit()
    assert rows(conn, schema) == 0


# --- rows that are not jobs -----------------------------------------------------------------

def insert_rows(schema: str, rows: list[tuple[str, str]]) -> None:
    """Rows written as another service would write them, past outbox.submit's checks."""
    with psycopg.connect(POSTGRES_DSN) as other, other.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema}".outbox (job_id, spec) VALUES (%s, %s)', rows)


def rejected(schema: str) -> dict[str, str]:
    with psycopg.connect(POSTGRES_DSN) as other:
        return dict(other.execute(f'SELECT job_id, error FROM "{schema}".outbox_rejected')
                    .fetchall())


def test_a_row_that_is_not_a_job_is_kept_aside_whatever_fails_and_the_rest_go(
        schema: str, conn: psycopg.Connection[Any], relay: OutboxRelay, client: Client
) -> None:
    """Every kind of row a relay can be handed past outbox.submit's checks, one good row
    before and after each, in one batch: each bad row moves to outbox_rejected with its
    reason (one line), every good one becomes its job, and the pass commits."""
    from poison_rows import POISON

    from scheduler.core.jobspec import job_ids
    from scheduler.outbox.writer import rows_of

    good_ids, good_specs = rows_of([{"task": "good", "payload": i}
                                    for i in range(len(POISON) + 1)])
    bad_ids = [given or fresh for (_, given, _), fresh in zip(
        POISON, job_ids.take(len(POISON)), strict=True)]
    batch = [(good_ids[0], good_specs[0])]
    for (_, _, spec), bad_id, good_id, good_spec in zip(POISON, bad_ids, good_ids[1:],
                                                         good_specs[1:], strict=True):
        batch += [(bad_id, spec), (good_id, good_spec)]
    insert_rows(schema, batch)
    assert relay.run_once() == len(batch)
    assert relay.relayed == len(good_ids) and relay.rejected == len(POISON)
    assert [client.get_job(j).payload for j in good_ids] == list(range(len(good_ids)))
    refused = rejected(schema)
    assert sorted(refused) == sorted(bad_ids)
    for (kind, _, _), bad_id in zip(POISON, bad_ids, strict=True):
        error = refused[bad_id]
        assert error and "\n" not in error and "\x00" not in error, (kind, error)
        assert len(error) <= 1000, kind
    assert "RecursionError" in refused[bad_ids[0]] and "year 9999" in refused[bad_ids[2]]
    assert rows(conn, schema) == 0


def test_a_huge_value_is_refused_with_a_short_reason(schema: str, relay: OutboxRelay) -> None:
    from scheduler.core.jobspec import job_ids

    [job_id] = job_ids.take(1)
    insert_rows(schema, [(job_id, '{"task": "' + "x" * 1_000_000 + '\\u0000"}')])
    assert relay.run_once() == 1
    error = rejected(schema)[job_id]
    assert "task" in error and len(error) <= 1000


# --- one namespace per outbox ---------------------------------------------------------------

def test_an_outbox_serves_one_namespace_and_a_relay_of_another_refuses_to_start(
        capsys: pytest.CaptureFixture[str], schema: str, conn: psycopg.Connection[Any],
        relay: OutboxRelay, client: Client, redis_url: str, ns: str) -> None:
    """The first relay records its namespace in the outbox; a relay of another namespace
    refuses in one line naming both (and takes no row), whether started as a command, in a
    scheduler node, or in-process."""
    first = outbox.submit(conn, "t", schema=schema)
    conn.commit()
    assert relay.run_once() == 1 and client.get_job(first).task == "t"
    waiting = outbox.submit(conn, "t", schema=schema)
    conn.commit()
    other_ns = f"{ns}-other"
    with Client(redis_url, other_ns) as other:
        stranger = OutboxRelay(other, POSTGRES_DSN, schema=schema)
        try:
            for attempt in (stranger.lag_or_refuse, stranger.run_once):
                with pytest.raises(ConfigError) as err:
                    attempt()
                said = str(err.value)
                assert f"serves namespace {ns!r}, not {other_ns!r}" in said and "\n" not in said
                assert "--outbox-schema" in said
            assert_run_raises(stranger)
        finally:
            stranger.close()
    for args in (["outbox", "relay", "--outbox-schema", schema, "--postgres-dsn",
                  POSTGRES_DSN],
                 ["scheduler", "--outbox-schema", schema, "--outbox-dsn", POSTGRES_DSN]):
        code, out, err_text = sched(capsys, redis_url, other_ns, *args)
        assert code != 0 and len(err_text.strip().splitlines()) == 1, err_text
        assert f"serves namespace {ns!r}, not {other_ns!r}" in err_text
        assert "Traceback" not in out + err_text
    assert rows(conn, schema) == 1
    assert relay.run_once() == 1 and client.get_job(waiting).task == "t"


def assert_run_raises(service: OutboxRelay) -> None:
    """`run` ends with the ConfigError at once rather than waiting it out as an outage (a
    generous bound: a few passes of the relay's backoff)."""
    import threading

    raised: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # noqa: BLE001 - what the test asserts
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=5 * service.config.max_backoff_s)
    if thread.is_alive():
        service.stop()
        thread.join()
    assert raised and isinstance(raised[0], ConfigError), raised


def test_rows_are_written_for_a_namespace_and_a_relay_takes_only_its_own(
        schema: str, conn: psycopg.Connection[Any], relay: OutboxRelay, client: Client,
        ns: str) -> None:
    """`namespace=` binds a row to its namespace (else the outbox's, once a relay recorded
    it); a row of another namespace is moved to outbox_rejected, never submitted."""
    unbound = outbox.submit(conn, "t", schema=schema)  # no relay yet: no namespace known
    mine = outbox.submit(conn, "t", schema=schema, namespace=ns)
    theirs, = outbox.submit_many(conn, [{"task": "t"}], schema=schema, namespace="staging")
    conn.commit()
    assert relay.run_once() == 3
    assert [client.get_job(j).task for j in (unbound, mine)] == ["t", "t"]
    assert not client.redis.exists(client._core.job_key(theirs))
    error = rejected(schema)[theirs]
    assert "written for namespace 'staging'" in error and repr(ns) in error
    defaulted = outbox.submit(conn, "t", schema=schema)
    conn.commit()
    with psycopg.connect(POSTGRES_DSN) as other:
        found = other.execute(f'SELECT namespace FROM "{schema}".outbox WHERE job_id = %s',
                              (defaulted,)).fetchone()
    assert found == (ns,)
    with pytest.raises(ValidationError, match="namespace"):
        outbox.submit(conn, "t", schema=schema, namespace="no spaces")


def test_rows_from_before_namespaces_belong_to_the_namespace_the_outbox_serves(
        redis_url: str, ns: str, client: Client) -> None:
    """An outbox made before rows carried a namespace, with rows waiting: upgraded, its rows
    go to the first relay that records its namespace."""
    from scheduler.outbox.rows import migrations, queries
    from scheduler.outbox.writer import rows_of

    name = f"ob_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(queries(name)["create_versions"])
            admin.execute(migrations(name)[0][1])
            admin.execute(queries(name)["record"], {"version": migrations(name)[0][0]})
            ids, specs = rows_of([{"task": "old", "payload": i} for i in range(3)])
            with admin.cursor() as cur:
                cur.executemany(f'INSERT INTO "{name}".outbox (job_id, spec) VALUES (%s, %s)',
                                list(zip(ids, specs, strict=True)))
            assert upgrade(admin, name) == 2
        service = OutboxRelay(client, POSTGRES_DSN, schema=name)
        try:
            assert service.run_once() == 3
        finally:
            service.close()
        assert [client.get_job(j).payload for j in ids] == [0, 1, 2]
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_a_running_relay_says_when_it_starts_and_stops(
        schema: str, conn: psycopg.Connection[Any], client: Client, ns: str,
        caplog: pytest.LogCaptureFixture) -> None:
    import threading

    service = OutboxRelay(client, POSTGRES_DSN, schema=schema, config=RelayConfig(poll_s=0.1))
    job_id = outbox.submit(conn, "t", schema=schema)
    conn.commit()
    with caplog.at_level("INFO", logger="scheduler.outbox.relay"):
        running = threading.Thread(target=service.run)
        running.start()
        try:
            for _ in iter(lambda: service.relayed, 1):
                running.join(timeout=0.02)
        finally:
            service.stop()
            running.join()
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == f"outbox relay started: namespace {ns!r}, schema {schema!r}", said
    assert said[-1] == "outbox relay stopped: 1 row(s) relayed, 0 rejected", said
    assert client.get_job(job_id).task == "t"


def test_relays_of_two_namespaces_starting_at_once_leave_one_namespace(
        schema: str, redis_url: str, ns: str) -> None:
    """Relays of two namespaces start together on an outbox no relay has used: one
    namespace is recorded, and every relay of the other refuses."""
    import threading

    names = [ns, f"{ns}-b"] * 4
    outcomes: dict[int, str] = {}
    ready = threading.Barrier(len(names))

    def start(i: int, name: str) -> None:
        with Client(redis_url, name) as c:
            service = OutboxRelay(c, POSTGRES_DSN, schema=schema)
            try:
                ready.wait()
                service.lag_or_refuse()
                outcomes[i] = name
            except ConfigError:
                outcomes[i] = "refused"
            finally:
                service.close()

    threads = [threading.Thread(target=start, args=(i, n)) for i, n in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    started = {outcomes[i] for i in range(len(names))} - {"refused"}
    assert len(started) == 1, outcomes
    [winner] = started
    assert sorted(outcomes.values()) == sorted([winner] * 4 + ["refused"] * 4)


def test_a_row_naming_an_unknown_task_goes_on_and_the_relay_logs_it_once(
        conn: psycopg.Connection[Any], schema: str, relay: OutboxRelay, client: Client,
        caplog: pytest.LogCaptureFixture) -> None:
    """A relay's warnings reach no one (it runs as a service): the sentence a client would
    warn with is a log line of the relay instead, once per name, and the job is submitted."""
    for n in range(3):
        outbox.submit(conn, "emails.sned", {"n": n}, schema=schema)
        conn.commit()
        with warnings.catch_warnings(record=True) as warned, \
                caplog.at_level("WARNING", logger="scheduler.outbox.relay"):
            warnings.simplefilter("always")
            assert relay.run_once() == 1
        assert not [w for w in warned if issubclass(w.category, UnknownTaskWarning)]
    said = [r.getMessage() for r in caplog.records if "emails.sned" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("outbox: 'emails.sned' is not a task"), said
    assert rows(conn, schema) == 0
