"""`Client.forget`: an ended job leaves Redis now with its slots and their index entries; a job
with a slot that has not ended stays whole; an id Redis does not hold is skipped."""

from __future__ import annotations

import redis

from conftest import ns_keys
from scheduler import Client
from scheduler.core.keys import shard_of


def test_forget_removes_ended_jobs_whole_and_leaves_the_rest(client: Client, r: redis.Redis,
                                                             ns: str) -> None:
    ended, waiting, delayed = (client.submit("noop"), client.submit("noop"),
                               client.submit("noop", delay=3600))
    before = set(ns_keys(r, ns))
    client.cancel([f"{ended}:{client.get_job(ended).fire_ms}"])
    client.delete_job(delayed)  # cancels its slot: ended too
    done = client.forget([ended, waiting, delayed, "01ffffffffffffffffffffffffffffff"])
    assert (done.jobs, done.left) == (2, 1) and done.keys >= 4
    left = set(ns_keys(r, ns))
    gone = {k for k in before - left if b":job:" in k or b":slot:" in k}
    assert len(gone) == 4 and all(ended.encode() in k or delayed.encode() in k
                                  for k in gone), gone
    assert not any(ended.encode() in k or delayed.encode() in k for k in left), sorted(left)
    assert any(waiting.encode() in k for k in left)
    for shard in range(client.shards):  # no index names them
        prefix = client.keys.prefix(shard)
        for index in ("finished", "due", "jobs"):
            members = r.zrange(f"{prefix}{index}", 0, -1)
            assert not {m.decode() for m in members} & {ended, delayed} and not any(
                m.decode().startswith((ended, delayed)) for m in members), index


def test_forget_removes_a_schedules_fire_ledger_and_objective_counts(
        client: Client, r: redis.Redis, ns: str) -> None:
    job_id = client.submit("noop", cron="0 0 1 1 *")
    client.delete_job(job_id)
    shard = shard_of(job_id, client.shards)
    ledger, counts = client.keys.fires(shard, job_id), client.keys.ontime(shard, job_id)
    r.zadd(ledger, {"1700000000000:deleted": 1_700_000_000_000})  # as a node leaves them
    r.hset(counts, mapping={"1700000000000:on": 3, "through": 1_700_000_000_000})
    done = client.forget([job_id])
    assert done.jobs == 1 and not r.exists(ledger) and not r.exists(counts)
    assert not any(job_id.encode() in k for k in ns_keys(r, ns))
