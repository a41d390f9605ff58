"""The worker end to end in-process: exactly-once effects, failures, timeouts, the
concurrency limit, and tasks it does not know."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest

from conftest import is_cluster_url
from helpers import run_until, statuses
from scheduler import Cancel, Client, Context, Registry, Retry, RetryPolicy, SlotStatus
from scheduler.redis.clients import async_redis
from scheduler.worker.worker import Worker, WorkerConfig


@pytest.mark.parametrize("protocol", [3, 2])
def test_every_job_runs_once_and_succeeds(redis_url: str, ns: str, protocol: int) -> None:
    """With either reply protocol: the worker reads its streams' raw replies."""
    registry = Registry()
    effects: Counter[str] = Counter()

    @registry.task("noop")
    async def noop(ctx: Context, payload: Any) -> None:
        effects[ctx.slot_id] += 1

    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "noop", "payload": i} for i in range(3000)])
        asyncio.run(run_until(f"{redis_url}?protocol={protocol}", ns, registry,
                              lambda: len(effects) == 3000, concurrency=200))
        assert statuses(client, ids) == {"succeeded": 3000}
    assert set(effects.values()) == {1}


def test_handlers_get_their_context_and_sync_handlers_run_in_threads(
        redis_url: str, ns: str) -> None:
    registry = Registry()
    seen: list[tuple[Any, ...]] = []

    @registry.task("sync")
    def sync(ctx: Context, payload: Any) -> None:
        seen.append((ctx.job_id, ctx.attempt, ctx.idempotency_key, payload,
                     threading.current_thread().name))

    with Client(redis_url, ns) as client:
        job_id = client.submit("sync", {"a": 1})
        asyncio.run(run_until(redis_url, ns, registry, lambda: bool(seen)))
        [slot] = client.slots(job_id)
    assert seen[0][:4] == (job_id, 1, slot.slot_id, {"a": 1})
    assert seen[0][4].startswith("sched-handler")


@pytest.mark.parametrize("pipelines,batch", [(2, 500), (1, 3), (3, 3)])
def test_concurrency_limit_holds(redis_url: str, ns: str, pipelines: int, batch: int) -> None:
    """Claims in flight at once (pipelines) count against the limit before they return."""
    registry = Registry()
    now, peak, finished = [0], [0], [0]

    @registry.task("slow")
    async def slow(ctx: Context, payload: Any) -> None:
        now[0] += 1
        peak[0] = max(peak[0], now[0])
        await asyncio.sleep(0.02)
        now[0] -= 1
        finished[0] += 1

    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "slow"} for _ in range(200)])
        asyncio.run(run_until(redis_url, ns, registry, lambda: finished[0] == 200,
                              concurrency=7, pipelines=pipelines, batch=batch))
    assert peak[0] == 7


def test_unknown_task_fails_the_slot_with_a_clear_error(redis_url: str, ns: str) -> None:
    registry = Registry()

    @registry.task("known")
    async def known(ctx: Context, payload: Any) -> None:
        pass

    with Client(redis_url, ns) as client:
        job_id = client.submit("missing.task", retry=RetryPolicy(max_attempts=1))
        ok = client.submit("known")
        asyncio.run(run_until(redis_url, ns, registry, lambda: (
            client.slots(job_id)[0].status is SlotStatus.DEAD
            and client.slots(ok)[0].status is SlotStatus.SUCCEEDED)))
        [slot] = client.slots(job_id)
    assert "unknown task 'missing.task'" in (slot.attempts[0].error or "")
    assert "known" in (slot.attempts[0].error or "")


def test_distinct_unknown_task_names_cost_a_worker_no_memory_each(redis_url: str,
                                                                   ns: str) -> None:
    """Task names come from Redis: every distinct unknown name a running worker sees ends
    its slot as one unknown name does, and leaves nothing behind in the worker (its run
    metrics were kept per name, for good)."""
    registry = Registry()

    @registry.task("known")
    async def known(ctx: Context, payload: Any) -> None:
        pass

    n = 300
    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": f"missing.{i}", "retry": RetryPolicy(max_attempts=1)}
                                  for i in range(n)])
        ok = client.submit("known")
        worker = asyncio.run(run_until(redis_url, ns, registry, lambda: (
            client.slots(ok)[0].status is SlotStatus.SUCCEEDED
            and client.status().dead_letter_size == n)))
        assert statuses(client, ids) == {"dead": n}
        errors = [s.attempts[0].error or "" for job in ids[:: n // 10]
                  for s in client.slots(job)]
    assert all(e.startswith("LookupError: unknown task 'missing.") for e in errors), errors
    # One entry for the known task and one shared by every unknown name, per queue.
    assert sorted(worker.run_metrics) == [("default", "(unknown)"), ("default", "known")]
    assert worker.run_metrics[("default", "(unknown)")].failed == n  # each run still counted
    assert worker.run_metrics[("default", "known")].ok == 1
    exported = generate_latest(REGISTRY).decode()
    assert 'task="(unknown)"' in exported and 'task="missing.' not in exported
    assert len(worker.claims._by_lane) <= 2


def test_failures_retry_through_the_due_set_then_dead_letter(redis_url: str, ns: str) -> None:
    registry = Registry()
    calls: Counter[str] = Counter()

    @registry.task("flaky")
    async def flaky(ctx: Context, payload: Any) -> None:
        calls[ctx.slot_id] += 1
        if ctx.attempt < payload["succeed_on"]:
            raise RuntimeError(f"attempt {ctx.attempt} fails")

    policy = RetryPolicy(max_attempts=3, base_s=0.05, max_s=1, jitter=0)
    with Client(redis_url, ns) as client:
        good = client.submit("flaky", {"succeed_on": 3}, retry=policy)
        bad = client.submit("flaky", {"succeed_on": 9}, retry=policy)

        def settled() -> bool:
            return {s.status for i in (good, bad) for s in client.slots(i)} == {
                SlotStatus.SUCCEEDED, SlotStatus.DEAD}

        asyncio.run(run_until(redis_url, ns, registry, settled, node=True))
        [g], [b] = client.slots(good), client.slots(bad)
    assert [a.outcome for a in g.attempts] == ["failed", "failed", "succeeded"]
    assert [a.error for a in b.attempts] == [
        f"RuntimeError: attempt {n} fails (at test_worker.py:{_line(flaky)})" for n in (1, 2, 3)]


def _line(fn: Callable[..., Any]) -> int:
    return fn.__code__.co_firstlineno + 4


def test_timeouts_retry_and_cancel_raised_by_handlers(redis_url: str, ns: str) -> None:
    registry = Registry()

    @registry.task("hang")
    async def hang(ctx: Context, payload: Any) -> None:
        await asyncio.sleep(3600)

    @registry.task("steer")
    async def steer(ctx: Context, payload: Any) -> None:
        if payload == "cancel":
            raise Cancel("not needed any more")
        if ctx.attempt == 1:
            raise Retry(after=0.05, reason="upstream busy")

    with Client(redis_url, ns) as client:
        hung = client.submit("hang", timeout=0.2, retry=RetryPolicy(max_attempts=2, base_s=0.05))
        retried = client.submit("steer", "retry")
        cancelled = client.submit("steer", "cancel")
        ids = [hung, retried, cancelled]
        asyncio.run(run_until(redis_url, ns, registry, lambda: statuses(client, ids) == {
            "dead": 1, "succeeded": 1, "cancelled": 1}, node=True))
        [h], [r], [c] = (client.slots(i) for i in ids)
    assert [a.outcome for a in h.attempts] == ["timed_out", "timed_out"]
    assert h.attempts[0].error == "timed out after 0.2s"
    assert [a.outcome for a in r.attempts] == ["retried", "succeeded"]  # asked, not failed
    assert r.attempts[0].error == "upstream busy"
    assert c.status is SlotStatus.CANCELLED and c.attempts[0].error == "not needed any more"


def test_a_handler_that_ignores_its_cancellation_is_given_up_on(redis_url: str,
                                                                 ns: str) -> None:
    """A handler that catches CancelledError and goes on would hold its slot `running`, its
    lease renewed by every heartbeat, forever. Once it has not stopped lease/8 after its
    timeout the worker gives up on it: the attempt ends `timed_out`, the slot moves on."""
    registry = Registry()
    stubborn_runs = []

    @registry.task("stubborn")
    async def stubborn(ctx: Context, payload: Any) -> None:
        stubborn_runs.append(ctx.attempt)
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # a bug in a handler: the worker must outlive it

    with Client(redis_url, ns) as client:
        job = client.submit("stubborn", timeout=0.1, retry=RetryPolicy(max_attempts=2,
                                                                         base_s=0.05))
        worker = asyncio.run(run_until(redis_url, ns, registry,
                                       lambda: statuses(client, [job]) == {"dead": 1},
                                       node=True, lease_s=2, timeout=20))
        [slot] = client.slots(job)
    assert [a.outcome for a in slot.attempts] == ["timed_out", "timed_out"]
    assert slot.attempts[0].error == ("timed out after 0.1s; the handler ignored its "
                                      "cancellation")
    assert stubborn_runs == [1, 2] and not worker.running


def test_a_worker_with_nothing_to_do_stops_promptly(redis_url: str, ns: str) -> None:
    async def main() -> float:
        client = async_redis(redis_url)
        worker = Worker(client, Registry(), namespace=ns, config=WorkerConfig(block_ms=200))
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        t = time.monotonic()
        worker.stop()
        worker.stop()  # idempotent
        await task
        await client.aclose()
        return time.monotonic() - t
    assert asyncio.run(main()) < 1.5


@pytest.mark.parametrize("delivery", ["at_most_once", "exactly_once"])
def test_other_delivery_modes_run_once(redis_url: str, ns: str, delivery: str) -> None:
    registry = Registry()
    seen: Counter[str] = Counter()

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        seen[ctx.idempotency_key] += 1

    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "t", "delivery": delivery} for _ in range(50)])
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(seen) == 50))
        assert statuses(client, ids) == {"succeeded": 50}
    assert set(seen.values()) == {1}


def test_ctx_once_says_yes_once_per_name(redis_url: str, ns: str) -> None:
    """The same attempt asking twice is told no the second time (a retry after a lost reply
    is the worker's business, not the handler's)."""
    registry = Registry()
    answers: list[bool] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        answers.extend([await ctx.once("charge"), await ctx.once("charge"),
                        await ctx.once("email")])

    with Client(redis_url, ns) as client:
        client.submit("t", delivery="exactly_once")
        asyncio.run(run_until(redis_url, ns, registry, lambda: len(answers) == 3))
    assert answers == [True, False, True]


def test_an_at_most_once_run_waits_for_its_claim_to_be_replicated(redis_url: str,
                                                                  ns: str) -> None:
    """--claim-replicas 1 against a Redis without replicas (2 on the cluster, whose masters
    have one each): WAIT confirms too few, so the at_most_once run is not started (a
    failover could hand its claim to another worker) and is left to end lost; an
    at_least_once run in the same claims is not held back."""
    from scheduler.observe.metrics import CLAIMS_NOT_REPLICATED

    registry = Registry()
    ran: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran.append(payload)

    before = CLAIMS_NOT_REPLICATED._value.get()
    with Client(redis_url, ns) as client:
        once = client.submit("t", "once", delivery="at_most_once")
        client.submit("t", "least")
        asyncio.run(run_until(redis_url, ns, registry, lambda: "least" in ran and
                              CLAIMS_NOT_REPLICATED._value.get() > before,
                              claim_replicas=2 if is_cluster_url(redis_url) else 1,
                              replica_timeout_s=0.05, pipelines=1))
        [slot] = client.slots(once)
    assert ran == ["least"]
    assert slot.status is SlotStatus.RUNNING  # claimed, never started: its lease runs out
