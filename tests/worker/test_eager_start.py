"""With `WorkerConfig(eager_start=True)` handlers' tasks start eagerly on Python 3.12+
(execution.py, `_eager_task`): a handler that returns without awaiting has ended within
`Execution.start`, never scheduled on the loop; one that awaits is started up to its first
await and is then timed out, cancelled and released as before. On 3.11, and by default, the
task runs on the loop's next iteration."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from typing import Any

import pytest
import redis.asyncio

from helpers import run_until, statuses
from scheduler import Client, Context, Registry, RetryPolicy
from scheduler.core.keys import Keys
from scheduler.observe.metrics import RunMetrics
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts.replies import Grant
from scheduler.worker.claims import Claims
from scheduler.worker.committer import Committer
from scheduler.worker.execution import Execution
from scheduler.worker.inflight import Inflight, Run
from scheduler.worker.worker import Worker, WorkerConfig

EAGER = sys.version_info >= (3, 12)


def _execution(registry: Registry, eager: bool = True) -> tuple[Execution, Inflight, Committer]:
    client = redis.asyncio.Redis()  # never connected: nothing here reaches Redis
    keys, clock, running = Keys("eager"), ManualClock(), {}
    committer = Committer(keys, clock, "w", 1000)
    return (Execution(client, keys, clock, registry, committer, running, asyncio.Event(),
                      lease_s=30, threads=2, eager=eager), running, committer)


def _start(execution: Execution, running: Inflight, task: str, timeout_ms: int = 0) -> Run:
    n = len(running)
    run = Run(0, f"job{n}:1700000000000", Grant(1, task, b"null", timeout_ms, "at_least_once", 0),
              deadline=1e18)
    run.metrics = RunMetrics("default", task)
    running[run.slot_id] = run
    execution.start(run, asyncio.get_running_loop())
    return run


def _outcomes(committer: Committer) -> dict[str, str]:
    """slot -> what the committer holds for it ("succeeded", or the failed attempt's
    outcome)."""
    held = {item.slot_id: "succeeded" for item in committer.pending["complete"][0]}
    held.update({item.slot_id: item.outcome for item in committer.pending["fail"][0]})
    return held


def test_a_handler_that_never_awaits_has_ended_when_start_returns() -> None:
    registry = Registry()
    ran: list[str] = []

    @registry.task("quick")
    async def quick(ctx: Context, payload: Any) -> int:
        ran.append(ctx.slot_id)
        return 7

    async def main() -> None:
        execution, running, committer = _execution(registry)
        run = _start(execution, running, "quick", timeout_ms=60_000)
        if EAGER:  # before the loop runs anything else
            assert ran == [run.slot_id] and run.ended and run.handler is not None
            assert run.handler.done() and run.slot_id not in running
            assert _outcomes(committer) == {run.slot_id: "succeeded"}
            assert run.timer is None  # no timeout left behind on the loop
        else:
            assert ran == [] and not run.ended and run.timer is not None
            await asyncio.sleep(0)
            assert run.ended and _outcomes(committer) == {run.slot_id: "succeeded"}
        execution.close()
        # Not asked for (the default): the task runs on the next iteration, as on 3.11.
        execution, running, committer = _execution(registry, eager=False)
        run = _start(execution, running, "quick")
        assert not run.ended
        await asyncio.sleep(0)
        assert run.ended and _outcomes(committer) == {run.slot_id: "succeeded"}
        execution.close()

    asyncio.run(main())


def test_handlers_that_await_are_still_timed_out_cancelled_and_released() -> None:
    registry = Registry()
    began: Counter[str] = Counter()
    cleaned: list[str] = []

    @registry.task("hang")
    async def hang(ctx: Context, payload: Any) -> None:
        began[ctx.slot_id] += 1
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append(ctx.slot_id)

    @registry.task("yields")
    async def yields(ctx: Context, payload: Any) -> None:
        began[ctx.slot_id] += 1
        await asyncio.sleep(0)

    async def main() -> None:
        execution, running, committer = _execution(registry)
        timed = _start(execution, running, "hang", timeout_ms=50)
        cancelled = _start(execution, running, "hang")
        released = _start(execution, running, "hang")
        done = _start(execution, running, "yields", timeout_ms=50)
        runs = [timed, cancelled, released, done]
        # Eagerly started: each ran up to its first await inside start().
        assert [began[r.slot_id] for r in runs] == ([1, 1, 1, 1] if EAGER else [0, 0, 0, 0])
        assert all(r.begun == EAGER and not r.ended for r in runs)
        assert timed.timer is not None and done.timer is not None
        assert cancelled.stop("cancel") and released.stop("release")
        await asyncio.wait_for(asyncio.gather(*(r.handler for r in runs if r.handler)), 5)
        assert _outcomes(committer) == {timed.slot_id: "timed_out",
                                        cancelled.slot_id: "cancelled",
                                        done.slot_id: "succeeded"}
        assert [item.slot_id for item in committer.pending["release"][0]] == [released.slot_id]
        # On 3.11 a run stopped before its task began never calls its handler.
        stopped_early = [] if EAGER else [cancelled, released]
        assert sorted(cleaned) == sorted(r.slot_id for r in runs[:3] if r not in stopped_early)
        assert not running
        assert done.timer is not None and done.timer.cancelled()
        execution.close()

    asyncio.run(main())


def test_no_await_handlers_run_inside_the_claim_end_to_end(redis_url: str, ns: str) -> None:
    """Through a real worker: on 3.12+ every no-await handler ran within the claim that
    started it (Claims.claim is on its stack), on 3.11 from the loop; and a timeout still
    stops a handler that awaits."""
    registry = Registry()
    inside: Counter[bool | str] = Counter()

    @registry.task("noop")
    async def noop(ctx: Context, payload: Any) -> None:
        frame, claim = sys._getframe(), False
        while frame is not None and not claim:
            claim, frame = frame.f_code is Claims.claim.__code__, frame.f_back  # type: ignore[assignment]
        inside[claim] += 1

    @registry.task("hang")
    async def hang(ctx: Context, payload: Any) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            inside["hang stopped"] += 1

    def done() -> bool:
        # Reading 301 jobs' slots blocks the worker's loop (a second or more on a loaded
        # box): only once every handler has ended (counted here, without Redis).
        return (inside.total() >= 301
                and statuses(client, [*ids, hung]) == {"succeeded": 300, "dead": 1})

    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "noop", "payload": i} for i in range(300)])
        hung = client.submit("hang", timeout=0.1, retry=RetryPolicy(max_attempts=1))
        asyncio.run(run_until(redis_url, ns, registry, done, concurrency=50, eager_start=True))
        [slot] = client.slots(hung)
    assert inside == {EAGER: 300, "hang stopped": 1}
    assert [a.outcome for a in slot.attempts] == ["timed_out"]


@pytest.mark.parametrize("redis_url", ["single"], indirect=True)
def test_an_entry_twice_in_one_claim_runs_once(redis_url: str, ns: str) -> None:
    """claim.lua grants an entry again to the worker that holds it; a run that ended within
    start() (eagerly) has left the table by then, and must not run a second time."""
    registry = Registry()
    effects: Counter[str] = Counter()

    @registry.task("noop")
    async def noop(ctx: Context, payload: Any) -> None:
        effects[ctx.slot_id] += 1

    async def main() -> int:
        client = async_redis(redis_url)
        worker = Worker(client, registry, namespace=ns, config=WorkerConfig(eager_start=True))
        await worker.setup()
        await worker.reader.read(10, None)
        [(shard, lane, msg, slot)] = worker.reader.take(10)
        started = await worker.claims.claim({shard: [(lane, msg, slot), (lane, msg, slot)]})
        for _ in range(100):
            if not worker.running:
                break
            await asyncio.sleep(0.01)
        worker.execution.close()
        await client.aclose()
        return started

    with Client(redis_url, ns) as client:
        client.submit("noop")
        assert asyncio.run(main()) == 1
    assert list(effects.values()) == [1]
