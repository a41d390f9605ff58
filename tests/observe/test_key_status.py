"""Concurrency keys in status: a queue's depth counts its keys' queued slots wherever it is
shown, and its busiest keys are read, bounded, by `Client.queue_keys`, `sched queues keys`,
the console's queue page and the exporter's sched_key_* gauges (scheduler/observe/keyed.py,
lua/key_stats.lua)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
import redis

import scheduler.observe.keyed as keyed
import scheduler.scripts.calls as scripts
import scheduler.scripts.replies as replies
from helpers import run_until, sched
from scheduler import AsyncClient, Client, JobSpec, Registry
from scheduler.core.errors import ValidationError
from scheduler.core.keys import Keys, key_score, key_shard
from scheduler.observe.capacity import plan
from scheduler.observe.metrics import NamespaceCollector
from scheduler.observe.records import KeyStatus, QueueStatus, WorkerStatus
from scheduler.web.app import create_app


def submit_keyed(client: Client, queue: str, key: str, n: int) -> None:
    """n jobs of concurrency key `key` in `queue`."""
    client.submit_many([JobSpec(task="t", queue=queue, concurrency_key=key)
                        for _ in range(n)])


def plant(r: redis.Redis, client: Client, queue: str, found: dict[str, tuple[int, int]]
          ) -> None:
    """Each key's (waiting, running) slots, through the real transitions: a key's runs are
    submitted and claimed by take.lua first, while no other key of its shard waits (a key
    whose queue empties leaves the ring), then the waiting ones are submitted."""
    for key, (_, running) in found.items():
        if running:
            submit_keyed(client, queue, key, running)
            prefix = client.keys.prefix(key_shard(key, client.shards))
            reply = scripts.run_sync(r, [scripts.take(prefix, client.now_ms(), "w", 30_000,
                                                      queue, running)])[0]
            assert len(replies.taken(reply, queue)[0]) == running
    for key, (waiting, _) in found.items():
        if waiting:
            submit_keyed(client, queue, key, waiting)


def plant_raw(r: redis.Redis, keys: Keys, shard: int, queue: str, key: str | bytes,
              waiting: int) -> None:
    """Queued slots of a key written straight into Redis by someone who can (a key the SDK
    would refuse: markup, bytes that are not UTF-8), as the contract keeps them (keys.py)."""
    raw = key.encode() if isinstance(key, str) else key
    r.zadd(keys.key_queue(shard, queue, "").encode() + raw,
           {f"x{i}.0:1": key_score(3, i) for i in range(waiting)})
    r.rpush(keys.key_ring(shard, queue), raw)
    r.zadd(keys.keyed_queues(shard), {queue: 1})


@pytest.fixture
def keyed_queue(r: redis.Redis, client: Client) -> dict[str, tuple[int, int]]:
    """Queue "tenants": 15 keys over the shards (key -> (waiting, running)) beside 2 plain
    jobs, and a plain queue "other"."""
    client.submit_many([{"task": "t", "queue": "tenants"} for _ in range(2)]
                       + [{"task": "t", "queue": "other"}])
    found = {f"k{i:02d}": (i % 7, i % 3) for i in range(15)}
    plant(r, client, "tenants", found)
    return found


def _busiest(found: dict[str, tuple[int, int]], n: int) -> list[KeyStatus]:
    return [KeyStatus(key=k, waiting=w, running=r) for k, (w, r) in sorted(
        found.items(), key=lambda kv: (-sum(kv[1]), kv[0])) if w or r][:n]


def test_a_queues_depth_counts_its_keys_queued_slots(
        client: Client, keyed_queue: dict[str, tuple[int, int]]) -> None:
    waiting = sum(w for w, _ in keyed_queue.values())
    with_slots = sum(1 for w, _ in keyed_queue.values() if w)
    status = {q.queue: q for q in client.status().queues}
    assert (status["tenants"].depth, status["tenants"].keyed_waiting,
            status["tenants"].keys_waiting) == (2 + waiting, waiting, with_slots)
    assert (status["other"].depth, status["other"].keys_waiting) == (1, 0)
    assert sum(q.keyed_waiting for d in client.status().shard_details for q in d.queues
               if q.queue == "tenants") == waiting
    info = {q.queue: q for q in client.queues()}
    assert (info["tenants"].depth, info["tenants"].keys_waiting) == (2 + waiting, with_slots)


def test_a_queue_with_only_keyed_slots_is_listed(r: redis.Redis, client: Client) -> None:
    client.create_namespace()
    plant(r, client, "only-keys", {"acme": (4, 1)})
    [q] = client.status().queues
    assert (q.queue, q.depth, q.top_keys) == ("only-keys", 4, [
        KeyStatus(key="acme", waiting=4, running=1)])


def test_a_key_whose_slots_all_run_is_listed(r: redis.Redis, client: Client) -> None:
    """In no ring (nothing queued): its running slots name it."""
    client.create_namespace()
    plant(r, client, "mixed", {"busy": (2, 1), "at-limit": (0, 3), "done": (0, 1)})
    plant(r, client, "runs-only", {"solo": (0, 2)})
    got = client.queue_keys("mixed")
    assert got.busiest == [KeyStatus(key="at-limit", waiting=0, running=3),
                           KeyStatus(key="busy", waiting=2, running=1),
                           KeyStatus(key="done", waiting=0, running=1)]
    assert (got.keys, got.waiting) == (1, 2)  # keys with a queued slot, and those slots
    status = {q.queue: q for q in client.status().queues}
    assert status["runs-only"].top_keys == [KeyStatus(key="solo", waiting=0, running=2)]
    assert (status["runs-only"].depth, status["runs-only"].keys_waiting) == (0, 0)


def test_the_busiest_keys_come_first_up_to_top(
        r: redis.Redis, client: Client, keyed_queue: dict[str, tuple[int, int]]) -> None:
    client.set_queue_limit("tenants", per_key_concurrency=3, per_key_rate=10)
    heavy = _busiest(keyed_queue, 2)[1].key
    client.set_key_weight("tenants", heavy, 4)
    def expected(n: int) -> list[KeyStatus]:
        return [KeyStatus(key=k.key, waiting=k.waiting, running=k.running,
                          weight=4 if k.key == heavy else 1) for k in _busiest(keyed_queue, n)]

    got = client.queue_keys("tenants", top=5)
    assert got.busiest == expected(5)
    assert (got.per_key_concurrency, got.per_key_rate, got.truncated) == (3, 10.0, False)
    assert got.keys == sum(1 for w, _ in keyed_queue.values() if w)
    assert got.waiting == sum(w for w, _ in keyed_queue.values())
    # status names the busiest TOP_KEYS of each queue, no more
    [tenants] = [q for q in client.status().queues if q.queue == "tenants"]
    assert tenants.top_keys == expected(keyed.TOP_KEYS)
    assert (tenants.per_key_concurrency, tenants.per_key_rate) == (3, 10.0)
    assert client.queue_keys("other").busiest == []
    assert client.queue_keys("other").per_key_concurrency is None


def test_a_shard_names_its_busiest_keys_in_order(r: redis.Redis, client: Client) -> None:
    """More keys in one shard than it is asked to name: the busiest, in order."""
    client.create_namespace()
    names = [k for k in (f"t{i}" for i in range(200)) if key_shard(k, client.shards) == 0][:8]
    busy = [(3, 0), (1, 5), (7, 0), (2, 2), (4, 0), (1, 0), (2, 2), (6, 1)]
    plant(r, client, "q", dict(zip(names, busy, strict=True)))
    [[[_, _, _, _, _, top]]] = scripts.run_sync(
        r, [scripts.key_stats(client.keys.prefix(0), 3, 100)])
    expected = _busiest(dict(zip(names, busy, strict=True)), 3)
    assert [(k.decode(), int(w), int(run)) for k, w, run, _ in top] == [
        (k.key, k.waiting, k.running) for k in expected]
    assert client.queue_keys("q", top=3).busiest == expected


def test_a_workers_keys_at_their_limit_show_running_and_waiting(
        r: redis.Redis, client: Client, redis_url: str, ns: str) -> None:
    """A real worker under a per-key limit of 2: while its runs hold, each of 3 keys of 5
    jobs shows 2 running and 3 waiting, and the queue's depth is their 9 waiting."""
    client.set_queue_limit("tenants", per_key_concurrency=2)
    for key in ("a", "b", "c"):
        submit_keyed(client, "tenants", key, 5)
    registry, go, ended, seen = Registry(), asyncio.Event(), [], []

    @registry.task("t")
    async def hold(ctx: Any, payload: Any) -> None:
        await go.wait()
        ended.append(1)

    def done() -> bool:
        if not go.is_set():
            keys = client.queue_keys("tenants").busiest
            if [(k.key, k.waiting, k.running) for k in keys] == [
                    ("a", 3, 2), ("b", 3, 2), ("c", 3, 2)]:
                seen.append({q.queue: q for q in client.status().queues}["tenants"])
                go.set()
        return len(ended) == 15

    asyncio.run(run_until(redis_url, ns, registry, done, queues=["tenants"], concurrency=50))
    [tenants] = seen
    assert (tenants.depth, tenants.keyed_waiting, tenants.keys_waiting) == (9, 9, 3)
    assert client.queue_keys("tenants").busiest == []


@pytest.mark.parametrize("plain, per_key, rate, slots", [
    (0, None, None, 105.0),  # 4 / 0.8 + 3,000 x 1 s / 30 s: no per-key limit
    (0, 2, None, 9.0),  # 2 keys x 2 at once: 4 slots start them as fast as they may go
    (300, 2, None, 19.0),  # the plain backlog still drains at its own pace: + 300 x 1 s / 30 s
    (0, 5000, None, 105.0),  # a limit the keys cannot reach changes nothing
    (0, None, 1.5, 8.0),  # 2 keys x 1.5 starts/s x 1 s runs: 3 slots busy at most
    (0, 2, 0.5, 6.0),  # the tighter of the two
])
def test_workers_wanted_leave_out_what_per_key_limits_hold_back(
        plain: int, per_key: int | None, rate: float | None, slots: float) -> None:
    q = QueueStatus(queue="q", depth=plain + 3000, pending=4, oldest_ready_age_s=0.0,
                    succeeded_per_s=4.0, failed_per_s=0.0, inflight=4, mean_run_s=1.0,
                    keyed_waiting=3000, keys_waiting=2, per_key_concurrency=per_key,
                    per_key_rate=rate)
    w = WorkerStatus(worker_id="w", alive=True, heartbeat_age_s=0, host="h", pid=1,
                     queues=["q"], concurrency=10, inflight=4, succeeded=0, failed=0,
                     succeeded_per_s=4.0, failed_per_s=0, by_queue={})
    assert plan([q], [w]).slots_wanted == slots


def test_the_async_client_reads_the_same(
        redis_url: str, ns: str, client: Client, keyed_queue: dict[str, tuple[int, int]]) -> None:
    async def read() -> Any:
        async with AsyncClient(redis_url, ns) as c:
            return await c.queue_keys("tenants", top=3)
    assert asyncio.run(read()) == client.queue_keys("tenants", top=3)


def test_a_read_takes_at_most_its_budget_of_keys(
        r: redis.Redis, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    client.create_namespace()
    plant(r, client, "q", {f"same{i}": (2, 0) for i in range(6)})
    shard = key_shard("same0", client.shards)
    ring = [k for k in r.lrange(client.keys.key_ring(shard, "q"), 0, -1)]
    [[[queue, waiting, keys, read, truncated, top]]] = scripts.run_sync(
        r, [scripts.key_stats(client.keys.prefix(shard), 2, 3)])
    in_shard = len(ring)
    assert (queue, keys, read, truncated) == (b"q", in_shard, min(3, in_shard),
                                             int(in_shard > 3))
    assert waiting == 2 * min(3, in_shard) and len(top) == min(2, in_shard)
    monkeypatch.setattr(keyed, "KEY_BUDGET", 1)
    got = client.queue_keys("q")
    shards_with = len({key_shard(f"same{i}", client.shards) for i in range(6)})
    assert got.truncated == (shards_with < 6) and got.keys == 6
    assert got.waiting == 2 * shards_with


@pytest.mark.parametrize("queue, top", [("bad queue", 10), ("q", 0), ("q", 1001),
                                        ("q", True), ("\x1b[31m", 1)])
def test_bad_input_is_refused(client: Client, queue: str, top: Any) -> None:
    with pytest.raises(ValidationError):
        client.queue_keys(queue, top=top)


def test_sched_queues_shows_the_per_key_limit_and_the_keys(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, client: Client, redis_url: str,
        ns: str, keyed_queue: dict[str, tuple[int, int]]) -> None:
    client.set_queue_limit("tenants", per_key_concurrency=3)
    plant_raw(r, client.keys, 0, "tenants", "\x1b]0;owned\x07", 1)  # a terminal escape
    code, out, _ = sched(capsys, redis_url, ns, "queues")
    assert code == 0, out
    [line] = [ln for ln in out.splitlines() if ln.startswith("tenants")]
    with_slots = sum(1 for w, _ in keyed_queue.values() if w) + 1
    assert "3 at once per key" in line and line.split()[-1] == str(with_slots)
    code, out, _ = sched(capsys, redis_url, ns, "queues", "keys", "tenants", "--top", "3")
    assert code == 0, out
    lines = out.splitlines()
    waiting = sum(w for w, _ in keyed_queue.values()) + 1
    assert lines[0] == (f"queue tenants: 3 at once per key; {with_slots} key(s) with "
                        f"{waiting} slot(s) waiting")
    assert lines[1].split() == ["KEY", "WAITING", "RUNNING", "WEIGHT"]
    assert [ln.split() for ln in lines[2:]] == [[k.key, str(k.waiting), str(k.running), "1"]
                                                for k in _busiest(keyed_queue, 3)]
    code, out, _ = sched(capsys, redis_url, ns, "queues", "keys", "tenants", "--json")
    got = msgspec.json.decode(out)
    assert got["per_key_concurrency"] == 3 and len(got["busiest"]) == 10
    first = _busiest(keyed_queue, 1)[0]
    assert got["busiest"][0] == {"key": first.key, "waiting": first.waiting,
                                 "running": first.running, "weight": 1}
    code, out, err = sched(capsys, redis_url, ns, "queues", "keys", "no such")
    assert code != 0 and "queue" in err and "Traceback" not in err and len(
        err.strip().splitlines()) == 1, err
    code, _, err = sched(capsys, redis_url, ns, "queues", "keys", "q", "--top", "0")
    assert code != 0 and "Traceback" not in err


async def _get(app: Any, path: str) -> tuple[int, str]:
    """One GET through the console's ASGI app, as a browser on loopback sends it."""
    sent: list[dict[str, Any]] = []
    raw, _, query = path.partition("?")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    from urllib.parse import unquote
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": unquote(raw),
             "raw_path": raw.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"127.0.0.1")], "server": ("127.0.0.1", 8080),
             "client": ("127.0.0.1", 5000)}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body.decode()


HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "{{7*7}}", "a&b"]


def test_the_console_shows_the_limit_and_the_busiest_keys_escaped(
        r: redis.Redis, client: Client, redis_url: str, ns: str,
        keyed_queue: dict[str, tuple[int, int]]) -> None:
    client.set_queue_limit("tenants", per_key_concurrency=3)
    for i, key in enumerate([*HOSTILE, b"\xff\xfe"]):
        plant_raw(r, client.keys, i % client.shards, "tenants", key, 10 + i)
    plant(r, client, "keys-only", {"acme": (3, 0)})

    async def pages() -> list[tuple[int, str]]:
        async with AsyncClient(redis_url, ns) as c:
            app = create_app(c)
            return [await _get(app, p) for p in (
                "/queues/tenants", "/queues", "/queues/other", "/queues/%3Cscript%3E",
                "/queues/tenants/queued", "/queues/keys-only")]

    (code, body), (listed, queues), (plain, other), (bad, _), (tab, tabbed), (_, only) = \
        asyncio.run(pages())
    assert (code, listed, plain, bad, tab) == (200, 200, 200, 400, 200)
    assert "its 3 slot(s) of concurrency keys wait in their keys" in only
    assert "<script>alert" not in body and "<img src=x" not in body and "{{7*7}}" in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "a&amp;b" in body
    assert "Concurrency keys: 3 at once per key;" in body and 'id="keys"' in tabbed
    assert "slot(s) of concurrency keys wait in their keys" not in body  # 2 plain ones listed
    rows = body.split('id="keys"', 1)[1].split("</table>", 1)[0].count("<tr>")
    assert rows == 1 + keyed.TOP_KEYS  # the header, then the busiest 10
    assert 'id="keys"' not in other  # no per-key limit and no key: no table
    assert "3 at once per key" in queues


def _key_samples(collector: NamespaceCollector) -> dict[tuple[str, str, str], float]:
    return {(m.name, sm.labels["queue"], sm.labels["key"]): sm.value
            for m in collector.collect() if m.name.startswith("sched_key_")
            for sm in m.samples}


def test_the_exporter_names_the_busiest_keys_only(
        r: redis.Redis, client: Client, ns: str) -> None:
    client.create_namespace()
    found = {f"k{i:02d}": (i + 1, i % 2) for i in range(25)}
    plant(r, client, "tenants", found)
    collector = NamespaceCollector(r, ns, key_labels="plain")
    samples = _key_samples(collector)
    top = _busiest(found, keyed.TOP_KEYS)
    assert samples == {**{("sched_key_waiting", "tenants", k.key): k.waiting for k in top},
                       **{("sched_key_running", "tenants", k.key): k.running for k in top}}
    gauges = {(m.name, tuple(sm.labels.values())): sm.value for m in collector.collect()
              for sm in m.samples}
    assert gauges[("sched_queue_keys", ("tenants",))] == 25
    # the busiest key drains: it leaves the top, and its series leaves the scrape
    shard = key_shard("k24", client.shards)
    r.delete(client.keys.key_queue(shard, "tenants", "k24"))
    r.lrem(client.keys.key_ring(shard, "tenants"), 0, "k24")
    del found["k24"]
    samples = _key_samples(collector)
    assert ("sched_key_waiting", "tenants", "k24") not in samples
    assert {k for _, _, k in samples} == {k.key for k in _busiest(found, keyed.TOP_KEYS)}
    assert len(samples) == 2 * keyed.TOP_KEYS
