"""One conformance suite for both history stores (SQLite, Postgres): migrations, versioned
upserts, replay, reading history, what recovery reads, and retention."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from scheduler.core.namespace import Meta
from scheduler.core.states import SlotStatus
from scheduler.history import sqlfiles
from scheduler.history.store import (
    DAY_MS,
    SCHEMA_VERSION,
    Batch,
    event_slot_row,
    job_row,
    slot_rows,
)

NS = "ns1"
DAY0 = 1_700_006_400_000  # 2023-11-15T00:00Z, a day boundary


def _raw(d: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in d.items()}


def job(job_id: str, fire_ms: int, kind: str = "immediate") -> Any:
    return job_row(NS, job_id, _raw({"task": "t", "queue": "q", "fire_ms": fire_ms,
                                     "created_ms": fire_ms - 5, "kind": kind,
                                     "payload": '{"n": 1}'}))


def slot(job_id: str, fire_ms: int, status: str, version: int, attempt: int = 0,
         **extra: Any) -> tuple[Any, list[Any]]:
    fields = {"job_id": job_id, "fire_ms": fire_ms, "status": status, "queue": "q", "task": "t",
              "attempt": attempt, **extra}
    if attempt:
        fields.setdefault("worker", "w1")
        fields.setdefault("claimed_ms", fire_ms + 1)
    return slot_rows(NS, f"{job_id}:{fire_ms}", _raw(fields), version)


def write(store: Any, jobs: list[Any] = (), slots: list[tuple[Any, list[Any]]] = ()) -> None:  # type: ignore[assignment]
    store.write(Batch(jobs=list(jobs), slots=[s for s, _ in slots],
                      attempts=[a for _, atts in slots for a in atts]))


def test_the_sql_status_check_names_the_same_states_as_the_enum() -> None:
    for dialect in ("postgres", "sqlite"):
        text = dict(sqlfiles.migrations(dialect))[1]
        listed = re.search(r"status\s+\w+ NOT NULL CHECK \(status IN\s*\(([^)]*)\)", text)
        assert listed, dialect
        assert set(re.findall(r"'(\w+)'", listed.group(1))) == {s.value for s in SlotStatus}


def test_a_keyed_slot_s_copy_of_its_grant_is_not_kept() -> None:
    """The job row holds those fields; a slot restored from its row must not carry a copy
    (take.lua would grant it) that may be older than its job."""
    row, _ = slot("j1", DAY0, "queued", 1, concurrency_key="k", grant="::1")
    state = json.loads(row.state)
    assert "grant" not in state and state["concurrency_key"] == "k"


def test_upgrade_is_idempotent_and_records_its_version(store: Any) -> None:
    assert store.schema_version() == SCHEMA_VERSION
    assert store.upgrade() == SCHEMA_VERSION
    store.check()


def test_a_newer_reading_wins_and_an_older_one_never_replaces_it(store: Any) -> None:
    write(store, [job("j1", DAY0)], [slot("j1", DAY0, "queued", 10)])
    done = slot("j1", DAY0, "succeeded", 30, attempt=1, outcome="succeeded",
                started_ms=DAY0 + 2, finished_ms=DAY0 + 9)
    write(store, [], [done])
    write(store, [], [slot("j1", DAY0, "running", 20, attempt=1)])  # a late, older reading
    gone = event_slot_row(NS, f"j1:{DAY0}", "dead", {"slot": f"j1:{DAY0}"})
    store.write(Batch(jobs=[], slots=[gone], attempts=[]))  # version 0: never replaces a row
    [s] = store.history(NS, job_id="j1", status=None, since_ms=0, until_ms=2**62, limit=10)
    assert s.status is SlotStatus.SUCCEEDED and s.attempt == 1
    assert [(a.number, a.outcome and a.outcome.value, a.finished_ms) for a in s.attempts] == [
        (1, "succeeded", DAY0 + 9)]


def test_replaying_a_batch_changes_nothing(store: Any) -> None:
    rows = [slot(f"j{i}", DAY0 + i, "dead", 5, attempt=3, finished_ms=DAY0 + 100,
                 **{f"a:{n}": json.dumps({"number": n, "outcome": "failed", "error": "boom"})
                    for n in (1, 2)}) for i in range(50)]
    for _ in range(2):
        write(store, [job(f"j{i}", DAY0 + i) for i in range(50)], rows)
    got = store.history(NS, job_id=None, status=None, since_ms=0, until_ms=2**62, limit=1000)
    assert len(got) == 50 and {s.status for s in got} == {SlotStatus.DEAD}
    assert all([a.number for a in s.attempts] == [1, 2, 3] for s in got)


def test_rows_marked_new_that_exist_after_all_are_upserted_under_the_version_guard(
        store: Any) -> None:
    """A writer believes rows are new when it has not written them itself (Postgres COPYs
    them straight in); after a crash, or with a second snapshotter, they may exist: then the
    batch is upserted and an older reading still loses."""
    def new(jobs: list[Any], slots: list[tuple[Any, list[Any]]]) -> Batch:
        return Batch(jobs=[], slots=[], attempts=[], new_jobs=jobs,
                     new_slots=[s for s, _ in slots],
                     new_attempts=[a for _, atts in slots for a in atts])

    done = [slot(f"j{i}", DAY0 + i, "succeeded", 30, attempt=1, outcome="succeeded",
                 finished_ms=DAY0 + 50) for i in range(20)]
    store.write(new([job(f"j{i}", DAY0 + i) for i in range(20)], done))
    older = [slot(f"j{i}", DAY0 + i, "running", 20, attempt=1) for i in range(20)]
    store.write(new([job(f"j{i}", DAY0 + i) for i in range(20)], older))  # all exist
    fresh = [slot(f"k{i}", DAY0 + i, "queued", 40) for i in range(5)]
    store.write(new([job(f"k{i}", DAY0 + i) for i in range(5)], fresh + done[:1]))  # one exists
    got = {s.job_id: s for s in store.history(NS, job_id=None, status=None, since_ms=0,
                                               until_ms=2**62, limit=1000)}
    assert len(got) == 25
    assert {got[f"j{i}"].status for i in range(20)} == {SlotStatus.SUCCEEDED}
    assert all(got[f"j{i}"].attempts[0].outcome == "succeeded" for i in range(20))
    assert {got[f"k{i}"].status for i in range(5)} == {SlotStatus.QUEUED}
    if store.dialect == "postgres":  # the first conflict; the next batches upsert everything
        assert store.conflicts == 1 and store._upsert_only > 0


def test_history_filters_by_job_status_time_and_limit(store: Any) -> None:
    write(store, [job("a", DAY0), job("b", DAY0 + DAY_MS)],
          [slot("a", DAY0, "succeeded", 1, attempt=1, finished_ms=DAY0 + 5),
           slot("b", DAY0 + DAY_MS, "dead", 1, attempt=1, finished_ms=DAY0 + DAY_MS + 5),
           slot("b", DAY0 + 2 * DAY_MS, "queued", 1)])

    def ids(**kw: Any) -> list[str]:
        args = {"job_id": None, "status": None, "since_ms": 0, "until_ms": 2**62, "limit": 10}
        return [s.slot_id for s in store.history(NS, **{**args, **kw})]

    assert ids() == [f"b:{DAY0 + 2 * DAY_MS}", f"b:{DAY0 + DAY_MS}", f"a:{DAY0}"]
    assert ids(job_id="a") == [f"a:{DAY0}"]
    assert ids(status="dead") == [f"b:{DAY0 + DAY_MS}"]
    assert ids(since_ms=DAY0 + 1, until_ms=DAY0 + 2 * DAY_MS) == [f"b:{DAY0 + DAY_MS}"]
    assert ids(limit=1) == [f"b:{DAY0 + 2 * DAY_MS}"]
    assert store.history("other-ns", job_id=None, status=None, since_ms=0, until_ms=2**62,
                         limit=10) == []


def test_recovery_reads_recurring_jobs_and_unfinished_slots(store: Any) -> None:
    write(store, [job("done", DAY0), job("live", DAY0), job("c", DAY0, kind="cron"),
                  job("c2", DAY0, kind="cron")],
          [slot("done", DAY0, "succeeded", 1, attempt=1, finished_ms=DAY0 + 3),
           slot("live", DAY0, "running", 1, attempt=2),
           slot("c", DAY0, "succeeded", 1, attempt=1, finished_ms=DAY0 + 3),
           slot("c", DAY0 + 60_000, "scheduled", 1)])
    jobs = {j.job_id: j for j in store.recovery_jobs(NS)}
    assert set(jobs) == {"live", "c", "c2"}
    assert jobs["c"].last_fire_ms == DAY0 + 60_000 and jobs["c2"].last_fire_ms is None
    assert jobs["c"].kind == "cron" and jobs["live"].definition["payload"] == '{"n": 1}'
    slots = dict(store.recovery_slots(NS))
    assert set(slots) == {f"live:{DAY0}", f"c:{DAY0 + 60_000}"}
    assert slots[f"live:{DAY0}"]["status"] == "running"
    assert slots[f"live:{DAY0}"]["attempt"] == "2"


def test_every_slot_state_and_job_definition_reads_back_as_written(store: Any) -> None:
    """What the fault suite's history rule compares with Redis: every slot and job of a
    namespace, whatever its status, each hash whole."""
    write(store, [job("done", DAY0), job("c", DAY0, kind="cron")],
          [slot("done", DAY0, "dead", 1, attempt=1, finished_ms=DAY0 + 3, cancel="why",
                result='{"a": [1, "x"]}'),
           slot("c", DAY0 + DAY_MS, "scheduled", 1)])
    write(store, [job("other", DAY0)], [slot("other", DAY0, "queued", 1)])
    states = dict(store.slot_states(NS))
    assert set(states) == {f"done:{DAY0}", f"c:{DAY0 + DAY_MS}", f"other:{DAY0}"}
    assert states[f"done:{DAY0}"] == _raw({
        "job_id": "done", "fire_ms": DAY0, "status": "dead", "queue": "q", "task": "t",
        "attempt": 1, "worker": "w1", "claimed_ms": DAY0 + 1, "finished_ms": DAY0 + 3,
        "cancel": "why", "result": '{"a": [1, "x"]}'})
    jobs = dict(store.job_definitions(NS))
    assert set(jobs) == {"done", "c", "other"}
    assert jobs["c"] == _raw({"task": "t", "queue": "q", "fire_ms": DAY0,
                              "created_ms": DAY0 - 5, "kind": "cron", "payload": '{"n": 1}'})
    assert store.slot_states("other-ns") == [] and store.job_definitions("other-ns") == []


def test_slot_states_and_job_definitions_of_given_jobs_alone(store: Any) -> None:
    """What `sched verify` reads of its canaries, whatever else the store holds: those jobs'
    rows alone, as the whole read has them (a name with quotes or commas is one name)."""
    odd = 'it\'s, "odd"'
    write(store, [job("a", DAY0), job("b", DAY0), job(odd, DAY0)],
          [slot("a", DAY0, "succeeded", 1, attempt=1, finished_ms=DAY0 + 3),
           slot("a", DAY0 + DAY_MS, "queued", 1), slot("b", DAY0, "queued", 1),
           slot(odd, DAY0, "dead", 1, attempt=1, finished_ms=DAY0 + 3)])
    whole_states, whole_jobs = dict(store.slot_states(NS)), dict(store.job_definitions(NS))
    for jobs in ({"a"}, {"a", odd, "missing"}, set()):
        states = dict(store.slot_states(NS, jobs))
        assert states == {s: h for s, h in whole_states.items()
                          if s.rpartition(":")[0] in jobs}, jobs
        assert dict(store.job_definitions(NS, jobs)) == {
            j: h for j, h in whole_jobs.items() if j in jobs}, jobs
    assert len(store.slot_states(NS, {"a"})) == 2
    assert store.slot_states("other-ns", {"a"}) == []


def test_namespaces_keep_their_shard_count_and_payload_limit(store: Any) -> None:
    assert store.get_namespace(NS) is None
    store.put_namespace(NS, 8, DAY0)
    store.put_namespace(NS, 8, DAY0 + 1)
    assert store.get_namespace(NS) == Meta(8, None)
    store.put_namespace(NS, 8, DAY0 + 2, 5000)
    store.put_namespace(NS, 8, DAY0 + 3)  # a writer that knows no limit keeps the one stored
    assert store.get_namespace(NS) == Meta(8, 5000)


def test_retention_forgets_whole_days_before_the_cutoff(store: Any) -> None:
    write(store, [job("old", DAY0), job("new", DAY0 + 3 * DAY_MS)],
          [slot("old", DAY0 + 10, "succeeded", 1, attempt=1, finished_ms=DAY0 + 20),
           slot("new", DAY0 + 3 * DAY_MS, "succeeded", 1, attempt=1,
                finished_ms=DAY0 + 3 * DAY_MS + 5)])
    store.drop_before(DAY0 + 2 * DAY_MS)
    left = store.history(NS, job_id=None, status=None, since_ms=0, until_ms=2**62, limit=10)
    assert [s.job_id for s in left] == ["new"]
    write(store, [], [slot("old2", DAY0 + 5, "queued", 1)])  # a dropped day can be written again
    assert len(store.history(NS, job_id="old2", status=None, since_ms=0, until_ms=2**62,
                             limit=10)) == 1


def test_fire_ledger_entries_are_upserted_read_by_range_and_kept_history_days(
        store: Any) -> None:
    """A `not_run` event's entries: written twice (a replayed batch) they are one row each;
    a job's range reads back in fire-time order with its slots; retention forgets those
    before the cutoff."""
    from scheduler.history.store import FireRow

    entries = [FireRow(NS, "cron1", DAY0 + i * 1000, "catchup") for i in range(3)]
    late = FireRow(NS, "cron1", DAY0 + 3 * DAY_MS, "redefined")
    store.write(Batch(fires=[*entries, late]))
    store.write(Batch(fires=entries))  # replayed
    write(store, [], [slot("cron1", DAY0 + 5000, "succeeded", 1, attempt=1,
                           finished_ms=DAY0 + 5010)])
    got = store.ledger(NS, "cron1", DAY0, DAY0 + 10_000, 100)
    assert got.entries == [(DAY0 + i * 1000, "catchup") for i in range(3)]
    assert [(f, s["status"]) for f, s in got.slots] == [(DAY0 + 5000, "succeeded")]
    assert store.ledger(NS, "cron1", DAY0, DAY0 + 10_000, 2).entries == [
        (DAY0, "catchup"), (DAY0 + 1000, "catchup")]
    assert store.ledger(NS, "other", 0, 2**62, 100) == ([], [])
    store.drop_before(DAY0 + 2 * DAY_MS)
    assert store.ledger(NS, "cron1", 0, 2**62, 100).entries == [(late.fire_ms, "redefined")]


def test_postgres_unreachable_is_one_clear_error() -> None:
    from scheduler.core.errors import StoreUnavailable
    from scheduler.history.store import open_store

    with pytest.raises(StoreUnavailable, match="cannot reach Postgres.*SCHED_POSTGRES_DSN"):
        open_store("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")


def _attempts(store: Any) -> list[tuple[Any, ...]]:
    """The `attempts` view, as SQL users read it."""
    cur = store.conn.execute(
        "SELECT job_id, number, worker, outcome, finished_ms FROM attempts "
        "WHERE namespace = 'ns1' ORDER BY job_id, number")
    return [tuple(r) for r in cur.fetchall()]


def test_the_attempts_view_has_a_row_per_attempt_however_it_is_stored(store: Any) -> None:
    from scheduler.history.store import AttemptRow

    one = slot("one", DAY0, "succeeded", 5, attempt=1, outcome="succeeded",
               finished_ms=DAY0 + 9)
    many = slot("many", DAY0, "dead", 5, attempt=3, finished_ms=DAY0 + 100, worker="w3",
                **{f"a:{n}": json.dumps({"number": n, "worker": f"w{n}", "outcome": "failed"})
                   for n in (1, 2)})
    never = slot("never", DAY0, "queued", 5)
    assert one[1] == [] and never[1] == [] and len(many[1]) == 3  # one attempt: no row
    write(store, [], [one, many, never])
    # A row an older version wrote for a single attempt (before migration 0002), behind
    # the state that finished it: the state wins.
    stale = AttemptRow(NS, "late", DAY0, 1, "w1", DAY0 + 1, None, None, None, None, None, 4)
    late = slot("late", DAY0, "succeeded", 5, attempt=1, outcome="succeeded",
                finished_ms=DAY0 + 7)
    store.write(Batch(jobs=[], slots=[late[0]], attempts=[stale]))
    assert _attempts(store) == [
        ("late", 1, "w1", "succeeded", DAY0 + 7),
        ("many", 1, "w1", "failed", None), ("many", 2, "w2", "failed", None),
        ("many", 3, "w3", None, DAY0 + 100),
        ("one", 1, "w1", "succeeded", DAY0 + 9)]


def test_upgrading_a_version_1_store_keeps_its_attempt_rows(store_dsn: str) -> None:
    """A store written by version 1 (an attempt row per attempt, in table `attempts`) reads
    the same through the view once upgraded, and takes new writes."""
    import sqlite3

    from scheduler.history.store import open_store

    dialect = "sqlite" if store_dsn.startswith("sqlite://") else "postgres"
    v1 = dict(sqlfiles.migrations(dialect))[1]
    state = ('{"status": "succeeded", "attempt": "1", "worker": "w0", "outcome": "succeeded", '
             f'"finished_ms": "{DAY0 + 3}"}}')
    rows = (f"INSERT INTO slots VALUES ('ns1', 'old', {DAY0}, 'succeeded', 't', 'q', 1, 0, NULL, "
            f"{DAY0 + 3}, 5, '{state}');"
            f"INSERT INTO attempts VALUES ('ns1', 'old', {DAY0}, 1, 'w0', NULL, NULL, NULL, "
            f"{DAY0 + 3}, 'succeeded', NULL, 5);")
    versions = "CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at text);" \
               "INSERT INTO schema_migrations VALUES (1, '');"
    if dialect == "sqlite":  # opening migrates: the version-1 file is made first
        path = store_dsn.removeprefix("sqlite://")
        with sqlite3.connect(path) as c:
            c.executescript(v1 + rows + versions)
        c.close()
    else:
        import psycopg

        from scheduler.history.store.postgres import _day_name

        day = DAY0 // DAY_MS
        with psycopg.connect(store_dsn, autocommit=True) as c:  # the fixture migrated it
            c.execute("DROP TABLE jobs, slots, attempt_log, namespaces, schema_migrations, "
                      "fire_entries CASCADE")
            c.execute(v1.encode())
            parts = (f"CREATE TABLE {_day_name('slots', day)} PARTITION OF slots FOR VALUES "
                     f"FROM ({DAY0}) TO ({DAY0 + DAY_MS});"
                     f"CREATE TABLE {_day_name('attempts', day)} PARTITION OF attempts FOR "
                     f"VALUES FROM ({DAY0}) TO ({DAY0 + DAY_MS});")
            c.execute((parts + rows + versions).encode())
    s = open_store(store_dsn)
    try:
        assert s.upgrade() == SCHEMA_VERSION
        assert _attempts(s) == [("old", 1, "w0", "succeeded", DAY0 + 3)]
        write(s, [], [slot("new", DAY0, "succeeded", 6, attempt=1, outcome="succeeded",
                           finished_ms=DAY0 + 4)])
        assert [r[0] for r in _attempts(s)] == ["new", "old"]
    finally:
        s.close()
