"""submit_many's overlapped calls (sdk/batching.py, scripts/stream.py): validation of the whole
input before the first write, ids in input order, each call packed only after the one before
was sent, and calls sent again after a broken connection writing nothing twice."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from conftest import ns_keys
from scheduler import AsyncClient, Client
from scheduler.core.errors import ValidationError
from scheduler.core.keys import shard_of
from scheduler.redis import cluster
from scheduler.scripts import calls as scripts
from scheduler.scripts import stream as script_stream
from scheduler.scripts.replies import Code, codes
from scheduler.sdk import batching as submit_batch

JOBS = 3_000  # 4 shards: 8 calls of up to 500


def _jobs(n: int = JOBS) -> list[dict[str, Any]]:
    return [{"task": "t", "payload": i} for i in range(n)]


def _stream_lengths(r: redis.Redis, client: Client) -> int:
    return sum(r.xlen(client.keys.queue(s, "default")) for s in range(4))


@pytest.mark.parametrize("bad_at", [0, JOBS // 2, JOBS - 1])
def test_a_bad_job_anywhere_writes_nothing(r: redis.Redis, redis_url: str, ns: str,
                                           bad_at: int) -> None:
    jobs = _jobs()
    jobs[bad_at] = {"task": "t", "payload": {"x": object()}}
    with Client(redis_url, ns, shards=4) as client:
        with pytest.raises(ValidationError) as err:
            client.submit_many(jobs)
        assert err.value.field == "payload"
        client.submit("warm")  # the namespace exists: a refused batch still adds nothing
        before = ns_keys(r, ns)
        with pytest.raises(ValidationError):
            client.submit_many(jobs)
        assert ns_keys(r, ns) == before


def test_calls_are_packed_after_the_one_before_was_sent_and_ids_keep_input_order(
        r: redis.Redis, redis_url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_calls, real_command = submit_batch.Batch.calls, script_stream._command

    def calls(self: submit_batch.Batch) -> Iterator[scripts.Call]:
        for call in real_calls(self):
            events.append("packed")
            yield call

    def command(call: scripts.Call) -> tuple[Any, ...]:
        events.append("sent")
        return real_command(call)

    with Client(redis_url, ns, shards=4) as client:
        if cluster.is_cluster(client.redis):
            pytest.skip("a cluster's calls go by the pipeline path, all made first")
        client.submit("warm")
        monkeypatch.setattr(submit_batch.Batch, "calls", calls)
        monkeypatch.setattr(script_stream, "_command", command)
        ids = client.submit_many(_jobs())
        assert events == ["packed", "sent"] * 8
        assert len(set(ids)) == JOBS
        for i in (0, 1, 777, JOBS - 1):
            assert client.get_job(ids[i]).payload == i
        assert _stream_lengths(r, client) == JOBS + 1
        # Each shard's stream holds its jobs in input order.
        shard = shard_of(ids[-1], 4)
        entries = r.xrange(client.keys.queue(shard, "default"))
        streamed = [e[1][b"s"].decode().partition(":")[0] for e in entries]
        assert [i for i in streamed if i in set(ids)] == [i for i in ids
                                                           if shard_of(i, 4) == shard]


def test_a_broken_connection_sends_the_calls_again_and_writes_each_job_once(
        r: redis.Redis, redis_url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(redis_url, ns, shards=4) as client:
        if cluster.is_cluster(client.redis):
            pytest.skip("a cluster's calls go by the pipeline path")
        client.submit("warm")
        sends = {"n": 0}
        real = redis.connection.AbstractConnection.send_packed_command

        def send(self: Any, command: Any, check_health: bool = True) -> None:
            sends["n"] += 1
            if sends["n"] == 5:  # four calls went out (and ran): the fifth breaks
                self.disconnect()
                raise redis.exceptions.ConnectionError("connection reset (test)")
            real(self, command, check_health)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", send)
        ids = client.submit_many(_jobs())
        assert sends["n"] > 8  # the stream broke and the calls went again
        assert _stream_lengths(r, client) == JOBS + 1  # no job written twice
        assert len(set(ids)) == JOBS and client.get_job(ids[-1]).payload == JOBS - 1


def test_a_fresh_call_run_twice_writes_once(r: redis.Redis, redis_url: str, ns: str) -> None:
    with Client(redis_url, ns, shards=1) as client:
        client.submit("warm")
        batch = submit_batch.Batch(client._core, _jobs(100))
        call = next(batch.calls())
        assert call.args[-1] == "1"  # fresh: one marker, no EXISTS per job
        first, again = scripts.run_sync(client.redis, [call, call])
        assert codes(first, "submit") == [Code.OK] * 100
        assert codes(again, "submit") == [Code.EXISTS] * 100
        assert _stream_lengths_one(r, client) == 101
        small = next(submit_batch.Batch(client._core, _jobs(3)).calls())
        assert small.args[-1] != "1"  # a few jobs: EXISTS each, no marker key


def _stream_lengths_one(r: redis.Redis, client: Client) -> int:
    return int(r.xlen(client.keys.queue(0, "default")))


def test_asyncio_client_streams_the_same(r: redis.Redis, redis_url: str, ns: str) -> None:
    async def main() -> list[str]:
        async with AsyncClient(redis_url, ns, shards=4) as client:
            bad = _jobs()
            bad[-1] = {"task": "t", "queue": "no such queue"}
            with pytest.raises(ValidationError):
                await client.submit_many(bad)
            assert ns_keys(r, ns) == []
            ids = await client.submit_many(_jobs())
            assert (await client.get_job(ids[-1])).payload == JOBS - 1
            return ids

    ids = asyncio.run(main())
    assert len(set(ids)) == JOBS
    with Client(redis_url, ns) as client:
        assert _stream_lengths(r, client) == JOBS
