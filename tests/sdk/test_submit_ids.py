"""submit_many(ids=...): jobs under the caller's ids, each written once however often the
batch is sent (what the outbox's relay relies on), and the ids checked before any write."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from scheduler import Client, JobSpec, ValidationError
from scheduler.core.jobspec import dedupe_job_id


@pytest.fixture
def client(redis_url: str, ns: str) -> Iterator[Client]:
    with Client(redis_url, ns) as c:
        yield c


def job_keys(r: redis.Redis, ns: str) -> set[str]:
    return {k.decode().rsplit(":", 1)[1] for k in r.scan_iter(match=f"{ns}:*job:*", count=10_000)
            if b"submitted" not in k}


def test_a_batch_sent_twice_makes_each_job_once_under_the_given_ids(
        client: Client, r: redis.Redis, ns: str) -> None:
    ids = [uuid.uuid4().hex for _ in range(100)]  # at least FRESH_MIN_JOBS a shard's call
    jobs = [JobSpec(task="t", payload=i) for i in range(100)]
    assert client.submit_many(jobs, ids=ids) == ids
    assert client.submit_many(jobs[:50] + jobs[50:], ids=ids) == ids
    assert client.submit_many(jobs[30:70], ids=ids[30:70]) == ids[30:70]  # another cut
    assert job_keys(r, ns) == set(ids)
    assert [client.get_job(j).payload for j in ids[:5]] == [0, 1, 2, 3, 4]
    assert all(len(client.slots(j)) == 1 for j in ids[:10])


@pytest.mark.parametrize("jobs, ids, says", [
    ([JobSpec(task="t")] * 2, ["a1"], "one job id per job"),
    ([JobSpec(task="t")], "a1", "one job id per job"),
    ([JobSpec(task="t")], ["bad id!"], "is not a job id"),
    ([JobSpec(task="t", dedupe_key="k")], ["a1"], "has a dedupe key"),
])
def test_bad_ids_are_refused_before_anything_is_written(
        client: Client, r: redis.Redis, ns: str, jobs: list[JobSpec], ids: object,
        says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        client.submit_many([JobSpec(task="fine"), *jobs], ids=["ok1", *ids]  # type: ignore[misc]
                           if not isinstance(ids, str) else ids)
    assert job_keys(r, ns) == set()


def test_a_dedupe_keys_own_id_is_accepted(client: Client) -> None:
    own = dedupe_job_id("order-7")
    assert client.submit_many([JobSpec(task="t", dedupe_key="order-7")], ids=[own]) == [own]
    assert client.submit("t", dedupe_key="order-7") == own
