"""heartbeat.lua writes a run's progress (ctx.progress) only under the token that holds the
slot: a stale attempt's report is dropped, and each report lands on its own slot."""

from __future__ import annotations

import redis

from helpers import Shard, W, make
from scheduler import Client, Progress
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Code

LEASE = 30_000


def test_a_stale_attempts_progress_is_not_written(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    s = make(r, client, clock)
    s.hand_over("w2")  # attempt 2 holds it now
    clock.advance(10)
    at = clock.now_ms()
    assert s.run(scripts.heartbeat(s.prefix, at, LEASE, W, [(s.slot_id, 1)],
                                   progress=[(0, 0.9, "old attempt", at)])) == [Code.STALE]
    assert s.slot().progress is None
    assert s.run(scripts.heartbeat(s.prefix, at, LEASE, "w2", [(s.slot_id, 2)],
                                   progress=[(0, 0.25, "a quarter", at - 5)])) == [Code.OK]
    assert s.slot().progress == Progress(0.25, "a quarter", at - 5, 2)
    assert client.progress(s.job_id) == client.progress(s.slot_id) == s.slot().progress


def test_each_report_lands_on_its_own_slot_and_none_costs_no_argument(
        r: redis.Redis, client: Client, clock: ManualClock) -> None:
    seen: dict[str, Shard] = {}
    while True:  # two slots of one shard: one heartbeat call carries both
        s = make(r, client, clock)
        if s.prefix in seen:
            a, b = seen[s.prefix], s
            break
        seen[s.prefix] = s
    a.claim(a.read())
    b.claim(b.read())
    at = clock.now_ms()
    items = [(a.slot_id, 1), (b.slot_id, 1), (b.slot_id, 7)]
    assert len(scripts.heartbeat(a.prefix, at, LEASE, W, items).args) == 5 + 3 * 3
    assert a.run(scripts.heartbeat(a.prefix, at, LEASE, W, items,
                                   progress=[(1, 1.0, "", at), (2, 0.1, "stale", at)])) == [
        Code.OK, Code.OK, Code.STALE]
    assert a.slot().progress is None
    assert b.slot().progress == Progress(1.0, None, at, 1)
