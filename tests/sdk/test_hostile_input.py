"""Input a caller should not send, through the SDK and straight to the scripts: refused with
one error naming the problem, before anything is written; and what got into Redis past the
SDK's checks fails no listing."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from scheduler import Client, RetryPolicy, SlotStatus
from scheduler.core.errors import ConfigError, Retry, ValidationError
from scheduler.core.keys import shard_of
from scheduler.core.models import MAX_DEPTH, MAX_REASON_CHARS, SUBMIT_FIELDS
from scheduler.history.intake import SnapshotterConfig
from scheduler.history.retention import RetentionConfig
from scheduler.node.node import NodeConfig
from scheduler.observe.capacity import ScalingTarget
from scheduler.scripts import calls as scripts
from scheduler.worker.autoscale import AutoscaleConfig
from scheduler.worker.config import WorkerConfig


def nested(depth: int, kind: str = "dict") -> Any:
    value: Any = 1
    for i in range(depth):
        value = {"a": value} if kind == "dict" or (kind == "mixed" and i % 2) else [value]
    return value


@pytest.mark.parametrize("kind", ["dict", "list", "mixed"])
def test_a_payload_nests_at_most_max_depth_levels(redis_url: str, ns: str, kind: str) -> None:
    """A 10,000-deep dict was a RecursionError from the SDK (lists were depth-checked,
    dicts were not)."""
    with Client(redis_url, ns) as client:
        for deep in (MAX_DEPTH + 1, 10_000):
            with pytest.raises(ValidationError, match=f"deeper than {MAX_DEPTH} levels"):
                client.submit("t", nested(deep, kind))
        job = client.submit("t", nested(MAX_DEPTH, kind))
        assert client.get_job(job).payload == nested(MAX_DEPTH, kind)


# --- straight to submit.lua ---------------------------------------------------------------


@pytest.fixture
def shard(r: redis.Redis, redis_url: str, ns: str) -> Iterator[tuple[Client, str]]:
    """A namespace with one job in it, and the prefix of the shard the jobs below go to."""
    with Client(redis_url, ns) as client:
        client.submit("warm", None)
        yield client, client.keys.prefix(shard_of("a1", client.shards))


def call(prefix: str, n: int, items: list[Any], fresh: bool = False) -> scripts.Call:
    """submit.lua's call with `items` laid out as given (scripts.submit would shape them)."""
    args = (int(time.time() * 1000), 1000, n, scripts.pack(items))
    return scripts.Call("submit", (prefix,), (*args, "1") if fresh else args)


def job(job_id: str, *fields: Any, task: Any = "t", fire: Any = "1", f: Any = None) -> list[Any]:
    return [job_id, task, "default", fire, len(fields) // 2 if f is None else f, *fields]


def same_shard(n: int, shards: int, first: str = "a1") -> list[str]:
    """n job ids on the shard of `first`."""
    ids = [first]
    k = 0
    while len(ids) < n:
        k += 1
        if shard_of(f"a{k + 1}x", shards) == shard_of(first, shards):
            ids.append(f"a{k + 1}x")
    return ids


BAD_JOBS: dict[str, tuple[dict[str, Any], str]] = {
    # name: (the second job's shape, the problem named)
    "payload a map": ({"fields": ["payload", {"a": 1}]}, "the payload is not a string"),
    "payload a number": ({"fields": ["payload", 5]}, "the payload is not a string"),
    "fire_ms 1e300": ({"fire": "1e300"}, "fire_ms must be"),
    "fire_ms nan": ({"fire": "nan"}, "fire_ms must be"),
    "fire_ms inf": ({"fire": "inf"}, "fire_ms must be"),
    "fire_ms negative": ({"fire": "-5"}, "fire_ms must be"),
    "fire_ms not numeric": ({"fire": "soon"}, "fire_ms must be"),
    "fire_ms hexadecimal": ({"fire": "0x10"}, "fire_ms must be"),
    "fire_ms a leading zero": ({"fire": "007"}, "fire_ms must be"),
    "fire_ms past the year 9999": ({"fire": "300000000000000"}, "fire_ms must be"),
    "fire_ms a Lua number": ({"fire": 5}, "fire_ms must be"),
    "a field not in the contract": ({"fields": ["status", "succeeded"]},
                                    "unknown job field status"),
    "a made-up field": ({"fields": ["evil", "1"]}, "unknown job field evil"),
    "a whole number field not whole": ({"fields": ["timeout_ms", "1.5"]},
                                       "timeout_ms must be a whole number"),
    "a whole number field negative": ({"fields": ["max_attempts", "-1"]},
                                      "max_attempts must be a whole number"),
    "a whole number field a word": ({"fields": ["delay_ms", "soon"]},
                                    "delay_ms must be a whole number"),
    "jitter nan": ({"fields": ["jitter", "nan"]}, "jitter must be a number from 0 to 1"),
    "jitter over 1": ({"fields": ["jitter", 2]}, "jitter must be a number from 0 to 1"),
    "a string field a map": ({"fields": ["cron", {"a": 1}]}, "cron must be a string"),
    "an enum field another value": ({"fields": ["delivery", "twice"]},
                                    "delivery twice is not one of its values"),
    "an enum field a number": ({"fields": ["kind", 3]}, "kind 3 is not one of its values"),
    "a field count past the items": ({"fields": ["payload", "1"], "f": 3},
                                     "unknown job field"),
    "a field count not whole": ({"f": 0.5}, "bad field count"),
    "a task with ESC": ({"task": "bad\x1b[31mtask"}, "task name holds a control character (byte 0x1b at 4)"),
    "a task with a newline": ({"task": "two\nlines"}, "task name holds a control character (byte 0x0a"),
    "a task with DEL": ({"task": "del\x7f"}, "task name holds a control character (byte 0x7f"),
    "a task with a C1 control": ({"task": "csi\u009b"}, "task name holds a control character (byte 0xc2"),
}


@pytest.mark.parametrize("fresh", [False, True], ids=["checked ids", "fresh ids"])
@pytest.mark.parametrize("case", list(BAD_JOBS))
def test_submit_lua_refuses_a_bad_job_anywhere_in_a_batch_and_writes_nothing(
        r: redis.Redis, ns: str, shard: tuple[Client, str], case: str, fresh: bool) -> None:
    """A batch whose second job is bad: the first was written before the script failed (the
    header's "nothing is written" did not hold), and 1e300 or any field name was taken."""
    client, prefix = shard
    shape, problem = BAD_JOBS[case]
    first, second = same_shard(2, client.shards)
    items = job(first, "payload", '{"ok": 1}') + job(
        second, *shape.get("fields", ["payload", "2"]), task=shape.get("task", "t"),
        fire=shape.get("fire", "1"), f=shape.get("f"))
    before = sorted(r.scan_iter(match=f"{ns}:*", count=10_000))
    with pytest.raises(redis.exceptions.ResponseError) as caught:
        scripts.run_sync(r, [call(prefix, 2, items, fresh)])
    assert f"INVALID job 2 ({second}): {problem}" in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert sorted(r.scan_iter(match=f"{ns}:*", count=10_000)) == before


def test_submit_lua_refuses_counts_that_do_not_match_the_items(
        r: redis.Redis, ns: str, shard: tuple[Client, str]) -> None:
    client, prefix = shard
    first, second = same_shard(2, client.shards)
    before = sorted(r.scan_iter(match=f"{ns}:*", count=10_000))
    for n, items, problem in (
            (1, job(first) + job(second), "holds more items than its 1 jobs"),
            (2, job(first), "malformed job id"),
            (-1, job(first), "bad job count"),
            (1, job(first, "payload", "1", f=0), "holds more items"),
            (1, [first, "t", "default"], "fire_ms must be")):
        with pytest.raises(redis.exceptions.ResponseError, match=problem):
            scripts.run_sync(r, [call(prefix, n, items)])
    assert sorted(r.scan_iter(match=f"{ns}:*", count=10_000)) == before


def test_submit_lua_takes_every_field_the_sdk_writes(shard: tuple[Client, str]) -> None:
    """Each field of the contract, with a value of its type, is accepted (the SDK's own
    submits, traced or named, write nothing else)."""
    client, prefix = shard
    values = {"jitter": "0.5", "priority": "1", "kind": "delayed", "delivery": "at_most_once",
              "catchup": "latest", "overlap": "skip"}
    fields = [x for name in SUBMIT_FIELDS for x in (name, values.get(name, "7"))]
    assert scripts.run_sync(client.redis, [call(prefix, 1, job("a1", *fields))]) == [[1]]
    assert client.get_job("a1").retry.jitter == 0.5


def test_the_tracing_field_is_in_the_contract() -> None:
    pytest.importorskip("opentelemetry")
    from scheduler.observe.tracing import FIELD

    assert FIELD in SUBMIT_FIELDS


def test_a_payload_written_past_the_sdk_fails_no_listing(
        r: redis.Redis, shard: tuple[Client, str]) -> None:
    """A 10,000-deep payload written through submit.lua made every job listing fail; so
    would one that is not JSON at all. Readers show each with a placeholder."""
    client, prefix = shard
    deep, garbled, fine = same_shard(3, client.shards)
    later = str(int(time.time() * 1000) + 3_600_000)
    delayed = ("kind", "delayed", "delay_ms", "3600000")
    rows = [job(deep, "payload", '{"a":' * 10_000 + "1" + "}" * 10_000, *delayed, fire=later),
            job(garbled, "payload", "{not json", *delayed, fire=later),
            job(fine, "payload", '{"n": 1}', *delayed, fire=later)]
    scripts.run_sync(r, [call(prefix, 3, [x for row in rows for x in row])])
    listed = {j.job_id: j.payload for j in client.list_jobs()}
    assert listed[fine] == {"n": 1}
    assert listed[deep].startswith("(not shown: ") and "deeper than 64 levels" in listed[deep]
    assert listed[garbled] == "(not shown: 9 bytes that do not decode as JSON)"
    assert client.get_job(deep).payload == listed[deep]


def test_a_payload_nested_past_the_bound_but_decodable_is_not_shown(
        r: redis.Redis, shard: tuple[Client, str]) -> None:
    """Deep enough to pass msgspec but not a page's or --json's encoder: shown as not shown."""
    client, prefix = shard
    text = "[" * 500 + "]" * 500
    scripts.run_sync(r, [call(prefix, 1, job("a1", "payload", text, "kind", "delayed",
                                             fire=str(int(time.time() * 1000) + 60_000)))])
    assert "deeper than 64 levels" in client.get_job("a1").payload


# --- task and queue names -----------------------------------------------------------------


@pytest.mark.parametrize("name, shown", [
    ("bad\x1b[2Jtask", "U+001B (ESC)"), ("two\nlines", "U+000A (newline)"),
    ("nul\x00", "U+0000 (NUL)"), ("del\x7f", "U+007F (DEL)"), ("c1\x9b", "U+009B"),
])
def test_task_and_queue_names_refuse_control_characters(
        redis_url: str, ns: str, name: str, shown: str) -> None:
    """Task names with ESC or a newline were accepted, and reached terminals and log lines;
    a queue name ending in a newline passed the SDK's check (`$` matches before it)."""
    with Client(redis_url, ns) as client:
        with pytest.raises(ValidationError, match="task: .* holds the control character "
                                                  + re.escape(shown)):
            client.submit(name, None)
        with pytest.raises(ValidationError, match="queue: .*control character"):
            client.submit("t", None, queue=name)
        with pytest.raises(ValidationError, match="queue: .*control character"):
            client.submit("t", None, queue="default\n")
        with pytest.raises(ValidationError, match="control character"):
            client.schedule("nightly", name, None, cron="0 3 * * *")
        with pytest.raises(ValidationError, match="queue"):
            client.set_queue_limit("default\n", concurrency=1)
        with pytest.raises(ValidationError, match="control character"):
            WorkerConfig(queues=("default\n",))
        assert client.list_jobs() == []


def test_redefine_lua_refuses_control_characters_in_a_task_name(
        r: redis.Redis, redis_url: str, ns: str) -> None:
    """A named schedule's new definition goes through redefine.lua, which takes the task and
    queue names from its caller too."""
    with Client(redis_url, ns) as client:
        client.schedule("nightly", "t", None, cron="0 3 * * *")
        prefix = client.keys.prefix(shard_of("nightly", client.shards))
        before = r.hgetall(f"{prefix}job:nightly")
        spec = before[b"spec"].decode()
        for fields, problem in ((["task", "evil\x1b]0;", "queue", "default"], "control character"),
                                (["task", "t", "queue", "a:b"], "malformed queue name")):
            bad = scripts.Call("redefine", (prefix,), (
                int(time.time() * 1000), 1000, "nightly", spec,
                int(time.time() * 1000) + 60_000, scripts.pack([*fields, "spec", "x"])))
            with pytest.raises(redis.exceptions.ResponseError, match=problem):
                scripts.run_sync(r, [bad])
        assert r.hgetall(f"{prefix}job:nightly") == before


# --- dedupe keys and reasons ----------------------------------------------------------------


@pytest.mark.parametrize("text, shown", [
    ("bad\x1b[2Jkey", "U+001B (ESC)"), ("two\nlines", "U+000A (newline)"),
    ("nul\x00", "U+0000 (NUL)"), ("c1\x9b", "U+009B"),
])
def test_dedupe_keys_and_reasons_refuse_control_characters(
        r: redis.Redis, redis_url: str, ns: str, text: str, shown: str) -> None:
    """A dedupe key or a cancel/delete reason holding a terminal escape was stored, and
    `sched jobs show` printed it to the operator's terminal as given."""
    with Client(redis_url, ns) as client:
        job = client.submit("t", None, delay=600)
        series = client.submit("t", None, cron="0 3 * * *")
        before = {k: r.dump(k) for k in r.scan_iter(match=f"{ns}:*")}
        problem = ".* holds the control character " + re.escape(shown)
        with pytest.raises(ValidationError, match="dedupe_key: " + problem):
            client.submit("t", None, dedupe_key=text)
        with pytest.raises(ValidationError, match="dedupe_key: " + problem):
            client.submit_many([{"task": "t", "dedupe_key": "fine"},
                                {"task": "t", "dedupe_key": text}])
        with pytest.raises(ValidationError, match="reason: " + problem):
            client.cancel(job, reason=f"stop {text}")
        with pytest.raises(ValidationError, match="reason: " + problem):
            client.delete_job(series, reason=f"gone {text}")
        assert {k: r.dump(k) for k in r.scan_iter(match=f"{ns}:*")} == before
        assert client.slots(job)[0].status is SlotStatus.SCHEDULED


def test_a_reason_is_bounded(r: redis.Redis, redis_url: str, ns: str) -> None:
    """A 5 MB cancel reason was stored on each slot it ended."""
    with Client(redis_url, ns) as client:
        job = client.submit("t", None, delay=600)
        series = client.submit("t", None, cron="0 3 * * *")
        for bad, problem in (("x" * 5_000_000, "is 5,000,000 characters long; give at most "
                                               f"{MAX_REASON_CHARS:,}"),
                             ("x" * (MAX_REASON_CHARS + 1), "give at most"),
                             ("", "is not a reason"), ("   ", "is not a reason"),
                             (None, "is not a reason"), ("\ud800", "not valid text")):
            with pytest.raises(ValidationError, match="reason: .*" + problem):
                client.cancel(job, reason=bad)  # type: ignore[arg-type]
            with pytest.raises(ValidationError, match="reason: .*" + problem):
                client.delete_job(series, reason=bad)  # type: ignore[arg-type]
        assert client.slots(job)[0].status is SlotStatus.SCHEDULED
        longest = "é" * MAX_REASON_CHARS  # characters, not bytes
        [slot] = client.slots(job)
        assert client.cancel(job, reason=longest) == {slot.slot_id: "cancelled"}
        assert r.hget(client.keys.slot(shard_of(job, client.shards), slot.slot_id),
                      "cancel") == longest.encode()
        assert client.delete_job(series, reason=longest).job_id == series
        assert client.get_job(series).deleted == longest


# --- numbers ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_sdk_refuses_nan_and_infinity_in_every_number_it_takes(
        redis_url: str, ns: str, bad: float) -> None:
    with Client(redis_url, ns) as client:
        for call_ in (lambda: client.submit("t", None, timeout=bad),
                      lambda: client.submit("t", None, delay=bad),
                      lambda: client.submit("t", None, retry=RetryPolicy(base_s=bad)),
                      lambda: client.submit("t", None, retry=RetryPolicy(max_s=bad)),
                      lambda: client.submit("t", None, retry=RetryPolicy(jitter=bad)),
                      lambda: client.set_queue_limit("q", rate=bad),
                      lambda: client.result("0" * 32, timeout=bad)):
            with pytest.raises(ValidationError):
                call_()
        assert client.list_jobs() == []
    for kw in ({"timeout_s": bad}, {"replica_timeout_s": bad}):
        with pytest.raises(ValidationError, match="finite"):
            Client(redis_url, ns, **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        Retry(after=bad)


@pytest.mark.parametrize("make", [
    lambda v: WorkerConfig(lease_s=v), lambda v: WorkerConfig(grace_s=v),
    lambda v: WorkerConfig(replica_timeout_s=v), lambda v: NodeConfig(lease_s=v),
    lambda v: NodeConfig(shard_lease_s=v), lambda v: NodeConfig(reclaim_interval_s=v),
    lambda v: NodeConfig(lookahead_s=v), lambda v: NodeConfig(misfire_grace_s=v),
    lambda v: NodeConfig(promote_ahead_s=v), lambda v: NodeConfig(sweep_interval_s=v),
    lambda v: SnapshotterConfig(retention_s=v), lambda v: SnapshotterConfig(settle_s=v),
    lambda v: SnapshotterConfig(claim_idle_s=v), lambda v: SnapshotterConfig(defer_s=v),
    lambda v: RetentionConfig(retention_s=v), lambda v: RetentionConfig(interval_s=v),
    lambda v: AutoscaleConfig(min_concurrency=1, max_concurrency=2, interval_s=v),
    lambda v: ScalingTarget(target_lag_s=v), lambda v: ScalingTarget(utilisation=v),
])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_every_config_refuses_nan_and_infinity(make: Any, bad: float) -> None:
    """`WorkerConfig(lease_s=nan)` passed every range check (a comparison with NaN is
    false) and failed as int(nan) once the worker started."""
    with pytest.raises(ConfigError, match="must be a finite number"):
        make(bad)


def msgpack_str(items: list[Any]) -> bytes:
    """A msgpack array as Redis's cmsgpack reads it, bytes items as raw strings (msgspec
    would pack them as `bin`, which cmsgpack does not know)."""
    out = bytearray(b"\xdc" + len(items).to_bytes(2, "big"))
    for item in items:
        if isinstance(item, int):
            out += scripts.pack([item])[1:]
            continue
        raw = item if isinstance(item, bytes) else item.encode()
        out += b"\xda" + len(raw).to_bytes(2, "big") + raw
    return bytes(out)


@pytest.mark.parametrize("task", [
    "é".encode(), "中文".encode(), "𝄞".encode(), b"\xc3", b"\x80", b"\xff", b"\xc0\x80",
    b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xe4\xb8",
    b"ok\xe4\xb8\xadok", b"\xf4\x8f\xbf\xbf", b"\xef\xbf\xbf", b"\xed\x9f\xbf",
], ids=repr)
def test_submit_lua_takes_a_task_name_only_as_utf8(
        r: redis.Redis, ns: str, shard: tuple[Client, str], task: bytes) -> None:
    """A worker decodes the task names it claims: one that is not UTF-8 would fail its
    claims. The script's rule is Python's."""
    _, prefix = shard
    try:
        task.decode()
        good = True
    except UnicodeDecodeError:
        good = False
    items = msgpack_str([b"a1", task, b"default", b"1", 0])
    run = scripts.Call("submit", (prefix,), (int(time.time() * 1000), 1000, 1, items))
    if good:
        assert scripts.run_sync(r, [run]) == [[1]]
        assert r.hget(f"{prefix}job:a1", "task") == task
    else:
        with pytest.raises(redis.exceptions.ResponseError, match="task name is not UTF-8"):
            scripts.run_sync(r, [run])
        assert not r.exists(f"{prefix}job:a1")


def test_bytes_that_are_not_utf8_stop_no_reader(r: redis.Redis, redis_url: str, ns: str,
                                                 shard: tuple[Client, str],
                                                 tmp_path: Any) -> None:
    """A payload (or a cron field) that is not UTF-8, written straight through submit.lua:
    the snapshotter's hash read failed on it for every batch, and listings failed."""
    import asyncio

    from helpers import drain
    from scheduler.history.snapshotter import SnapshotterConfig
    from scheduler.history.store import open_store

    client, prefix = shard
    later = str(int(time.time() * 1000) + 60_000)
    items = msgpack_str([b"a1", b"t", b"default", later.encode(), 3, b"payload", b"\xff\xfe",
                         b"kind", b"delayed", b"tz", b"Europe/\xff"])
    scripts.run_sync(r, [scripts.Call("submit", (prefix,), (int(time.time() * 1000), 1000, 1,
                                                             items))])
    [listed] = [j for j in client.list_jobs() if j.job_id == "a1"]
    assert listed.payload == "(not shown: 2 bytes that do not decode as JSON)"
    asyncio.run(drain(redis_url, ns, str(tmp_path / "h.sqlite3"),
                      config=SnapshotterConfig(retention_s=None, settle_s=0, defer_s=0)))
    store = open_store(str(tmp_path / "h.sqlite3"))
    try:
        assert any(j.job_id == "a1" for j in store.recovery_jobs(ns))
    finally:
        store.close()
