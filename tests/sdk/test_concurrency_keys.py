"""Concurrency keys, as a caller gives them: the job hash holds the key, every keyed job lives
in its key's home shard (plain, dedupe, windowed, cron, a named schedule, submit_many, ids
given), a dedupe key is scoped by its concurrency key, bad input is one line and writes
nothing; the per-key limit and key weights round-trip (docs/guide/tenants.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis

from conftest import ns_keys
from helpers import sched
from scheduler import AsyncClient, Client, JobSpec, QueueLimit, ValidationError
from scheduler.core.jobspec import keyed_job_id
from scheduler.core.keys import key_shard, shard_of

SHARDS = 8
# Keys whose home shards differ, and two that share one (crc32 % 8).
KEYS = ["tenant-1", "tenant-2", "acme.com", "user@example.org", "a/b:c=d+e"]


@pytest.fixture
def client(redis_url: str, ns: str) -> Iterator[Client]:
    with Client(redis_url, ns, shards=SHARDS) as c:
        yield c


def home(job_id: str, key: str) -> bool:
    return shard_of(job_id, SHARDS) == key_shard(key, SHARDS)


def same_home() -> tuple[str, str]:
    by_shard: dict[int, str] = {}
    for n in range(1000):
        key = f"k{n}"
        other = by_shard.setdefault(key_shard(key, SHARDS), key)
        if other != key:
            return other, key
    raise AssertionError("no two keys share a shard")


def test_the_job_hash_holds_the_key_and_the_job_lives_in_its_home_shard(
        client: Client, r: redis.Redis, ns: str) -> None:
    assert len({key_shard(k, SHARDS) for k in KEYS}) > 1
    for key in KEYS:
        job_id = client.submit("t", {"n": 1}, concurrency_key=key)
        assert home(job_id, key), (job_id, key)
        assert client.get_job(job_id).concurrency_key == key
        stored = r.hget(f"{ns}:{{s{shard_of(job_id, SHARDS):02d}}}:job:{job_id}",
                        "concurrency_key")
        assert stored == key.encode()
    plain = client.submit("t")
    assert client.get_job(plain).concurrency_key is None
    assert r.hget(f"{ns}:{{s{shard_of(plain, SHARDS):02d}}}:job:{plain}",
                  "concurrency_key") is None


def test_every_kind_of_keyed_job_lands_in_the_home_shard(client: Client) -> None:
    key = "tenant-7"
    ids = {
        "delay": client.submit("t", delay=60, concurrency_key=key),
        "cron": client.submit("t", cron="0 3 * * *", concurrency_key=key),
        "dedupe": client.submit("t", dedupe_key="order-1", concurrency_key=key),
        "window": client.submit("t", dedupe_key="order-2", dedupe_ttl=60, concurrency_key=key),
        "debounce": client.submit("t", dedupe_key="order-3", debounce=30, concurrency_key=key),
        "schedule": client.schedule("nightly", "t", cron="0 3 * * *", concurrency_key=key),
    }
    for what, job_id in ids.items():
        assert home(job_id, key), what
        assert client.get_job(job_id).concurrency_key == key, what
    assert client.get_job(ids["cron"]).cron == "0 3 * * *"
    # A named schedule's id is its name, placed: the same every time it is declared.
    assert ids["schedule"].startswith("nightly.")
    assert client.schedule("nightly", "t", cron="0 3 * * *", concurrency_key=key) \
        == ids["schedule"]


def test_submit_many_places_each_job_and_stays_fresh(client: Client, r: redis.Redis,
                                                      ns: str) -> None:
    """Enough jobs a shard for the `fresh` marker (batching.FRESH_MIN_JOBS): the ids, drawn
    afresh, are still one call's alone, and a mapping takes the key too."""
    specs: list[JobSpec | dict[str, object]] = [
        JobSpec(task="t", payload=i, concurrency_key=KEYS[i % 3]) for i in range(300)]
    specs += [{"task": "t", "concurrency_key": "tenant-9"}, JobSpec(task="t")]
    ids = client.submit_many(specs)
    assert len(set(ids)) == len(ids) and all(type(i) is str for i in ids)
    assert all(home(i, KEYS[n % 3]) for n, i in enumerate(ids[:300]))
    assert home(ids[300], "tenant-9")
    assert client.get_job(ids[300]).concurrency_key == "tenant-9"
    assert client.get_job(ids[301]).concurrency_key is None
    assert [client.get_job(j).payload for j in ids[:3]] == [0, 1, 2]
    assert any(b"submitted:" in k for k in ns_keys(r, ns))  # the marker, not an EXISTS a job


def test_a_dedupe_key_is_scoped_by_its_concurrency_key(client: Client) -> None:
    a, b = same_home()
    first = client.submit("t", payload=1, dedupe_key="order-9", concurrency_key=a)
    assert client.submit("t", payload=2, dedupe_key="order-9", concurrency_key=a) == first
    # Another tenant's job with the same dedupe key, even in the same shard, is its own.
    other = client.submit("t", payload=3, dedupe_key="order-9", concurrency_key=b)
    unkeyed = client.submit("t", payload=4, dedupe_key="order-9")
    assert len({first, other, unkeyed}) == 3
    assert [client.get_job(j).payload for j in (first, other, unkeyed)] == [1, 3, 4]
    # A window too: its record is the pair's.
    w = client.submit("t", dedupe_key="w", dedupe_ttl=60, concurrency_key=a)
    assert client.submit("t", dedupe_key="w", dedupe_ttl=60, concurrency_key=a) == w
    assert client.submit("t", dedupe_key="w", dedupe_ttl=60, concurrency_key=b) != w


@pytest.mark.parametrize("key", ["", "has space", "x" * 129, "br{ace}", "esc\x1b", 7])
def test_a_bad_key_is_refused_in_one_line_and_nothing_is_written(
        client: Client, r: redis.Redis, ns: str, key: object) -> None:
    for submit in (lambda: client.submit("t", concurrency_key=key),  # type: ignore[arg-type]
                   lambda: client.submit_many([JobSpec(task="t"),
                                               JobSpec(task="t", concurrency_key=key)]),
                   lambda: client.schedule("s", "t", cron="* * * * *", concurrency_key=key),
                   lambda: client.set_key_weight("q", key, 2),  # type: ignore[arg-type]
                   lambda: client.key_weight("q", key)):  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="concurrency_key") as err:
            submit()
        assert "\n" not in str(err.value)
    assert [k for k in ns_keys(r, ns) if b":job:" in k] == []


def test_given_ids_are_taken_only_in_the_home_shard(client: Client, r: redis.Redis,
                                                    ns: str) -> None:
    """submit_many(ids=), the outbox relay's: an id the key's home shard holds is taken, any
    other refused before a write."""
    key = "tenant-3"
    placed = keyed_job_id(key, SHARDS)
    assert client.submit_many([JobSpec(task="t", concurrency_key=key)], ids=[placed]) == [placed]
    assert client.get_job(placed).concurrency_key == key
    elsewhere = next(f"x{n}" for n in range(100) if not home(f"x{n}", key))
    with pytest.raises(ValidationError, match=r"concurrency_key.*shard") as err:
        client.submit_many([JobSpec(task="t", concurrency_key=key)], ids=[elsewhere])
    assert "\n" not in str(err.value)
    assert not [k for k in ns_keys(r, ns) if elsewhere.encode() in k]


def test_a_named_schedule_keeps_the_key_it_was_declared_with(client: Client) -> None:
    """The key decides a schedule's id: declaring the name with another key (or none) while
    its series lives is refused, not made a second series; once deleted, it may."""
    b = KEYS[0]
    first = next(k for k in KEYS if key_shard(k, SHARDS) != key_shard(b, SHARDS))
    plain = client.schedule("hourly", "t", cron="0 * * * *")
    with pytest.raises(ValidationError, match="declared without a concurrency_key") as err:
        client.schedule("hourly", "t", cron="0 * * * *", concurrency_key=b)
    assert "\n" not in str(err.value) and "delete_job('hourly')" in str(err.value)
    client.delete_job(plain)
    keyed = client.schedule("hourly", "t", cron="0 * * * *", concurrency_key=b)
    for other in (first, None):
        with pytest.raises(ValidationError, match=f"declared with concurrency_key '{b}'"):
            client.schedule("hourly", "t", cron="0 * * * *", concurrency_key=other)
    # Nor does a schedule whose name is the placed id take the series over.
    with pytest.raises(ValidationError, match=f"job '{keyed}' is a live series"):
        client.schedule(keyed, "t", cron="0 * * * *")
    assert client.get_job(keyed).concurrency_key == b
    # The same declaration again is still the same schedule.
    assert client.schedule("hourly", "t", cron="0 * * * *", concurrency_key=b) == keyed


def test_a_named_schedule_with_a_long_name_and_a_key_is_refused(client: Client) -> None:
    with pytest.raises(ValidationError, match="too long for a schedule with a concurrency_key"):
        client.schedule("n" * 128, "t", cron="* * * * *", concurrency_key="tenant-1")


def test_the_per_key_limit_round_trips_alone_and_with_the_others(client: Client) -> None:
    assert client.set_queue_limit("mail", per_key_concurrency=3) == QueueLimit(
        per_key_concurrency=3)
    assert client.queue_limits() == {"mail": QueueLimit(per_key_concurrency=3)}
    [info] = [q for q in client.queues() if q.queue == "mail"]
    assert info.limit is not None and info.limit.text() == "3 at once per key"
    both = client.set_queue_limit("mail", concurrency=50, rate=10, per_key_concurrency=2)
    assert client.queue_limits()["mail"] == both
    assert both.text() == "50 at once, 10/s, 2 at once per key"
    assert client.set_queue_limit("mail") is None
    assert client.queue_limits() == {}
    with pytest.raises(ValidationError, match="per_key_concurrency"):
        client.set_queue_limit("mail", per_key_concurrency=0)
    rated = client.set_queue_limit("mail", per_key_concurrency=2, per_key_rate=5)
    assert client.queue_limits()["mail"] == rated
    assert rated.text() == "2 at once per key, 5/s per key"
    with pytest.raises(ValidationError, match="per_key_rate"):
        client.set_queue_limit("mail", per_key_rate=0)
    assert client.set_queue_limit("mail", rate="300/m", per_key_rate="10/s") == QueueLimit(
        rate=5.0, per_key_rate=10.0)
    with pytest.raises(ValidationError, match="per_key_rate: 'fast' is not a rate"):
        client.set_queue_limit("mail", per_key_rate="fast")


def test_key_weights_are_set_read_and_reset_in_the_home_shard(client: Client, r: redis.Redis,
                                                              ns: str) -> None:
    assert client.key_weight("mail", "tenant-1") == 1
    assert client.set_key_weight("mail", "tenant-1", 5) == 5
    assert client.key_weight("mail", "tenant-1") == 5
    assert client.key_weight("other", "tenant-1") == 1  # a weight is a queue's
    stored = r.hget(client.keys.key_weights(key_shard("tenant-1", SHARDS), "mail"), "tenant-1")
    assert stored == b"5"
    assert client.set_key_weight("mail", "tenant-1", None) == 1
    assert client.key_weight("mail", "tenant-1") == 1
    client.set_key_weight("mail", "tenant-1", 4)
    assert client.set_key_weight("mail", "tenant-1", 1) == 1
    assert [k for k in ns_keys(r, ns) if b"kweight" in k] == []  # the default is no field
    for bad in (0, 1001, 2.5, "3", True):
        with pytest.raises(ValidationError, match="weight") as err:
            client.set_key_weight("mail", "tenant-1", bad)  # type: ignore[arg-type]
        assert "\n" not in str(err.value)


def test_the_async_client_takes_the_same(redis_url: str, ns: str) -> None:
    async def go() -> None:
        async with AsyncClient(redis_url, ns, shards=SHARDS) as client:
            job_id = await client.submit("t", concurrency_key="tenant-2")
            assert home(job_id, "tenant-2")
            assert (await client.get_job(job_id)).concurrency_key == "tenant-2"
            await client.set_queue_limit("q", per_key_concurrency=2)
            assert (await client.queue_limits())["q"].per_key_concurrency == 2
            assert await client.set_key_weight("q", "tenant-2", 3) == 3
            assert await client.key_weight("q", "tenant-2") == 3

    asyncio.run(go())


def test_the_cli_takes_keys_limits_and_weights(capsys: pytest.CaptureFixture[str],
                                               redis_url: str, ns: str) -> None:
    code, out, _ = sched(capsys, redis_url, ns, "submit", "t", "--concurrency-key", "tenant-1")
    assert code == 0
    job_id = out.strip()
    code, out, _ = sched(capsys, redis_url, ns, "jobs", "show", job_id)
    assert code == 0 and "concurrency key: tenant-1" in out
    code, out, _ = sched(capsys, redis_url, ns, "queues", "limit", "mail",
                         "--per-key-concurrency", "3")
    assert (code, out) == (0, "queue mail: limit 3 at once per key\n")
    code, out, _ = sched(capsys, redis_url, ns, "queues")
    assert "3 at once per key" in out
    code, out, _ = sched(capsys, redis_url, ns, "queues", "limit", "mail", "--per-key-rate",
                         "120/m")
    assert (code, out) == (0, "queue mail: limit 2/s per key\n")
    code, out, err = sched(capsys, redis_url, ns, "queues", "limit", "mail", "--per-key-rate",
                           "fast")
    assert code != 0 and "is not a rate" in err and "Traceback" not in err
    code, out, _ = sched(capsys, redis_url, ns, "queues", "weight", "mail", "tenant-1", "4")
    assert (code, out) == (0, "queue mail, key tenant-1: weight 4\n")
    code, out, _ = sched(capsys, redis_url, ns, "queues", "weight", "mail", "tenant-1")
    assert (code, out) == (0, "queue mail, key tenant-1: weight 4\n")


@pytest.mark.parametrize(("args", "message"), [
    (["submit", "t", "--concurrency-key", "has space"],
     "error: concurrency_key: 'has space' is not allowed; use 1-128 characters"),
    (["queues", "limit", "mail", "--per-key-concurrency", "0"],
     "error: Invalid value for '--per-key-concurrency'"),
    (["queues", "weight", "mail", "tenant-1", "0"], "error: Invalid value for '[WEIGHT]'"),
    (["queues", "weight", "mail", "tenant-1", "many"], "error: Invalid value for '[WEIGHT]'"),
    (["queues", "weight", "mail", "bad{key}", "2"], "error: concurrency_key: 'bad{key}'"),
])
def test_bad_cli_input_is_one_line_and_a_failing_exit(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        args: list[str], message: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, *args)
    assert code != 0 and out == ""
    assert err.startswith(message) and err.count("\n") == 1, err
    assert [k for k in ns_keys(r, ns) if b":job:" in k or b"kweight" in k] == []
