"""Stream entries that carry their job's fields (carry_entry in _lib.lua), and the claims
that read no job hash for them (claim.lua's ARGV[7], R.GRANT)."""

from __future__ import annotations

import redis

from helpers import LEASE, Shard, W, make
from scheduler import Client, RetryPolicy, SlotStatus
from scheduler.core.keys import DISPATCH_GROUP
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Code, Grant, carried, claim_items, claimed
from scheduler.worker.reader import Reader


def _entry(r: redis.Redis, s: object) -> tuple[bytes, list[bytes]]:
    reply = r.execute_command("XREADGROUP GROUP", DISPATCH_GROUP, W, "COUNT", 10, "STREAMS",
                              s.stream, ">")  # type: ignore[attr-defined]
    [[(msg, fields)]] = reply.values()  # RESP3: {stream: entries}
    return msg, fields


def test_a_submitted_entry_carries_the_fields_a_claim_needs(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, timeout=2.5, delivery="exactly_once")
    msg, fields = _entry(r, s)
    assert fields == [b"s", s.slot_id.encode(), b"t", b"t", b"p", b'{"n":1}', b"o", b"2500",
                      b"d", b"exactly_once"]
    assert carried(fields[3:10:2]) == ("t", b'{"n":1}', 2500, "exactly_once")


def test_a_payload_over_4_kib_stays_in_the_job_hash_alone(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    job_id = client.submit("t", {"blob": "x" * 5000}, queue="big")
    s = Shard(r, client, clock, job_id)
    msg, fields = _entry(r, s)
    assert fields == [b"s", s.slot_id.encode()]
    # ...and its claim reads the job: the full grant
    [grant] = s.claim([(s.queue, msg, s.slot_id)])
    assert grant[0] == Code.OK and len(grant[3]) > 5000


def test_a_carried_claim_reads_no_job_and_grants_the_attempt(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    msg, fields = _entry(r, s)
    entries = [(s.queue, msg, s.slot_id)]
    job = carried(fields[3:10:2])
    # The job hash is gone: a claim that read it would grant an empty task.
    r.rename(f"{s.prefix}job:{s.job_id}", f"{s.prefix}job:{s.job_id}:away")
    reply = s.run(scripts.claim(s.prefix, clock.now_ms(), W, LEASE, entries,
                                carried="k"))
    assert claim_items(reply) == [[Code.GRANT, 1]]
    [grant] = claimed(reply, entries, carry=[job])
    assert grant == Grant(1, "t", b'{"n":1}', 0, "at_least_once",
                         int(s.slot_id.rsplit(":")[1]))
    slot = s.slot()
    assert slot.status is SlotStatus.RUNNING and slot.attempt == 1
    r.rename(f"{s.prefix}job:{s.job_id}:away", f"{s.prefix}job:{s.job_id}")


def test_a_carried_at_most_once_claim_acks_its_entry(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, delivery="at_most_once")
    msg, fields = _entry(r, s)
    reply = s.run(scripts.claim(s.prefix, clock.now_ms(), W, LEASE,
                                [(s.queue, msg, s.slot_id)], carried="a"))
    assert claim_items(reply) == [[Code.GRANT, 1]]
    assert r.xpending(s.stream, DISPATCH_GROUP)["pending"] == 0
    assert r.zscore(f"{s.prefix}leases", s.slot_id) == clock.now_ms() + LEASE


def test_only_the_entries_marked_carried_skip_the_job_read(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    a = make(r, client, clock, queue="same")
    client.submit("t", {"n": 2}, queue="same", dedupe_key=_same_shard(client, a))
    msgs = [(m, f) for ms in r.execute_command(
        "XREADGROUP GROUP", DISPATCH_GROUP, W, "COUNT", 10, "STREAMS", a.stream, ">").values()
        for m, f in ms]
    entries = [("same", m, f[1].decode()) for m, f in msgs]
    reply = a.run(scripts.claim(a.prefix, clock.now_ms(), W, LEASE, entries,
                                carried="k-"))
    codes = [item[0] for item in claim_items(reply)]
    assert codes == [Code.GRANT, Code.OK]


def test_a_retry_dispatched_by_promote_carries_the_job_too(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock, retry=RetryPolicy(max_attempts=3, base_s=1, max_s=60, jitter=0))
    s.claim(s.read())
    now = clock.now_ms()
    s.run(scripts.fail(s.prefix, now, 1000, W, [scripts.Failed(s.slot_id, 1, "failed", "x", -1, 0.3, now,
                                                 now)]))
    clock.advance(1)
    assert s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100))[0] == 1
    msg, fields = _entry(r, s)
    assert fields[2:4] == [b"t", b"t"] and len(fields) == 10


def test_the_reader_keeps_what_entries_carry_and_reads_f_at_the_end(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    reader = Reader(None, client.keys, W, 10, 1000, clock)  # type: ignore[arg-type]
    key = b"k"
    reader.backlog.know("q", 3)
    reader._stream_of = {key: (0, "q", reader.backlog.lane("q"))}
    late = clock.now_ms() + 60_000
    reader.add([[key, [
        (b"1-0", [b"s", b"j:1", b"t", b"t", b"p", b"", b"o", b"", b"d", b""]),
        (b"2-0", [b"s", b"j:2", b"t", b"t", b"p", b"1", b"o", b"", b"d", b"", b"f",
                  str(late).encode()]),
        (b"3-0", [b"s", b"j:3", b"f", str(late).encode()]),
        (b"4-0", [b"s", b"j:4"]),
    ]]])
    assert set(reader.carried) == {"j:1", "j:2"}
    assert carried(reader.carried["j:1"]) == ("t", None, 0, "at_least_once")
    assert [entry[3] for _, _, entry in reader.early] == ["j:2", "j:3"]
    assert [e[3] for e in reader.take(10)] == ["j:1", "j:4"]


def test_an_entry_carrying_nothing_drops_what_an_older_entry_of_its_slot_carried(
        client: Client, clock: ManualClock) -> None:
    """A slot made again (a redefinition removes an occurrence dispatched ahead, and the new
    definition makes it again under the same id: redefine.lua) or dispatched again may come
    in an entry that carries nothing (a payload over 4 KiB, a retry): its claim must read the
    job, not take the fields an older entry of the slot carried."""
    reader = Reader(None, client.keys, W, 10, 1000, clock)  # type: ignore[arg-type]
    key = b"k"
    reader.backlog.know("q", 3)
    reader._stream_of = {key: (0, "q", reader.backlog.lane("q"))}
    reader.add([[key, [(b"1-0", [b"s", b"j:1", b"t", b"old", b"p", b"", b"o", b"", b"d", b""])]]])
    assert "j:1" in reader.carried
    reader.add([[key, [(b"2-0", [b"s", b"j:1"])]]])
    assert "j:1" not in reader.carried
    assert [e[2] for e in reader.take(10)] == [b"1-0", b"2-0"]


def _same_shard(client: Client, other: object) -> str:
    """A dedupe key whose job lands in `other`'s shard (one claim call is one shard's)."""
    from scheduler.core.jobspec import dedupe_job_id
    from scheduler.core.keys import shard_of

    for i in range(10_000):
        if shard_of(dedupe_job_id(f"k{i}"), client.shards) == other.shard:  # type: ignore[attr-defined]
            return f"k{i}"
    raise AssertionError("no key found")


def test_a_carried_claim_sent_again_is_granted_again_while_its_lease_lives(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    msg, _ = _entry(r, s)
    call = lambda: s.run(scripts.claim(s.prefix, clock.now_ms(), W, LEASE,  # noqa: E731
                                       [(s.queue, msg, s.slot_id)], carried="k"))
    assert claim_items(call()) == [[Code.GRANT, 1]]
    clock.advance(1)
    assert claim_items(call()) == [[Code.GRANT, 1]]
    assert s.slot().lease_until_ms == clock.now_ms() + LEASE
    clock.advance(LEASE / 1000 + 0.001)
    assert claim_items(call()) == [[Code.HELD]]
