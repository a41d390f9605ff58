"""keys.py is the only source of key names; Lua and Python agree on names and state strings."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import redis

from scheduler import Client, SlotStatus
from scheduler.core.errors import ValidationError
from scheduler.core.keys import Keys, shard_of, slot_id, split_slot_id
from scheduler.core.states import Outcome
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import source as sources

LUA = Path(scripts.__file__).parent / "lua"


def test_shard_keys_share_one_hash_tag() -> None:
    k = Keys("sched")
    names = [k.job(3, "j"), k.slot(3, "j:1"), k.due(3), k.cron(3), k.queue(3, "default"),
             k.events(3), k.dlq(3), k.owner(3), k.leases(3)]
    tags = {re.search(r"\{([^}]*)\}", n).group(1) for n in names}  # type: ignore[union-attr]
    assert tags == {"s03"}
    assert all(n.startswith("sched:{s03}:") for n in names)


def test_shard_of_is_stable_and_spreads() -> None:
    assert shard_of("abc", 8) == shard_of("abc", 8) == 2  # crc32: same in every process
    counts = [0] * 8
    for i in range(8000):
        counts[shard_of(f"job{i}", 8)] += 1
    assert min(counts) > 800


@pytest.mark.parametrize("bad", ["a b", "a:b", "{x}", "", "x" * 65])
def test_names_that_would_break_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="namespace"):
        Keys(bad)


def test_slot_ids_round_trip() -> None:
    assert split_slot_id(slot_id("abc", 1234)) == ("abc", 1234)
    with pytest.raises(ValidationError, match="slot_id"):
        split_slot_id("nocolon")


@pytest.mark.parametrize("name", sources.NAMES)
def test_each_script_header_documents_the_keys_its_wrapper_passes(name: str) -> None:
    builders = {
        "submit": lambda p: scripts.submit(p, 1, 10, []),
        "claim": lambda p: scripts.claim(p, 1, "w", 1000, []),
        "complete": lambda p: scripts.complete(p, 1, 10, "w", []),
        "fail": lambda p: scripts.fail(p, 1, 10, "w", []),
        "release": lambda p: scripts.release(p, 1, 10, "w", []),
        "promote": lambda p: scripts.promote(p, 1, 10, 10),
        "heartbeat": lambda p: scripts.heartbeat(p, 1, 1000, "w", []),
        "reclaim": lambda p: scripts.reclaim(p, 1, 10, 10, 1000, []),
        "cancel": lambda p: scripts.cancel(p, 1, 10, "why", []),
        "replay": lambda p: scripts.replay(p, 1, 10, []),
        "purge": lambda p: scripts.purge(p, 1, 10, []),
        "once": lambda p: scripts.once(p, "s:1", 1, "x"),
        "requeue": lambda p: scripts.requeue(p, 1, 10, []),
        "materialize": lambda p: scripts.materialize(p, 1, 10, "j", 1, "", 2, 0, []),
        "lease": lambda p: scripts.lease(p, 1, 10, "n", 1000, "acquire"),
        "stats": lambda p: scripts.stats(p, 1),
        "key_stats": lambda p: scripts.key_stats(p, 10, 100),
        "clean_lanes": lambda p: scripts.clean_lanes(p, 1, 0, 10),
        "trim_history": lambda p: scripts.trim_history(p),
        "retire": lambda p: scripts.retire(p, 1, 1000, 10),
        "expire": lambda p: scripts.expire(p, 1, 1000, 10, 1000, 10),
        "restore": lambda p: scripts.restore(p, 1, 10, [], []),
        "sweep": lambda p: scripts.sweep(p, 1, 10, []),
        "delete_job": lambda p: scripts.delete_job(p, 1, 10, "j", "why"),
        "forget": lambda p: scripts.forget(p, ["j"]),
        "trigger": lambda p: scripts.trigger(p, 1, 10, "j"),
        "redefine": lambda p: scripts.redefine(p, 1, 10, "j", "", 2, []),
        "take": lambda p: scripts.take(p, 1, "w", 1000, "q", 1),
        "acquire": lambda p: scripts.acquire(p + "permits", p + "bucket", p + "limit", 1, 1,
                                             1000, "w:1", []),
    }
    call = builders[name]("ns:{s00}:")
    assert call.script == name
    assert len(call.keys) == sources.header_keys(name)
    source = sources.read_source(name)
    assert "ARGV[1]" in source.split("]]", 1)[0] and "Reply" in source


def test_lua_uses_only_the_state_and_outcome_names_python_knows() -> None:
    statuses, outcomes = set(), set()
    for path in LUA.glob("*.lua"):
        text = "\n".join(ln for ln in path.read_text().splitlines() if "HMGET" not in ln)
        statuses |= set(re.findall(r"'status', '(\w+)'", text))
        statuses |= set(re.findall(r"st\[1\] [=~]= '(\w+)'", text))
        statuses |= set(re.findall(r"status = '(\w+)'", text))
        outcomes |= set(re.findall(r"(?:attempt_record|refusal)\([^)]*'(\w+)'", text))
    assert statuses and statuses <= {s.value for s in SlotStatus}
    assert outcomes and outcomes <= {o.value for o in Outcome}


def test_the_keys_the_scripts_create_are_the_keys_keys_py_names(
        r: redis.Redis, ns: str, redis_url: str) -> None:
    clock = ManualClock()
    with Client(redis_url, ns, shards=4, clock=clock) as client:
        job_id = client.submit("t", {"x": 1}, queue="mail")
        job = client.get_job(job_id)
    k = Keys(ns)
    shard = shard_of(job_id, 4)
    expected = {k.meta, k.lane_index(shard), k.job(shard, job_id),
                k.slot(shard, slot_id(job_id, job.fire_ms)), k.queue(shard, "mail"),
                k.events(shard), *(k.config(s) for s in range(4))}
    actual = {key.decode() for key in r.scan_iter(match=f"{ns}:*", count=10_000)}
    assert actual == expected


def test_the_keys_of_delayed_and_cron_jobs_are_the_keys_keys_py_names(
        r: redis.Redis, ns: str, redis_url: str) -> None:
    import asyncio

    import redis.asyncio

    from scheduler.node.node import NodeConfig, SchedulerNode

    clock = ManualClock()
    with Client(redis_url, ns, shards=1, clock=clock) as client:
        delayed = client.submit("t", delay=60)
        cron = client.submit("t", cron="* * * * * *")

    leased = 0.0

    async def one_round() -> None:
        nonlocal leased
        c = redis.asyncio.Redis.from_url(redis_url)
        node = SchedulerNode(c, namespace=ns, clock=clock, node_id="n1")
        await node.setup()
        assert node.leases is not None
        leased = time.monotonic()
        await node.leases.run_once()
        await node.materializer.run_once()
        await c.aclose()

    asyncio.run(one_round())
    k = Keys(ns)
    fires = [clock.now_ms() + i * 1000 for i in range(4)]
    expected = {k.meta, k.schedulers, k.job(0, delayed), k.job(0, cron),
                k.slot(0, slot_id(delayed, clock.now_ms() + 60_000)), k.due(0), k.cron(0),
                k.jobs(0), k.runs(0, cron), k.stats(0), k.owner(0), k.events(0), k.config(0),
                *(k.slot(0, slot_id(cron, f)) for f in fires)}
    actual = {key.decode() for key in r.scan_iter(match=f"{ns}:*", count=10_000)}
    # The shard's owner key expires on Redis's own clock, a shard lease after the round (the
    # test's clock stands still): on a loaded machine the scan may come later than that.
    if time.monotonic() - leased >= NodeConfig().shard_lease_s:
        actual.discard(k.owner(0))
        expected.discard(k.owner(0))
    assert actual == expected


def test_the_namespace_pattern_matches_its_keys_and_no_other(r: redis.Redis, redis_url: str,
                                                             ns: str) -> None:
    """What scripts/demo.sh removes when it ends: every key of its namespace, not one of a
    namespace whose name starts with the same letters."""
    with Client(redis_url, ns) as client:
        client.submit("t", None, delay=600)
        client.set_queue_limit("mail", concurrency=1)
    others = [f"{ns}x:meta", f"{ns}-2:meta", f"{ns}.b:{{s00}}:due"]
    r.mset(dict.fromkeys(others, "theirs"))
    try:
        found = {k.decode() for k in r.scan_iter(match=Keys(ns).pattern(), count=10_000)}
        assert found and all(k.startswith(f"{ns}:") for k in found)
        assert Keys(ns).meta in found and Keys(ns).limits in found
        assert found == {k.decode() for k in r.scan_iter(match=f"{ns}*", count=10_000)
                         if k.decode().startswith(f"{ns}:")}
    finally:
        r.delete(*others)
