"""Dedupe windows (`dedupe_ttl`) and debounce, through the SDK on a real Redis (and, slow, on
the session's Cluster: conftest.ON_CLUSTER_TOO); the debounce's one run and a window that
outlives retention with real `sched` processes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import LEASE, W, run_until, running, sched, sched_process
from scheduler import Client, Context, Registry, RetryPolicy
from scheduler.core.errors import ValidationError
from scheduler.core.jobspec import dedupe_job_id, window_job_id
from scheduler.core.keys import DISPATCH_GROUP, shard_of
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts


def state(r: Any, ns: str) -> dict[bytes, bytes]:
    """Every key of the namespace with its DUMP: equal before and after means nothing was
    written."""
    return {k: r.dump(k) for k in r.scan_iter(match=f"{ns}:*", count=10_000)}


def record_key(client: Client, key: str) -> str:
    base = dedupe_job_id(key)
    return client.keys.dedupe(shard_of(base, client.shards), base)


def job_key(client: Client, job_id: str) -> str:
    return client.keys.job(shard_of(job_id, client.shards), job_id)


def wait_for(what: str, done: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_repeat_within_the_window_returns_the_first_id_and_writes_nothing(
        r: redis.Redis, client: Client, ns: str) -> None:
    first = client.submit("t", {"v": 1}, dedupe_key="order-7", dedupe_ttl=60)
    before = state(r, ns)
    assert client.submit("t", {"v": 2}, dedupe_key="order-7", dedupe_ttl=60) == first
    assert client.submit_many([{"task": "t", "payload": {"v": i}, "dedupe_key": "order-7",
                                "dedupe_ttl": 60} for i in range(3)]) == [first] * 3
    assert state(r, ns) == before
    job = client.get_job(first)
    assert (job.payload, job.dedupe_key, job.dedupe_ttl_s) == ({"v": 1}, "order-7", 60)
    assert job.dedupe_until_ms == job.created_ms + 60_000
    # the record and the job it names share a shard (one slot on a Cluster)
    assert shard_of(first, client.shards) == shard_of(dedupe_job_id("order-7"), client.shards)
    # a batch's repeats of a new key: one job, its id for each
    ids = client.submit_many([{"task": "t", "dedupe_key": "batch", "dedupe_ttl": 60}] * 4)
    assert len(set(ids)) == 1 and ids[0] != first


def test_whatever_became_of_the_job_the_window_holds_then_a_new_job_gets_through(
        r: redis.Redis, client: Client, ns: str) -> None:
    first = client.submit("t", {"v": 1}, dedupe_key="k", dedupe_ttl=0.5)
    [slot] = client.slots(first)
    assert client.cancel([slot.slot_id]) == {slot.slot_id: "cancelled"}
    # the job's hashes gone, as retention removes them: the record still holds
    shard = shard_of(first, client.shards)
    r.delete(job_key(client, first), client.keys.slot(shard, slot.slot_id))
    assert client.submit("t", {"v": 2}, dedupe_key="k", dedupe_ttl=0.5) == first
    assert not r.exists(job_key(client, first))  # and nothing was written
    wait_for("the window to end", lambda: not r.exists(record_key(client, "k")), 5)
    second = client.submit("t", {"v": 3}, dedupe_key="k", dedupe_ttl=0.5)
    assert second != first
    assert client.get_job(second).payload == {"v": 3}
    assert client.submit("t", {"v": 4}, dedupe_key="k", dedupe_ttl=0.5) == second


@pytest.mark.parametrize("window", [{"dedupe_ttl": 60}, {"dedupe_ttl": 60, "debounce": 1}],
                         ids=["window", "window-and-debounce"])
def test_a_repeat_never_extends_a_window(r: redis.Redis, client: Client,
                                         window: dict[str, float]) -> None:
    """A window counts from the first submit: a repeat leaves its record's expiry as it was
    (a debounce stretches it only to a moved run's fire time, here well within it)."""
    first = client.submit("t", dedupe_key="x", **window)
    record = record_key(client, "x")
    # Down by more than a repeat and a read take, so a repeat that set the expiry again
    # (back to the whole window) reads above what was left.
    wait_for("the window to run down", lambda: 0 < r.pttl(record) < 59_800, 5)
    left = r.pttl(record)
    assert client.submit("t", dedupe_key="x", **window) == first
    assert 0 < r.pttl(record) <= left


@pytest.mark.parametrize("window", [{"dedupe_ttl": 60}, {"debounce": 30}],
                         ids=["window", "debounce"])
def test_concurrent_submits_of_one_key_make_one_job(
        r: redis.Redis, redis_url: str, ns: str, window: dict[str, float]) -> None:
    """Eight clients submit one key at once, each drawing its own window id: submit.lua
    reads and writes the record with the job in one call, so one job is made and every
    submit returns its id."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    start = Barrier(8)

    def submit(n: int) -> str:
        with Client(redis_url, ns, shards=4) as c:
            start.wait(timeout=30)
            return c.submit("t", {"n": n}, dedupe_key="race", **window)

    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(submit, range(8)))
    assert len(ids) == 1
    with Client(redis_url, ns, shards=4) as c:
        assert list(r.scan_iter(match=f"{ns}:*:job:*", count=10_000)) == [
            job_key(c, ids.pop()).encode()]


def test_a_dedupe_key_without_a_window_keeps_its_old_behaviour(client: Client) -> None:
    first = client.submit("t", dedupe_key="plain")
    assert first == dedupe_job_id("plain")
    assert client.submit("t", dedupe_key="plain") == first
    assert client.get_job(first).dedupe_ttl_s is None
    windowed = client.submit("t", dedupe_key="plain", dedupe_ttl=60)
    assert windowed != first  # a window is a key of its own


def test_a_debounce_moves_the_pending_run_and_takes_the_latest_payload(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    job_id = client.submit("t", {"v": 1}, dedupe_key="d", debounce=1)
    for v in (2, 3):
        clock.advance(0.4)
        assert client.submit("t", {"v": v}, dedupe_key="d", debounce=1) == job_id
    job = client.get_job(job_id)
    [slot] = client.slots(job_id)
    shard = shard_of(job_id, client.shards)
    assert job.payload == {"v": 3}
    assert slot.fire_ms == clock.now_ms() + 1000
    assert r.zscore(client.keys.due(shard), slot.slot_id) == clock.now_ms() + 1000
    assert client.submit("t", None, dedupe_key="d", debounce=1) == job_id
    assert client.get_job(job_id).payload is None  # a null payload replaces it too
    # dispatched: a repeat is a no-op that returns the id
    clock.advance(1.5)
    scripts.run_sync(r, [scripts.promote(client.keys.prefix(shard), clock.now_ms(), 10, 10)])
    assert client.slots(job_id)[0].status.value == "queued"
    assert client.submit("t", {"v": 9}, dedupe_key="d", debounce=1) == job_id
    assert client.get_job(job_id).payload is None


def test_bad_window_options_are_refused_with_one_line(client: Client) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"debounce": 1}, "need a dedupe_key"),
        ({"dedupe_ttl": 5}, "need a dedupe_key"),
        ({"dedupe_key": "x", "debounce": 1, "delay": 5}, "drop delay, at and cron"),
        ({"dedupe_key": "x", "debounce": 1, "cron": "* * * * *"}, "drop delay, at and cron"),
        ({"dedupe_key": "x", "dedupe_ttl": -1}, "dedupe_ttl: -1 is not allowed"),
        ({"dedupe_key": "x", "debounce": float("nan")}, "debounce: nan is not allowed"),
        ({"dedupe_key": "x", "dedupe_ttl": "5"}, "dedupe_ttl: '5' is not allowed"),
        ({"dedupe_key": "x", "dedupe_ttl": 0.0009}, "from 0.001 to 31,536,000"),
        ({"dedupe_key": "x", "debounce": 365 * 86400 + 1}, "from 0.001 to 31,536,000"),
    ]
    for options, message in cases:
        with pytest.raises(ValidationError, match=message) as caught:
            client.submit("t", **options)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValidationError, match="decided in Redis"):
        client.submit_many([{"task": "t", "dedupe_key": "x", "dedupe_ttl": 5}], ids=["a1"])


def test_submit_lua_refuses_a_window_that_names_no_job(r: redis.Redis, client: Client) -> None:
    prefix = client.keys.prefix(0)
    row = ("a1", "t", "default", 1, [])
    for windows, problem in (([2, "k", 1000, 0], "names no job"),
                             ([1, "k:x", 1000, 0], "malformed window key id"),
                             ([1, "k", 0, 0], "not both 0"),
                             ([1, "k", 1.5, 0], "whole ms")):
        with pytest.raises(redis.exceptions.ResponseError, match=problem):
            scripts.run_sync(r, [scripts.submit(prefix, 1, 10, [row], windows=windows)])
    assert not r.exists(client.keys.job(0, "a1"))


def test_a_windowed_id_lands_in_its_keys_shard() -> None:
    for shards in (1, 4, 16, 64):
        for key in ("a", "b", "order-123"):
            base = dedupe_job_id(key)
            job_id = window_job_id(base, 1_800_000_000_000, shards)
            assert job_id.startswith(base + ".")
            assert shard_of(job_id, shards) == shard_of(base, shards)


def test_sched_submit_takes_the_window_and_jobs_show_shows_it(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str) -> None:
    code, out, _ = sched(capsys, redis_url, ns, "submit", "t", "--dedupe-key", "c",
                         "--dedupe-ttl", "5m", "--debounce", "2")
    assert code == 0
    job_id = out.strip()
    code, again, _ = sched(capsys, redis_url, ns, "submit", "t", "--dedupe-key", "c",
                           "--dedupe-ttl", "5m", "--debounce", "2")
    assert (code, again) == (0, out)
    code, shown, _ = sched(capsys, redis_url, ns, "jobs", "show", job_id)
    assert code == 0, shown
    assert "dedupe key: c" in shown.replace("  ", "")
    assert "300s, until" in shown and "debounce:" in shown and "2s (a repeat" in shown
    code, _, err = sched(capsys, redis_url, ns, "submit", "t", "--debounce", "2")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "dedupe_key" in err


def test_the_consoles_job_page_shows_the_key_its_window_and_the_debounce(
        redis_url: str, ns: str) -> None:
    from scheduler import AsyncClient
    from scheduler.web import pages

    async def page() -> dict[str, Any]:
        async with AsyncClient(redis_url, ns) as client:
            job_id = await client.submit("t", dedupe_key="page", dedupe_ttl=90, debounce=2)
            return (await pages.job(client, job_id))[1]

    fields = dict(asyncio.run(page())["fields"])
    assert fields["dedupe key"] == "page"
    assert fields["dedupe window"].startswith("90s, until 20")
    assert fields["debounce"].startswith("2s")


# --- real processes --------------------------------------------------------------------------


def runs_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_fifty_debounced_submits_run_once_with_the_last_payload_and_a_window_outlives_retention(
        r: redis.Redis, redis_url: str, ns: str, app_env: dict[str, str],
        tmp_path: Path) -> None:
    debounced, kept = tmp_path / "debounced.jsonl", tmp_path / "kept.jsonl"
    with Client(redis_url, ns) as client:
        client.create_namespace()
        worker = sched_process(redis_url, ns, app_env, "worker", "--app", "app_tasks:registry",
                               "--log-level", "warning")
        with running(worker, sched_process(redis_url, ns, app_env, "scheduler",
                                           "--log-level", "warning"),
                     sched_process(redis_url, ns, app_env, "snapshotter", "--history-file",
                                   str(tmp_path / "history.sqlite3"), "--retention", "0",
                                   "--log-level", "warning")):
            wait_for("the worker", lambda: len(client.workers()) == 1, 30)
            # a window longer than retention: the job runs and leaves Redis, the key holds
            first = client.submit("test.record_fire", {"file": str(kept), "v": 1},
                                  dedupe_key="kept", dedupe_ttl=8)
            window_ends = time.monotonic() + 8
            # 50 submits in 2 s with debounce=1
            ids = set()
            for v in range(50):
                ids.add(client.submit("test.record_fire", {"file": str(debounced), "v": v},
                                      dedupe_key="burst", debounce=1))
                last_ms = int(time.time() * 1000)
                time.sleep(2 / 50)
            assert len(ids) == 1
            wait_for("the debounced run", lambda: runs_of(debounced) != [], 15)
            wait_for("retention to remove the kept job",
                     lambda: not r.exists(job_key(client, first)), 20)
            assert time.monotonic() < window_ends, "retention took longer than the window"
            assert client.submit("test.record_fire", {"file": str(kept), "v": 2},
                                 dedupe_key="kept", dedupe_ttl=8) == first
            time.sleep(max(0.0, window_ends - time.monotonic()) + 0.3)
            second = client.submit("test.record_fire", {"file": str(kept), "v": 3},
                                   dedupe_key="kept", dedupe_ttl=8)
            assert second != first
            wait_for("the new job's run", lambda: len(runs_of(kept)) == 2, 15)
        [run] = runs_of(debounced)  # one run, and none after it
        assert run["v"] == 49
        assert 800 <= run["started_ms"] - last_ms <= 3000, run["started_ms"] - last_ms
        assert [x["v"] for x in runs_of(kept)] == [1, 3]


def test_named_schedules_keep_their_digest_and_refuse_the_window_options() -> None:
    """JobSpec's new fields must not change the digest of a schedule declared before them
    (a changed digest redefines every named schedule at the next deploy). The digests are
    those the code before these options computed; a task with no catalog entry keeps them
    (queue and delivery left at None digest as their built-in defaults)."""
    import inspect

    from scheduler.core.models import DEFAULT_MAX_PAYLOAD_BYTES
    from scheduler.core.namespace import EVENTS_MAXLEN
    from scheduler.sdk.batching import with_catalog
    from scheduler.sdk.schedules import _digest, _named_spec, schedule
    from scheduler.sdk.state import ClientState

    core = ClientState("t", None, None, DEFAULT_MAX_PAYLOAD_BYTES, EVENTS_MAXLEN)

    def digest(payload: Any, options: dict[str, Any]) -> str:
        return _digest(with_catalog(core, _named_spec("daily", "reports.build", payload,
                                                      options)))

    assert digest({"a": 1}, {"cron": "0 8 * * *", "queue": "q"}) == "db48115b3f8fa8566a4f50f7"
    assert digest(None, {"cron": "0 8 * * *", "priority": 2}) == "9b568cc403349f03fec59cc5"
    for option in ("dedupe_ttl", "debounce"):  # not options of a schedule
        assert option not in inspect.signature(schedule).parameters


def test_submit_luas_header_documents_the_windows_argument_its_wrapper_passes() -> None:
    from scheduler.scripts import source

    call = scripts.submit("ns:{s00}:", 1, 10, [("a1", "t", "q", 1, [])], windows=[1, "k", 5, 0])
    header = source.read_source("submit").split("]]", 1)[0]
    assert len(call.args) == 6 and call.args[4] == ""  # ARGV[5] empty: never `fresh`
    assert "ARGV[6]  windows" in header and "ARGV[7]" not in header
    assert len(scripts.submit("ns:{s00}:", 1, 10, [("a1", "t", "q", 1, [])]).args) == 4


def redis_ms(r: Any) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.mark.parametrize("window", [{"debounce": 0.3}, {"dedupe_ttl": 1, "debounce": 0.3}],
                         ids=["debounce", "dedupe_ttl-and-debounce"])
def test_a_window_a_debounce_moved_ends_and_then_a_new_job_gets_through_and_runs(
        r: redis.Redis, redis_url: str, ns: str, window: dict[str, float]) -> None:
    """A repeat that moves the run keeps the key only until the moved run's fire time (or the
    window's end, when later): after both, a submit makes a new job, which runs."""
    registry = Registry()
    ran: list[int] = []

    @registry.task("t")
    async def record(ctx: Context, payload: Any) -> None:
        ran.append(payload["v"])

    debounce_ms = int(window["debounce"] * 1000)
    with Client(redis_url, ns, shards=4) as client:
        first = client.submit("t", {"v": 1}, dedupe_key="k", **window)
        record = record_key(client, "k")
        # the key holds until the run's fire time, or the window's end when later
        ttl_ms = int(window.get("dedupe_ttl", 0) * 1000)
        assert 0 < r.pttl(record) <= max(ttl_ms, debounce_ms)
        # A repeat stretches the record only when it would end before the moved run.
        wait_for("the record to end sooner than a debounce",
                 lambda: r.pttl(record) < debounce_ms, window.get("dedupe_ttl", 0) + 10)
        assert client.submit("t", {"v": 2}, dedupe_key="k", **window) == first
        assert 0 < r.pttl(record) <= debounce_ms  # it ends with the moved run
        [slot] = client.slots(first)
        ends_ms = max(client.get_job(first).dedupe_until_ms or 0, slot.fire_ms)
        asyncio.run(run_until(redis_url, ns, registry, lambda: ran == [2], node=True))
        wait_for("the window's end", lambda: redis_ms(r) > ends_ms,
                 (ends_ms - redis_ms(r)) / 1000 + 10)
        second = client.submit("t", {"v": 3}, dedupe_key="k", **window)
        assert second != first
        asyncio.run(run_until(redis_url, ns, registry, lambda: ran == [2, 3], node=True))
        assert [s.status.value for s in client.slots(second)] == ["succeeded"]


def test_a_debounce_never_moves_a_retry_waiting_for_its_backoff(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The slot is `scheduled` again after a failed attempt, but it has started: a repeat
    within the window returns the id and writes nothing (its retry time and payload stay)."""
    window: dict[str, Any] = {"dedupe_key": "r", "dedupe_ttl": 600, "debounce": 1,
                              "retry": RetryPolicy(max_attempts=3)}
    job_id = client.submit("t", {"v": 1}, **window)
    [slot] = client.slots(job_id)
    shard = shard_of(job_id, client.shards)
    prefix = client.keys.prefix(shard)
    clock.advance(1)
    scripts.run_sync(r, [scripts.promote(prefix, clock.now_ms(), 10, 10)])
    stream = client.keys.queue(shard, "default")
    r.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
    entries = [("default", mid, f[b"s"].decode()) for _, msgs in
               r.xreadgroup(DISPATCH_GROUP, W, {stream: ">"}, count=10) for mid, f in msgs]
    assert [e[2] for e in entries] == [slot.slot_id]
    now = clock.now_ms()
    scripts.run_sync(r, [scripts.claim(prefix, now, W, LEASE, entries)])
    scripts.run_sync(r, [scripts.fail(prefix, now, 10, W, [scripts.Failed(slot.slot_id, 1, "failed", "boom",
                                                            5000, 0.5, now, now)])])
    retry = client.get_slot(slot.slot_id)
    assert (retry.status.value, retry.attempt) == ("scheduled", 1)
    retry_at = r.zscore(client.keys.due(shard), slot.slot_id)
    assert retry_at is not None and retry_at >= now + 1000
    before = state(r, client.namespace)
    assert client.submit("t", {"v": 2}, **window) == job_id
    assert state(r, client.namespace) == before
    assert client.get_job(job_id).payload == {"v": 1}
    assert r.zscore(client.keys.due(shard), slot.slot_id) == retry_at
