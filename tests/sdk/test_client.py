"""The SDK: submit, submit_many, dedupe, reading jobs and slots, and bad input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import redis

from conftest import ns_keys
from scheduler import AsyncClient, Client, JobSpec, RetryPolicy, SlotStatus
from scheduler.core.errors import JobNotFound, NamespaceError, ValidationError
from scheduler.core.keys import DEFAULT_CLUSTER_SHARDS, DEFAULT_SHARDS
from scheduler.redis import cluster
from scheduler.scripts import calls as scripts


def test_submit_many_is_one_round_trip_with_one_script_call_per_shard(
        redis_url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    batches: list[list[scripts.Call]] = []
    real = scripts.stream_sync

    def spy(client: redis.Redis, calls: Iterator[scripts.Call],
            wait: tuple[object, ...] | None) -> tuple[list[object], int]:
        batches.append(list(calls))
        return real(client, iter(batches[-1]), wait)

    with Client(redis_url, ns, shards=4) as client:
        client.submit("warm", None)
        monkeypatch.setattr(scripts, "stream_sync", spy)
        ids = client.submit_many([{"task": "t", "payload": i} for i in range(400)])
        assert len(batches) == 1  # one pipelined round trip
        assert sorted(c.keys[0] for c in batches[0]) == [client.keys.prefix(s) for s in range(4)]
        assert len(set(ids)) == 400
        assert [client.get_job(i).payload for i in ids[:5]] == [0, 1, 2, 3, 4]
        assert all(s.status is SlotStatus.QUEUED for i in ids[:20] for s in client.slots(i))


def test_a_new_namespace_has_the_default_shards_of_where_it_is_made(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    """Two on one Redis (shards spread nothing there, and cost script calls), eight on a
    Redis Cluster (its unit of spread over masters); a given count wins either way."""
    with Client(redis_url, ns) as client:
        client.submit("t", None)
        expected = DEFAULT_CLUSTER_SHARDS if cluster.is_cluster(client.redis) else DEFAULT_SHARDS
        assert client.shards == expected == int(r.hget(client.keys.meta, "shards"))
    with Client(redis_url, ns + "-given", shards=3) as client:
        client.submit("t", None)
        assert client.shards == 3


def test_a_dedupe_key_returns_the_first_job(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        first = client.submit("t", {"v": 1}, dedupe_key="invoice-42")
        again = client.submit("t", {"v": 2}, dedupe_key="invoice-42")
        both = client.submit_many([JobSpec(task="t", dedupe_key="k2"),
                                   JobSpec(task="t", dedupe_key="k2")])
        assert first == again and both[0] == both[1]
        assert client.get_job(first).payload == {"v": 1}
        assert len(client.slots(first)) == 1


def test_job_definition_round_trips(redis_url: str, ns: str) -> None:
    policy = RetryPolicy(max_attempts=5, base_s=0.5, max_s=30, jitter=0.1)
    with Client(redis_url, ns) as client:
        job_id = client.submit("emails.send", {"to": "x@y.z"}, queue="mail", timeout=2.5,
                               retry=policy, delivery="exactly_once")
        job = client.get_job(job_id)
    assert (job.task, job.queue, job.timeout_s, job.retry, job.delivery) == (
        "emails.send", "mail", 2.5, policy, "exactly_once")
    assert job.payload == {"to": "x@y.z"} and job.created_ms == job.fire_ms > 0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"delivery": "twice"}, "delivery"),
    ({"timeout": -1}, "timeout"),
    ({"queue": "a b"}, "queue"),
    ({"payload": {"x": object()}}, "payload"),
    ({"payload": "x" * (1024 * 1024 + 1)}, "payload"),
])
def test_bad_input_raises_and_writes_nothing(r: redis.Redis, redis_url: str, ns: str,
                                             kwargs: dict[str, object], field: str) -> None:
    with Client(redis_url, ns) as client:
        with pytest.raises(ValidationError) as err:
            client.submit("t", **kwargs)  # type: ignore[arg-type]
        assert err.value.field == field
        with pytest.raises(ValidationError):
            client.submit_many([{"task": "ok"}, {"task": "t", **kwargs}])
    assert ns_keys(r, ns) == []


def test_names_checked_once_are_still_checked_for_every_job(r: redis.Redis, redis_url: str,
                                                           ns: str) -> None:
    """submit_many checks each distinct (task, queue, delivery) once: a bad or unhashable
    value after good ones is still one clear error, and nothing is written."""
    with Client(redis_url, ns) as client:
        good = {"task": "t", "queue": "q", "delivery": "at_most_once"}
        for bad, field in (({"task": ["t"]}, "task"), ({"queue": {"q": 1}}, "queue"),
                           ({"delivery": "twice"}, "delivery"), ({"task": " t"}, "task")):
            with pytest.raises(ValidationError) as err:
                client.submit_many([good, good, {**good, **bad}])
            assert err.value.field == field
    assert ns_keys(r, ns) == []


def test_the_shard_count_is_fixed_when_a_namespace_is_created(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns, shards=3) as client:
        client.submit("t")
    with Client(redis_url, ns) as client:
        assert client.shards == 3
    with pytest.raises(NamespaceError, match="has 3 shards"):
        Client(redis_url, ns, shards=5).submit("t")


def test_unknown_ids_raise_not_found(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        with pytest.raises(JobNotFound, match="no job 'nope'"):
            client.get_job("nope")
        with pytest.raises(ValidationError):
            client.get_job("bad id!")


def test_async_client_matches_the_blocking_one(redis_url: str, ns: str) -> None:
    async def main() -> None:
        async with AsyncClient(redis_url, ns) as client:
            ids = await client.submit_many([JobSpec(task="t", payload=i) for i in range(10)])
            again = await client.submit("t", dedupe_key="same")
            assert again == await client.submit("t", dedupe_key="same")
            assert (await client.get_job(ids[3])).payload == 3
            [slot] = await client.slots(ids[3])
            assert slot.status is SlotStatus.QUEUED
    asyncio.run(main())


def test_the_async_client_runs_the_operator_actions(redis_url: str, ns: str) -> None:
    """cancel, dead_letters, replay, purge, now_ms and shards were missing from it."""
    async def main() -> None:
        async with AsyncClient(redis_url, ns, shards=3) as client:
            assert await client.shards() == 3
            now = await client.now_ms()
            assert abs(now - time.time() * 1000) < 5000
            a, b = await client.submit_many([JobSpec(task="t"), JobSpec(task="t", delay=60)])
            done = await client.cancel([a, b], "test")
            assert set(done.values()) == {"cancelled"}
            assert (await client.cancel(a))[f"{a}:{(await client.get_job(a)).fire_ms}"] \
                == "already finished"
            assert await client.dead_letters() == []
            assert await client.replay(None) == 0 and await client.purge(None) == 0
            assert (await client.status()).shards == 3
    asyncio.run(main())


def test_job_ids_are_distinct_uuid7s_in_time_order_and_a_forked_child_never_repeats() -> None:
    import os
    import uuid

    from scheduler.core.jobspec import job_ids

    first = [job_ids.next() for _ in range(5000)]  # crosses a refill of the pool
    assert len(set(first)) == 5000 and all(len(i) == 32 and int(i, 16) >= 0 for i in first)
    assert {(uuid.UUID(i).version, uuid.UUID(i).variant) for i in first} == {(7, uuid.RFC_4122)}
    assert {i[16] for i in first} == set("89ab")  # the variant's digit, random bits and all
    # Time first (history's B-trees grow at their right edge), the clock's ms when given.
    early, late = job_ids.take(3, 1_700_000_000_000), job_ids.take(3, 1_700_000_000_001)
    assert max(early) < min(late) and early[0][:12] == f"{1_700_000_000_000:012x}"
    assert len({i[13:] for i in early + late}) == 6
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.write(write, "".join(job_ids.next() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 1000).decode()
    os.close(read)
    parent = "".join(job_ids.next() for _ in range(10))
    assert len(child) == 320 and child != parent
