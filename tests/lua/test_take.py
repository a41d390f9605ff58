"""take.lua on one shard: the keys' turns (the rule, alone), the per-key limit and its
permits given back by every end of an attempt, and keyed slots through the other
transitions (promote, release, reclaim, cancel, sweep)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from helpers import LEASE, W
from scheduler import Client
from scheduler.core.jobspec import placed_id
from scheduler.core.keys import Keys
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies

SHARD = 0


class Keyed:
    """Keyed jobs written by submit.lua into shard 0 of a client's namespace."""

    def __init__(self, r: redis.Redis, client: Client, clock: ManualClock, queue: str) -> None:
        self.r, self.client, self.clock, self.queue = r, client, clock, queue
        self.keys = Keys(client.namespace)
        self.prefix = self.keys.prefix(SHARD)
        self._n = 0
        self.wait_ms = -1

    def run(self, call: scripts.Call) -> Any:
        return scripts.run_sync(self.r, [call])[0]

    def submit(self, key: str, n: int = 1, priority: int | None = None,
               fire_ms: int | None = None, **fields: Any) -> list[str]:
        rows = []
        for _ in range(n):
            self._n += 1
            job_id = placed_id(f"j{self._n:05d}", SHARD, self.client.shards)
            extra: list[Any] = ["concurrency_key", key, "payload",
                                fields.get("payload", json.dumps(self._n))]
            if priority is not None:
                extra += ["priority", priority]
            for name, value in fields.items():
                if name != "payload":
                    extra += [name, value]
            rows.append((job_id, "t", self.queue, fire_ms or self.clock.now_ms(), extra))
        assert self.run(scripts.submit(self.prefix, self.clock.now_ms(), 1000, rows)) == \
            [replies.Code.OK] * n
        return [f"{row[0]}:{row[3]}" for row in rows]

    def take(self, n: int, per_key: int | None = None, worker: str = W,
             rate: float | None = None, workers: int | None = None,
             mine: dict[str, int] | None = None) -> list[str]:
        # The queue's per-key limit where take.lua reads it (set_queue_limit writes it so).
        limit = self.keys.key_limit(SHARD, self.queue)
        self.r.delete(limit)
        fields = {"concurrency": per_key, "rate": None if rate is None else repr(float(rate))}
        if any(v is not None for v in fields.values()):
            self.r.hset(limit, mapping={f: v for f, v in fields.items() if v is not None})
        reply = self.run(scripts.take(self.prefix, self.clock.now_ms(), worker, LEASE,
                                      self.queue, n, workers=workers, mine=mine))
        entries, flat, self.wait_ms, limited, keys = replies.taken(reply, self.queue)
        assert not limited and len(keys) == len(entries)
        grants = replies.claimed(flat, entries)
        assert all(g is not None for g in grants)
        return [slot for _, _, slot in entries]

    def key_of(self, slot_id: str) -> str:
        return self.r.hget(self.keys.slot(SHARD, slot_id), "concurrency_key").decode()

    def complete(self, slot_id: str) -> Any:
        attempt = int(self.r.hget(self.keys.slot(SHARD, slot_id), "attempt"))
        now = self.clock.now_ms()
        return self.run(scripts.complete(self.prefix, now, 1000, W,
                                         [scripts.Succeeded(slot_id, attempt, now, now, self.queue, "")]))

    def commit(self, slot_id: str, token: int, worker: str = W, key: str | None = None) -> Any:
        """complete.lua's codes for one keyed run presented as a worker presents it: its
        queue and "~<key>" (the key's running set fences it)."""
        now = self.clock.now_ms()
        mark = "~" + (key if key is not None else self.key_of(slot_id))
        return [int(c) for c in self.run(scripts.complete(self.prefix, now, 1000, worker, [
            scripts.Succeeded(slot_id, token, now, now, self.queue, mark)]))]

    @property
    def kruns(self) -> str:
        """The queue's running set: every key's permits, "<key> <slot id>#<attempt>"."""
        return self.keys.queue_running(SHARD, self.queue)

    def members(self, key: str) -> set[str]:
        """The key's permits, of both forms: "<slot id>#<attempt>" from the queue's running
        set (the key's prefix cut), and as the older form's set per key holds them."""
        mine = self.r.zrange(self.kruns, f"[{key} ", f"({key}!", bylex=True)
        older = self.r.zrange(self.keys.key_running(SHARD, self.queue, key), 0, -1)
        return {m.decode().split(" ", 1)[1] for m in mine} | {m.decode() for m in older}

    def old_form(self, slot_id: str, key: str, alone: bool = True) -> None:
        """Its permit as an older version's take writes it: in the key's own set, the slot
        id alone (before members named the attempt) or "<slot id>#<attempt>"."""
        attempt = int(self.r.hget(self.keys.slot(SHARD, slot_id), "attempt"))
        assert self.r.zrem(self.kruns, f"{key} {slot_id}#{attempt}") == 1
        self.r.zadd(self.keys.key_running(SHARD, self.queue, key),
                    {slot_id if alone else f"{slot_id}#{attempt}": 1})

    def ring(self) -> list[str]:
        return [k.decode() for k in self.r.lrange(self.keys.key_ring(SHARD, self.queue), 0, -1)]

    def running(self, key: str) -> int:
        return len(self.members(key))


def make_keyed(r: redis.Redis, client: Client, clock: ManualClock, queue: str) -> Keyed:
    return Keyed(r, client, clock, queue)


def test_keys_take_turns_whatever_order_their_slots_came_in(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "turns")
    k.submit("a", 6)
    k.submit("b", 2)
    k.submit("c", 1)
    assert k.ring() == ["a", "b", "c"]
    taken = [k.key_of(s) for s in k.take(3)]  # an even share of one each: one turn each
    assert taken == ["a", "b", "c"]
    taken = [k.key_of(s) for s in k.take(4)]  # c left; a's share is 2, b's last, a again
    assert taken == ["a", "a", "b", "a"]
    assert k.ring() == ["a"]  # b and c emptied: they left the ring
    # The next call goes on where this one stopped: a's last two.
    assert [k.key_of(s) for s in k.take(5)] == ["a", "a"]
    assert k.ring() == [] and not r.exists(k.keys.key_queue(SHARD, "turns", "a"))


def test_a_key_s_turn_goes_on_across_calls(r: redis.Redis, client: Client,
                                           clock: ManualClock) -> None:
    """One slot a call: the keys still alternate (the turn is the ring's, not the call's)."""
    k = make_keyed(r, client, clock, "across")
    k.submit("a", 3)
    k.submit("b", 3)
    assert [k.key_of(k.take(1)[0]) for _ in range(6)] == ["a", "b", "a", "b", "a", "b"]


def test_a_weight_is_turns_per_round(r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "weights")
    k.submit("a", 6)
    k.submit("b", 6)
    r.hset(k.keys.key_weights(SHARD, "weights"), "b", 2)
    assert [k.key_of(s) for s in k.take(3) + k.take(3) + k.take(3)] == \
        ["a", "b", "b", "a", "b", "b", "a", "b", "b"]


def test_a_turn_is_the_key_s_even_share_of_the_call(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """n over the ring's length, times the key's weight: a call over few keys takes few long
    turns; each key still gets its share of the call, and the next call goes on in turn."""
    k = make_keyed(r, client, clock, "share")
    for key in "abc":
        k.submit(key, 20)
    r.hset(k.keys.key_weights(SHARD, "share"), "b", 2)
    assert [k.key_of(s) for s in k.take(6)] == ["a"] * 2 + ["b"] * 4
    assert k.ring() == ["c", "a", "b"]
    assert [k.key_of(s) for s in k.take(9)] == ["c"] * 3 + ["a"] * 3 + ["b"] * 3
    r.lrem(k.keys.key_ring(SHARD, "share"), 0, "b")
    r.lrem(k.keys.key_ring(SHARD, "share"), 0, "c")  # one key: the whole call
    assert [k.key_of(s) for s in k.take(9)] == ["a"] * 9


def test_a_call_starts_no_more_of_one_key_than_its_spread(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """spread bounds the worker's runs of one key, those it holds (`mine`) and those started
    over all the key's turns in the call (a short ring gives a key many), so the rest of the
    key's limit is left for the other workers."""
    k = make_keyed(r, client, clock, "spread")
    k.submit("a", 10)
    k.submit("b", 1)
    first = [k.key_of(s) for s in k.take(10, per_key=6, workers=3)]
    assert sorted(first) == ["a", "a", "b"]
    assert k.take(10, per_key=6, workers=3, mine={"a": 2}) == []  # the worker holds its 2
    assert [k.key_of(s) for s in k.take(10, per_key=6, workers=3, mine={"a": 1})] == ["a"]
    assert [k.key_of(s) for s in k.take(10, per_key=6, workers=3, worker="w2")] == ["a", "a"]
    assert [k.key_of(s) for s in k.take(10, per_key=6, workers=3, worker="w3")] == ["a"]
    assert k.take(10, per_key=6, workers=3, worker="w4") == []  # a at its limit of 6
    assert k.running("a") == 6


def test_priorities_order_within_a_key(r: redis.Redis, client: Client,
                                       clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "prio")
    low = k.submit("a", 1, priority=5)
    plain = k.submit("a", 1)
    high = k.submit("a", 1, priority=1)
    assert k.take(3) == [*high, *plain, *low]


def test_the_per_key_limit_holds_and_passes_over_a_full_key(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "limit")
    k.submit("a", 5)
    k.submit("b", 1)
    first = k.take(10, per_key=2)
    assert sorted(k.key_of(s) for s in first) == ["a", "a", "b"]
    assert k.running("a") == 2
    assert k.take(10, per_key=2) == []  # a is full, b empty: nothing, and no error
    assert k.ring() == ["a"]
    # An attempt's end gives the permit back: the next take starts one more of a.
    a_runs = [s for s in first if k.key_of(s) == "a"]
    assert k.complete(a_runs[0]) == [replies.Code.OK]
    assert k.running("a") == 1
    assert [k.key_of(s) for s in k.take(10, per_key=2)] == ["a"]
    assert k.running("a") == 2


def test_a_call_s_runs_count_against_their_key_s_later_turns(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The permits of a call's runs are written at its end, in one ZADD: a key's second turn
    in the same call still counts its first turn's runs (a of 20 gets 5, then 2 of its 7)."""
    k = make_keyed(r, client, clock, "turns")
    k.submit("a", 20)
    for key in ("b", "c", "d"):
        k.submit(key, 1)
    taken = [k.key_of(s) for s in k.take(20, per_key=7)]
    assert taken.count("a") == 7 and k.running("a") == 7


def test_a_key_s_runs_are_its_own_whatever_keys_it_prefixes(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The queue's running set holds every key's runs in byte order: a key's count is its
    own range, not the runs of a key it is the start of ("a" and "ab", "a-"), as takes and
    `sched status` (key_stats.lua) read it."""
    k = make_keyed(r, client, clock, "prefixes")
    for key in ("ab", "a-"):
        k.submit(key, 2)
    assert len(k.take(10, per_key=2)) == 4
    k.submit("a", 2)
    assert [k.key_of(s) for s in k.take(10, per_key=2)] == ["a", "a"]
    [stats] = k.run(scripts.key_stats(k.prefix, 10, 100, k.queue))
    running = {key.decode(): int(n) for key, _, n, _ in stats[5]}
    assert running == {"a": 2, "ab": 2, "a-": 2}


@pytest.mark.parametrize("alone", [True, False], ids=["slot-id", "attempt"])
def test_a_permit_of_the_older_form_counts_against_the_limit(
        r: redis.Redis, client: Client, clock: ManualClock, alone: bool) -> None:
    """A run an older version's take started holds its permit in the key's own set: takes
    count it, and its end gives it back."""
    k = make_keyed(r, client, clock, "olderlimit")
    first, _ = k.submit("a", 2)
    assert k.take(1, per_key=1) == [first]
    k.old_form(first, "a", alone=alone)
    assert k.take(5, per_key=1) == []
    assert k.complete(first) == [replies.Code.OK]
    assert k.running("a") == 0
    assert len(k.take(5, per_key=1)) == 1


@pytest.mark.parametrize("per_key", [1, 2, 3])
@pytest.mark.parametrize("weight", [1, 2, 5])
def test_the_per_key_limit_holds_at_every_weight(
        r: redis.Redis, client: Client, clock: ManualClock, weight: int, per_key: int) -> None:
    """A turn starts up to the key's weight, never what would take the key past its limit:
    however many times the workers ask, and as its runs end one by one."""
    queue = f"w{weight}l{per_key}"
    k = make_keyed(r, client, clock, queue)
    k.submit("a", 12)
    k.submit("b", 12)
    r.hset(k.keys.key_weights(SHARD, queue), "a", weight)
    started = k.take(20, per_key=per_key) + k.take(20, per_key=per_key)
    assert k.running("a") == per_key and k.running("b") == per_key
    assert len(started) == 2 * per_key
    for _ in range(4):
        ended = next(s for s in started if k.key_of(s) == "a")
        started.remove(ended)
        assert k.complete(ended) == [replies.Code.OK]
        more = k.take(20, per_key=per_key)
        assert [k.key_of(s) for s in more] == ["a"]
        started += more
        assert k.running("a") == per_key


def test_a_key_at_its_limit_holds_up_only_itself(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A full key at the head of the ring is passed over: the next key's slot starts in the
    same call (no head-of-line blocking), and the full key keeps its place in the ring."""
    k = make_keyed(r, client, clock, "hol")
    k.submit("a", 3)
    assert [k.key_of(s) for s in k.take(10, per_key=1)] == ["a"]
    k.submit("b", 2)
    assert k.ring() == ["a", "b"]
    assert [k.key_of(s) for s in k.take(10, per_key=1)] == ["b"]
    assert k.ring() == ["a", "b"] and k.running("a") == k.running("b") == 1


def test_every_end_of_an_attempt_gives_the_permit_back(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """fail (retry), release, and an expired lease (reclaim) each end the attempt and give
    the key's permit back; the slot comes back to its key's queue, not to a stream."""
    k = make_keyed(r, client, clock, "ends")
    k.submit("a", 3, max_attempts=5)
    slots = k.take(3, per_key=3)
    assert k.running("a") == 3
    now = clock.now_ms()
    assert k.run(scripts.fail(k.prefix, now, 1000, W, [scripts.Failed(slots[0], 1, "failed", "boom", -1,
                                                        0.5, now, now)])) is not None
    assert k.run(scripts.release(k.prefix, now, 1000, W, [scripts.Released(slots[1], 1, now)])) == \
        [replies.Code.OK]
    assert k.running("a") == 1
    assert r.zscore(k.keys.key_queue(SHARD, "ends", "a"), slots[1]) is not None  # queued again
    assert k.ring() == ["a"]
    clock.advance((LEASE + 1) / 1000)
    k.run(scripts.reclaim(k.prefix, clock.now_ms(), 1000, 100, LEASE, []))
    assert k.running("a") == 0
    assert r.hget(k.keys.slot(SHARD, slots[2]), "status") == b"queued"


def test_a_cancelled_slot_is_dropped_from_its_key_s_queue(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "drops")
    gone, kept = k.submit("a", 2)
    client.cancel(gone)
    assert k.take(5) == [kept]
    assert k.ring() == []


def test_a_set_left_behind_is_recounted_at_the_limit(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A member whose slot is not running (a lost give-back), of either form, blocks its key
    only until the key reaches its limit: then its permits are checked against the slots.
    Another key's member is left alone."""
    k = make_keyed(r, client, clock, "recount")
    k.submit("a", 2)
    r.zadd(k.kruns, {"a ghost:1#1": 0, "ab ghost:3#1": 0, "a- ghost:4#1": 0})
    r.zadd(k.keys.key_running(SHARD, "recount", "a"), {"ghost:2": 1})
    assert len(k.take(5, per_key=2)) == 2
    assert k.running("a") == 2
    assert k.members("ab") == {"ghost:3#1"} and k.members("a-") == {"ghost:4#1"}


def test_a_keyed_slot_due_later_is_promoted_into_its_key_s_queue_never_early(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "later")
    [slot] = k.submit("a", 1, fire_ms=clock.now_ms() + 1000)
    assert k.ring() == []
    # within promote's lookahead, but a keyed slot is not taken early
    k.run(scripts.promote(k.prefix, clock.now_ms(), 1000, 100, ahead_ms=2000))
    assert k.ring() == []
    clock.advance(1)
    k.run(scripts.promote(k.prefix, clock.now_ms(), 1000, 100, ahead_ms=2000))
    assert k.ring() == ["a"]
    assert k.take(1) == [slot]


def test_the_sweep_puts_a_stranded_keyed_slot_back(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "stranded")
    [slot] = k.submit("a", 1)
    r.delete(k.keys.key_queue(SHARD, "stranded", "a"), k.keys.key_ring(SHARD, "stranded"))
    k.run(scripts.sweep(k.prefix, clock.now_ms(), 1000, [slot.encode()]))
    assert k.ring() == ["a"]
    assert k.take(1) == [slot]


def test_a_per_key_rate_holds_each_key_to_its_own_bucket(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """10/s per key: a bucket of one token each, refilled every 100 ms; a key out of tokens
    is passed over, the others go on, and the reply says when the next token comes."""
    k = make_keyed(r, client, clock, "rate")
    k.submit("a", 5)
    k.submit("b", 5)
    assert sorted(k.key_of(s) for s in k.take(10, rate=10)) == ["a", "b"]
    assert k.take(10, rate=10) == [] and k.wait_ms == 100
    clock.advance(0.05)
    assert k.take(10, rate=10) == [] and k.wait_ms == 50
    clock.advance(0.05)
    assert sorted(k.key_of(s) for s in k.take(10, rate=10)) == ["a", "b"]
    clock.advance(1)  # the bucket holds a tenth of a second's worth, however long idle
    assert len(k.take(10, rate=10)) == 2


def test_a_key_s_turn_takes_tokens_only_for_the_slots_it_has(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """50/s per key: a bucket of five tokens. A key of weight 5 with one slot queued takes
    one token for it, not its whole room: its next four start at once."""
    k = make_keyed(r, client, clock, "tokens")
    r.hset(k.keys.key_weights(SHARD, "tokens"), "a", 5)
    k.submit("a", 1)
    assert len(k.take(10, rate=50)) == 1
    k.submit("a", 5)
    assert len(k.take(10, rate=50)) == 4 and k.wait_ms == 20


def test_the_lane_cleaner_drops_an_idle_keyed_queue_only_once_its_keys_hold_nothing(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "idle")
    k.submit("a", 2)
    kqueues = k.keys.keyed_queues(SHARD)
    clock.advance(60)
    later = clock.now_ms()
    cleaned = replies.Cleaned.decode(k.run(scripts.clean_lanes(k.prefix, later, later - 1, 10)))
    assert cleaned.keyed_removed == 0 and r.zscore(kqueues, "idle") == later  # kept: queued
    k.take(2)
    clock.advance(60)
    later = clock.now_ms()
    cleaned = replies.Cleaned.decode(k.run(scripts.clean_lanes(k.prefix, later, later - 1, 10)))
    assert cleaned.keyed_removed == 1 and r.zscore(kqueues, "idle") is None
    k.submit("a", 1)  # its next keyed slot lists it again
    assert r.zscore(kqueues, "idle") is not None


def test_a_take_sent_again_is_granted_its_slots_again(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A worker whose take's reply was lost asks again (`again`): the keyed slots running
    under it whose lease lives come back with the same attempt and a fresh lease; another
    worker's do not, nor one whose lease ran out (the reclaimer's)."""
    k = make_keyed(r, client, clock, "again")
    k.submit("a", 3)
    first = k.take(2)
    other = k.take(1, worker="worker-2")
    clock.advance(1)
    reply = k.run(scripts.take(k.prefix, clock.now_ms(), W, LEASE, "again", 5, again=True))
    entries, flat, _, _, _ = replies.taken(reply, "again")
    assert [slot for _, _, slot in entries] == first
    assert [g.token for g in replies.claimed(flat, entries)] == [1, 1]  # type: ignore[union-attr]  # the same attempt
    assert int(r.hget(k.keys.slot(SHARD, first[0]), "lease_until")) == clock.now_ms() + LEASE
    assert int(r.zscore(k.keys.leases(SHARD), first[0])) == clock.now_ms() + LEASE
    assert other[0] not in [slot for _, _, slot in entries]
    clock.advance(LEASE / 1000 + 1)
    late = replies.taken(k.run(scripts.take(k.prefix, clock.now_ms(), W, LEASE, "again", 5,
                                            again=True)), "again")
    assert late[0] == []


def _grants(k: Keyed, n: int) -> list[replies.Grant]:
    reply = k.run(scripts.take(k.prefix, k.clock.now_ms(), W, LEASE, k.queue, n))
    entries, flat, _, _, _ = replies.taken(reply, k.queue)
    return [g for g in replies.claimed(flat, entries) if isinstance(g, replies.Grant)]


def test_a_keyed_grant_reads_the_job_s_fields_from_its_slot(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """submit.lua copies the fields a take grants into the slot (_lib.lua's grant_copy): the take reads
    no job hash, and empties the copy as it grants."""
    k = make_keyed(r, client, clock, "carry")
    [slot] = k.submit("a", 1, timeout_ms=2500, delivery="exactly_once",
                      payload='{"at":"12:00"}')
    job_key = f"{k.prefix}job:{slot.rsplit(':', 1)[0]}"
    r.rename(job_key, job_key + ":away")  # a take that read the job would grant nothing
    [grant] = _grants(k, 1)
    assert (grant.task, grant.payload, grant.timeout_ms, grant.delivery) == \
        ("t", b'{"at":"12:00"}', 2500, "exactly_once")
    assert r.hget(k.keys.slot(SHARD, slot), "grant") == b""  # emptied


def test_a_slot_queued_without_the_copy_reads_its_job(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A slot queued before slots carried the job's fields (or by a path that copies none)."""
    k = make_keyed(r, client, clock, "old")
    [slot] = k.submit("a", 1)
    r.hdel(k.keys.slot(SHARD, slot), "grant")
    r.hset(f"{k.prefix}job:{slot.rsplit(':', 1)[0]}", "payload", '"from the job"')
    [grant] = _grants(k, 1)
    assert (grant.task, grant.payload, grant.delivery) == \
        ("t", b'"from the job"', "at_least_once")


@pytest.mark.parametrize("payload", [json.dumps("x" * 52), json.dumps("x" * 5000)])
def test_a_copy_past_64_bytes_is_not_made(
        r: redis.Redis, client: Client, clock: ManualClock, payload: str) -> None:
    """Its slot hash would stay a hash table (past Redis's hash-max-listpack-value): the
    take reads the job. 54 bytes of payload with the timeout and delivery pass 64."""
    k = make_keyed(r, client, clock, "big")
    [slot] = k.submit("a", 1, payload=payload, timeout_ms=2500, delivery="exactly_once")
    assert r.hget(k.keys.slot(SHARD, slot), "grant") is None
    assert r.object("encoding", k.keys.slot(SHARD, slot)) == b"listpack"
    [grant] = _grants(k, 1)
    assert (grant.payload, grant.timeout_ms) == (payload.encode(), 2500)


def test_a_keyed_grant_is_its_job_as_queued_and_a_slot_queued_again_reads_the_job(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """As claim.lua's for a carried entry: a change to the job after the slot was queued (a
    redefinition) is not granted; once the run ends and its slot is queued again (here a
    release), the next take grants the job as it is then."""
    k = make_keyed(r, client, clock, "redefined")
    [slot] = k.submit("a", 1)
    job_key = f"{k.prefix}job:{slot.rsplit(':', 1)[0]}"
    r.hset(job_key, "payload", '"new"')
    [grant] = _grants(k, 1)
    assert grant.payload == b"1"
    now = clock.now_ms()
    assert k.run(scripts.release(k.prefix, now, 1000, W, [scripts.Released(slot, 1, now)])) == \
        [replies.Code.OK]
    [grant] = _grants(k, 1)
    assert grant.payload == b'"new"' and grant.token == 2


def test_a_promoted_keyed_slot_carries_its_job_s_fields(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "promoted")
    [slot] = k.submit("a", 1, fire_ms=clock.now_ms() + 1000, timeout_ms=700)
    clock.advance(1)
    k.run(scripts.promote(k.prefix, clock.now_ms(), 1000, 100))
    job_key = f"{k.prefix}job:{slot.rsplit(':', 1)[0]}"
    r.rename(job_key, job_key + ":away")
    [grant] = _grants(k, 1)
    assert (grant.task, grant.payload, grant.timeout_ms) == ("t", b"1", 700)


def test_keys_that_took_their_whole_room_stay_in_the_ring_while_they_hold_slots(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A round's keys are checked at its end (one EXISTS): the one whose turn emptied its
    queue exactly leaves the ring, the others stay, in their order."""
    k = make_keyed(r, client, clock, "room")
    k.submit("a", 2)
    k.submit("b", 1)
    k.submit("c", 2)
    assert [k.key_of(s) for s in k.take(3)] == ["a", "b", "c"]
    assert k.ring() == ["a", "c"]
    assert [k.key_of(s) for s in k.take(2)] == ["a", "c"]
    assert k.ring() == []


def test_a_keyed_commit_is_fenced_by_its_member_without_a_read(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A run's member of its key's running set names its attempt; the commit removes it and,
    found, commits the slot without reading its hash (one edited to another attempt by hand
    still commits: nothing read it), its permit and lease given back."""
    k = make_keyed(r, client, clock, "fence")
    slot, other = k.submit("a", 2)
    assert k.take(2) == [slot, other]
    assert k.members("a") == {f"{slot}#1", f"{other}#1"}
    r.hset(k.keys.slot(SHARD, slot), "attempt", "9")
    assert k.commit(slot, 1) == [replies.Code.OK]
    assert r.hget(k.keys.slot(SHARD, slot), "status") == b"succeeded"
    assert k.members("a") == {f"{other}#1"} and k.running("a") == 1
    assert r.zscore(k.keys.leases(SHARD), slot) is None
    assert r.zscore(k.keys.leases(SHARD), other) is not None


def test_a_keyed_commit_whose_member_is_missing_reads_its_slot(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """No member under the run's name: the slot hash decides, as for a run without an entry.
    Running under the token, it commits; and a key whose batch lacks one member checks each
    of its slots (the one found was removed by the commit, and commits)."""
    k = make_keyed(r, client, clock, "unfenced")
    slot, other = k.submit("a", 2)
    k.take(2)
    assert r.zrem(k.kruns, f"a {slot}#1") == 1
    r.hset(k.keys.slot(SHARD, other), "attempt", "9")  # read: refused
    now = clock.now_ms()
    codes = k.run(scripts.complete(k.prefix, now, 1000, W, [
        scripts.Succeeded(s, 1, now, now, k.queue, "~a") for s in (slot, other)]))
    assert codes == [replies.Code.OK, replies.Code.STALE]
    assert r.hget(k.keys.slot(SHARD, slot), "status") == b"succeeded"
    assert r.hget(k.keys.slot(SHARD, other), "status") == b"running"
    assert r.zscore(k.keys.leases(SHARD), slot) is None


def test_a_stale_keyed_commit_is_refused_and_leaves_the_new_attempt_s_permit(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The slot's lease ran out, the reclaimer queued it again and it was taken under attempt
    2: the late commit of attempt 1 finds no member of its own, is refused, and attempt 2's
    member (its permit) stays."""
    k = make_keyed(r, client, clock, "stale")
    [slot] = k.submit("a", 1)
    k.take(1, per_key=1)
    clock.advance((LEASE + 1) / 1000)
    k.run(scripts.reclaim(k.prefix, clock.now_ms(), 1000, 100, LEASE, []))
    assert k.take(1, per_key=1, worker="worker-2") == [slot]
    assert k.members("a") == {f"{slot}#2"}
    assert k.commit(slot, 1) == [replies.Code.STALE]
    assert r.hget(k.keys.slot(SHARD, slot), "status") == b"running"
    assert k.members("a") == {f"{slot}#2"} and k.running("a") == 1
    assert k.commit(slot, 2, worker="worker-2") == [replies.Code.OK]
    assert k.running("a") == 0


def test_a_take_of_a_later_attempt_drops_the_member_an_older_reclaim_left(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """An older version's reclaim removes only a permit of the older form: attempt 1's
    member stays behind (and an even older one's leaves `<slot>#1` in the key's own set,
    which an older worker's commit fences by). The take of attempt 2 removes both, so attempt
    1's late commit finds no member, reads the slot and is refused: never a second success
    beside attempt 2's."""
    k = make_keyed(r, client, clock, "leftover")
    [slot] = k.submit("a", 1)
    k.take(1, per_key=2)
    clock.advance((LEASE + 1) / 1000)
    k.run(scripts.reclaim(k.prefix, clock.now_ms(), 1000, 100, LEASE, []))
    r.zadd(k.kruns, {f"a {slot}#1": 0})  # what an older reclaim leaves
    r.zadd(f"{k.prefix}krun:{k.queue}:a", {f"{slot}#1": 1})
    # (room under the limit: a key at its limit would drop both in its recount)
    assert k.take(1, per_key=3, worker="worker-2") == [slot]
    assert r.zscore(f"{k.prefix}krun:{k.queue}:a", f"{slot}#1") is None  # an older commit's
    assert k.members("a") == {f"{slot}#2"}
    assert k.commit(slot, 1) == [replies.Code.STALE]
    assert k.commit(slot, 2, worker="worker-2") == [replies.Code.OK]
    assert r.hget(k.keys.slot(SHARD, slot), "attempt") == b"2"


def test_a_keyed_commit_sent_again_is_a_repeat(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The first reply was lost: the commit sent again finds its member gone, reads the slot
    and answers "already"; another worker's is refused."""
    k = make_keyed(r, client, clock, "repeat")
    [slot] = k.submit("a", 1)
    k.take(1)
    assert k.commit(slot, 1) == [replies.Code.OK]
    assert k.commit(slot, 1) == [replies.Code.REPEAT]
    assert k.commit(slot, 1, worker="other") == [replies.Code.STALE]
    kinds = [f[b"type"] for _, f in r.xrange(k.keys.events(SHARD))]
    assert kinds.count(b"succeeded") == 1 and kinds.count(b"refused") == 1


def test_a_member_of_the_older_form_leaves_with_its_run(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """Members written before they named the attempt (the slot id alone): the commit does
    not find the run's name, reads the slot, commits it and removes the old member; a
    release removes one too, and the sweep adds no second member beside one."""
    k = make_keyed(r, client, clock, "older")
    done, released = k.submit("a", 2)
    k.take(2)
    k.old_form(done, "a")
    k.old_form(released, "a")
    k.run(scripts.sweep(k.prefix, clock.now_ms(), 1000, [done.encode(), released.encode()]))
    assert k.members("a") == {done, released}
    assert k.commit(done, 1) == [replies.Code.OK]
    assert r.hget(k.keys.slot(SHARD, done), "status") == b"succeeded"
    assert k.members("a") == {released}
    now = clock.now_ms()
    assert k.run(scripts.release(k.prefix, now, 1000, W, [scripts.Released(released, 1, now)])) \
        == [replies.Code.OK]
    assert k.running("a") == 0


def test_the_sweep_gives_a_live_run_its_member_back(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    k = make_keyed(r, client, clock, "back")
    [slot] = k.submit("a", 1)
    k.take(1)
    r.delete(k.kruns)
    k.run(scripts.sweep(k.prefix, clock.now_ms(), 1000, [slot.encode()]))
    assert k.members("a") == {f"{slot}#1"}
    assert k.commit(slot, 1) == [replies.Code.OK] and k.running("a") == 0


def test_the_recount_drops_a_member_of_another_attempt(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A member naming an attempt the slot no longer runs (a lost give-back) is dropped
    when its key reaches its limit, though the slot runs again."""
    k = make_keyed(r, client, clock, "attempts")
    first, second = k.submit("a", 2)
    assert k.take(1, per_key=2) == [first]
    r.zadd(k.kruns, {f"a {first}#7": 0})
    assert k.take(5, per_key=2) == [second]
    assert k.members("a") == {f"{first}#1", f"{second}#1"}


def test_a_restored_running_slot_leaves_no_member_of_its_lost_attempt(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """A running slot's hash lost and restored from history: its attempt ends "lost", and a
    member of it left in its key's running set goes, so the lost attempt's late commit is
    refused rather than let through the fence."""
    k = make_keyed(r, client, clock, "restored")
    [slot] = k.submit("a", 1)
    k.take(1)
    slot_key = k.keys.slot(SHARD, slot)
    fields = [str(x.decode() if isinstance(x, bytes) else x)
              for kv in r.hgetall(slot_key).items() for x in kv]
    r.delete(slot_key)
    k.run(scripts.restore(k.prefix, clock.now_ms(), 1000, [], [(slot, fields)]))
    assert r.hget(slot_key, "status") == b"queued"
    assert k.members("a") == set()
    assert k.commit(slot, 1) == [replies.Code.STALE]


def test_a_take_s_entries_carry_what_fences_their_commit(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    """The worker commits a run with its entry's lane and msg (execution.py): for a keyed
    run, its queue and the mark and key that complete.lua fences by (a hash edited to
    another attempt still commits: the fence, not a read, let it through)."""
    k = make_keyed(r, client, clock, "marked")
    k.submit("a", 1)
    reply = k.run(scripts.take(k.prefix, clock.now_ms(), W, LEASE, k.queue, 1))
    [(lane, msg, slot)] = replies.taken(reply, k.queue)[0]
    assert (lane, msg) == (k.queue, b"~a")
    r.hset(k.keys.slot(SHARD, slot), "attempt", "9")
    now = clock.now_ms()
    assert k.run(scripts.complete(k.prefix, now, 1000, W, [
        scripts.Succeeded(slot, 1, now, now, lane, msg)])) == [replies.Code.OK]
    assert k.running("a") == 0
