"""A retry policy end to end on the real scripts: delay(n) = min(max_s, base_s * 2**(n-1)) *
(1 - jitter*u), u in [0, 1), n the failures so far (models.RetryPolicy, lua/fail.lua).

A real worker whose handler always fails and a real scheduler node run on one injected clock
(ManualClock), which the test moves to each retry's due time: a cap of 300 s is reached in a
second of wall time. Each delay is read from Redis, never from a wall clock: the failed
attempt's `finished_ms` (the time the worker stamped and fail.lua was given) against the
slot's `available_ms` and its score in the shard's `due` set."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
import redis

from helpers import W, make
from scheduler import Client, Registry, RetryPolicy, SlotStatus
from scheduler.core.keys import shard_of
from scheduler.core.models import Slot
from scheduler.node.node import NodeConfig, SchedulerNode
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts.replies import Code
from scheduler.worker.worker import Worker, WorkerConfig

# base 1 s doubles past the 300 s cap at the 10th failure: 1, 2, 4 ... 256, then 300, 300
EXACT = RetryPolicy(base_s=1, max_s=300, max_attempts=12, jitter=0)
JITTERED = RetryPolicy(base_s=1, max_s=300, max_attempts=12, jitter=0.5)
FULL_JITTER = RetryPolicy(base_s=0.5, max_s=20, max_attempts=10, jitter=1.0)


def bounds_ms(policy: RetryPolicy, n: int) -> tuple[int, int]:
    """The delay after n failures that fail.lua may give, in whole ms (it floors): from
    u -> 1 (exclusive) to u = 0."""
    raw = min(policy.max_s, policy.base_s * 2 ** (n - 1)) * 1000
    return math.floor(raw * (1 - policy.jitter)), math.floor(raw)


def _always_fails() -> Registry:
    registry = Registry()

    @registry.task("always.fails")
    async def fails(ctx: Any, payload: Any) -> None:
        raise RuntimeError(f"attempt {ctx.attempt} fails")

    return registry


async def _run(redis_url: str, ns: str, client: Client, clock: ManualClock,
               ids: dict[str, RetryPolicy]) -> dict[str, list[int]]:
    """Every job's delays (ms), one per retry, read as each retry is scheduled; the clock is
    then moved to the latest due time, and the next attempts run."""
    conn = async_redis(redis_url)
    worker = Worker(conn, _always_fails(), namespace=ns, clock=clock,
                    config=WorkerConfig(block_ms=20, lease_s=30))
    # Promoted at its time, not ahead of it: a held entry would wait for the next move.
    node = SchedulerNode(conn, namespace=ns, clock=clock,
                         config=NodeConfig(lease_s=30, promote_ahead_s=0, shard_lease_s=3600))
    tasks = [asyncio.create_task(s.run()) for s in (worker, node)]
    delays: dict[str, list[int]] = {j: [] for j in ids}
    r = client.redis
    try:
        while True:
            slots = await _after_next_failure(client, ids, delays, tasks)
            due: list[int] = []
            for job_id, slot in slots.items():
                if slot.status is SlotStatus.DEAD:
                    continue
                failed = slot.attempts[-1]
                score = r.zscore(client.keys.due(shard_of(job_id, client.shards)), slot.slot_id)
                assert score == slot.available_ms, (slot, score)
                assert failed.finished_ms is not None and slot.available_ms is not None
                delays[job_id].append(slot.available_ms - failed.finished_ms)
                due.append(slot.available_ms)
            if not due:
                return delays
            clock.ms = max(due)
    finally:
        worker.stop()
        node.stop()
        await asyncio.gather(*tasks)
        await conn.aclose()


async def _after_next_failure(client: Client, ids: dict[str, RetryPolicy],
                              delays: dict[str, list[int]],
                              tasks: list[asyncio.Task[None]]) -> dict[str, Slot]:
    """Each job's slot once its attempt (one more than the delays read) has failed: scheduled
    for the next, or dead."""
    deadline = time.monotonic() + 20
    while True:
        slots = {j: client.slots(j)[0] for j in ids}
        if all(s.status is SlotStatus.DEAD or (s.status is SlotStatus.SCHEDULED
                                               and s.attempt == len(delays[j]) + 1)
               for j, s in slots.items()):
            return slots
        for t in tasks:
            if t.done():
                t.result()
        assert time.monotonic() < deadline, f"no attempt ended: {slots}"
        await asyncio.sleep(0.01)


def test_each_retry_waits_what_the_policy_says_capped_and_jittered(
        redis_url: str, ns: str, client: Client, clock: ManualClock) -> None:
    policies = {"exact": EXACT, "jittered": JITTERED, "full": FULL_JITTER}
    ids = {client.submit("always.fails", {}, retry=p): p for p in policies.values()}
    delays = asyncio.run(_run(redis_url, ns, client, clock, ids))
    for job_id, policy in ids.items():
        got = delays[job_id]
        assert len(got) == policy.max_attempts - 1, got
        slot = client.slots(job_id)[0]
        assert slot.status is SlotStatus.DEAD and slot.attempt == policy.max_attempts
        for n, delay in enumerate(got, start=1):
            lo, hi = bounds_ms(policy, n)
            assert lo <= delay <= hi, (f"{policy}: the delay after {n} failure(s) is {delay} "
                                       f"ms, outside [{lo}, {hi}]: {got}")
    # Zero jitter is exact, and the cap holds from the 10th failure on.
    assert delays[[j for j, p in ids.items() if p is EXACT][0]] == [
        1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000, 300_000]
    # Jitter only ever shortens a delay, and it is applied (11 draws all at u = 0: never).
    jittered = delays[[j for j, p in ids.items() if p is JITTERED][0]]
    assert any(d < bounds_ms(JITTERED, n)[1] for n, d in enumerate(jittered, start=1))


@pytest.mark.parametrize("u", [0.0, 0.25, 0.999])
def test_fail_lua_applies_the_formula_for_every_failure(
        r: redis.Redis, client: Client, clock: ManualClock, u: float) -> None:
    """The script alone, with the u the worker would draw given: each delay is the formula's
    to the ms, past the cap too."""
    policy = RetryPolicy(base_s=1, max_s=300, max_attempts=14, jitter=0.4)
    s = make(r, client, clock, retry=policy)
    for n in range(1, policy.max_attempts):
        [reply] = s.claim(s.read())
        now = clock.now_ms()
        assert s.run(scripts.fail(s.prefix, now, 1000, W, [
            scripts.Failed(s.slot_id, reply[1], "failed", "boom", -1, u, now, now)])) == [Code.RETRY]
        expected = math.floor(min(300, 2 ** (n - 1)) * 1000 * (1 - 0.4 * u))
        assert s.slot().available_ms - now == expected, (n, u)
        clock.ms = s.slot().available_ms
        s.run(scripts.promote(s.prefix, clock.now_ms(), 1000, 100))
