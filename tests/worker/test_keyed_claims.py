"""A worker's keyed claims (scheduler/worker/keyed.py) when a take's reply is lost after the
script ran: the slots it granted are running under this worker, and the next pass asks for
them again and runs them now, under the same attempt, instead of leaving them to run out
their lease (and count a failed attempt)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
import redis

from scheduler import Client, Context, JobSpec, Registry, SlotStatus
from scheduler.redis.clients import async_redis
from scheduler.worker.worker import Worker, WorkerConfig


@pytest.mark.parametrize("redis_url", ["single"], indirect=True)
@pytest.mark.parametrize("queue_wide", [False, True])
def test_a_take_whose_reply_was_lost_is_granted_again_at_the_next_pass(
        redis_url: str, ns: str, queue_wide: bool) -> None:
    """With a queue-wide limit too, the failed pass gives its permits back (none stays held,
    renewed for ever), and the pass that asks again takes new ones for the runs."""
    registry = Registry()
    ran: Counter[tuple[str, int]] = Counter()

    @registry.task("noop")
    async def noop(ctx: Context, payload: Any) -> None:
        ran[(ctx.slot_id, ctx.attempt)] += 1

    async def main(ids: list[str]) -> tuple[int, int]:
        client = async_redis(redis_url)
        worker = Worker(client, registry, namespace=ns, config=WorkerConfig(concurrency=10))
        await worker.setup()
        real, lost = worker.claims.send, []

        async def send(calls: Any, prefetch: bool) -> Any:
            answers = await real(calls, prefetch)  # the scripts ran...
            if not lost:
                lost.append(answers)
                raise redis.ConnectionError("the reply was lost")  # ...and the reply is gone
            return answers

        worker.claims.send = send  # type: ignore[method-assign]
        with pytest.raises(redis.ConnectionError):
            await worker.keyed.run_once()
        assert not worker.running
        assert not any(worker.limited.held.values())
        with Client(redis_url, ns) as sync:
            assert {sync.slots(j)[0].status for j in ids} == {SlotStatus.RUNNING}
        again = await worker.keyed.run_once()
        for _ in range(200):
            if not worker.running:
                break
            await asyncio.sleep(0.01)
        committed = await worker.exchange.commit()
        worker.execution.close()
        await client.aclose()
        return again, committed

    with Client(redis_url, ns) as client:
        if queue_wide:
            client.set_queue_limit("default", concurrency=10)
        ids = client.submit_many([JobSpec(task="noop", concurrency_key=f"k{i}")
                                  for i in range(3)])
        again, committed = asyncio.run(main(ids))
        assert again == 3 and committed == 3
        assert sorted(ran) == sorted((client.slots(j)[0].slot_id, 1) for j in ids)
        assert {client.slots(j)[0].status for j in ids} == {SlotStatus.SUCCEEDED}


@pytest.mark.slow  # waits for the worker to go idle
@pytest.mark.parametrize("redis_url", ["single", "cluster"], indirect=True)
def test_a_free_keys_job_starts_at_once_on_an_idle_worker(redis_url: str, ns: str) -> None:
    """An idle worker's keyed loop waits on the wake streams, not a poll: each job of a new
    key, submitted while the worker has had nothing to do for a while, starts within a
    fraction of the idle poll (without the wake each waits up to the whole of it)."""
    from scheduler import AsyncClient
    from scheduler.worker.keyed import IDLE_POLL_S

    registry = Registry()
    started: dict[str, float] = {}
    arrived = asyncio.Event()

    @registry.task("mark")
    async def mark(ctx: Context, payload: Any) -> None:
        started[payload] = time.perf_counter()
        arrived.set()

    async def main() -> list[float]:
        async with AsyncClient(redis_url, ns) as sub:
            await sub.submit("mark", "first", concurrency_key="k-first")  # makes the namespace
            client = async_redis(redis_url)
            worker = Worker(client, registry, namespace=ns, config=WorkerConfig(concurrency=5))
            run = asyncio.create_task(worker.run())
            await asyncio.wait_for(arrived.wait(), 30)
            lags = []
            for i in range(8):
                await asyncio.sleep(IDLE_POLL_S * 1.5)  # the loop is in its idle wait
                arrived.clear()
                t = time.perf_counter()
                await sub.submit("mark", f"j{i}", concurrency_key=f"k{i}")
                await asyncio.wait_for(arrived.wait(), 30)
                lags.append(started[f"j{i}"] - t)
            worker.stop()
            await run
            await client.aclose()
            return lags

    lags = asyncio.run(main())
    print("start lags of a free key's job on an idle worker:",
          ", ".join(f"{x * 1000:.1f} ms" for x in sorted(lags)))
    assert max(lags) < IDLE_POLL_S * 0.4, [f"{x * 1000:.0f} ms" for x in lags]


class TwoTakes:
    """A worker's two take loops with their takes in flight at once: the first take's
    scripts run, then it waits until the second's have run too; `first_fails` loses the
    first's reply, after which the second's reply lands (before it, `second_lands_first`)."""

    def __init__(self, worker: Worker, first_fails: bool,
                 second_lands_first: bool = False) -> None:
        self.real, self.sent = worker.claims.send, 0
        self.first_sent, self.second_ran = asyncio.Event(), asyncio.Event()
        self.first_done = asyncio.Event()
        self.first_fails = first_fails
        if second_lands_first:
            self.first_done.set()
        worker.claims.send = self.send  # type: ignore[method-assign]

    async def send(self, calls: Any, prefetch: bool) -> Any:
        self.sent += 1
        if self.sent == 1:
            self.first_sent.set()
            answers = await self.real(calls, prefetch)  # the scripts ran...
            await asyncio.wait_for(self.second_ran.wait(), 10)
            if self.first_fails:
                raise redis.ConnectionError("the reply was lost")  # ...and the reply is gone
            return answers
        if self.sent == 2:
            answers = await self.real(calls, prefetch)
            self.second_ran.set()
            await asyncio.wait_for(self.first_done.wait(), 10)
            return answers
        return await self.real(calls, prefetch)

    async def both(self, worker: Worker, again: bool = False) -> int:
        """The first loop's pass and a follower's, both takes in flight; what they started
        (the first's, when its reply was lost, counted as none). `again`: an earlier take's
        reply was lost, and the first loop's next pass runs beside the first take."""
        # As after a pass that took all it asked: the follower takes the queues found.
        worker.keyed.busy.set()
        worker.keyed._found["default"] = worker.claims.clock.monotonic()
        first = asyncio.create_task(worker.keyed.take_pass(lead=True))
        await asyncio.wait_for(self.first_sent.wait(), 10)
        if again:
            worker.keyed._again.update((s, "default") for s in range(worker.shards))
        second = asyncio.create_task(worker.keyed.take_pass(lead=again))
        second.add_done_callback(lambda _: self.second_ran.set())  # (when it sent nothing)
        started = 0
        try:
            started += (await first)[0]
        except redis.ConnectionError:
            assert self.first_fails
        self.second_ran.set()
        self.first_done.set()
        return started + (await second)[0]


async def _settle(worker: Worker) -> int:
    for _ in range(200):
        if not worker.running:
            break
        await asyncio.sleep(0.01)
    return await worker.exchange.commit()


@pytest.mark.parametrize("redis_url", ["single"], indirect=True)
def test_a_take_in_flight_when_another_s_reply_is_lost_does_not_answer_the_re_ask(
        redis_url: str, ns: str) -> None:
    """Two takes in flight (a worker's two take loops): the first's reply is lost, then the
    second's lands. The second did not ask again, so the next pass still does: the first's
    grants run now, under their attempt, rather than waiting out their lease."""
    registry = Registry()
    ran: Counter[tuple[str, int]] = Counter()

    @registry.task("noop")
    async def noop(ctx: Context, payload: Any) -> None:
        ran[(ctx.slot_id, ctx.attempt)] += 1

    async def main() -> tuple[int, int]:
        client = async_redis(redis_url)
        worker = Worker(client, registry, namespace=ns,
                        config=WorkerConfig(concurrency=16, pipelines=2))
        await worker.setup()
        takes = TwoTakes(worker, first_fails=True)
        second = await takes.both(worker)
        assert takes.sent == 2 and second > 0
        again = await worker.keyed.run_once()  # asks again for the first take's grants
        await _settle(worker)
        worker.execution.close()
        await client.aclose()
        return second, again

    with Client(redis_url, ns) as client:
        ids = client.submit_many([JobSpec(task="noop", concurrency_key=f"k{i}")
                                  for i in range(16)])
        second, again = asyncio.run(main())
        assert again > 0 and second + again == 16
        assert sorted(ran) == sorted((client.slots(j)[0].slot_id, 1) for j in ids)
        assert {client.slots(j)[0].status for j in ids} == {SlotStatus.SUCCEEDED}


@pytest.mark.parametrize("redis_url", ["single"], indirect=True)
def test_with_several_workers_a_queue_has_one_take_in_flight(redis_url: str, ns: str) -> None:
    """The spread (take.lua) counts the runs a worker holds of each key: a second take of
    the queue sent before the first's grants are counted would run the key past the
    worker's share of its limit (here 1 of a limit of 2 over two live workers)."""
    registry = Registry()
    release = asyncio.Event()

    @registry.task("hold")
    async def hold(ctx: Context, payload: Any) -> None:
        await release.wait()

    async def main() -> tuple[int, int]:
        client = async_redis(redis_url)
        worker = Worker(client, registry, namespace=ns,
                        config=WorkerConfig(concurrency=8, pipelines=2))
        await worker.setup()
        worker.keyed.live = lambda: 2
        takes = TwoTakes(worker, first_fails=False)
        started = await takes.both(worker)
        running = len(worker.running)
        release.set()
        await _settle(worker)
        worker.execution.close()
        await client.aclose()
        return started, running

    with Client(redis_url, ns) as client:
        client.set_queue_limit("default", per_key_concurrency=2)
        client.submit_many([JobSpec(task="hold", concurrency_key="k") for _ in range(4)])
        started, running = asyncio.run(main())
        assert (started, running) == (1, 1)


@pytest.mark.parametrize("redis_url", ["single"], indirect=True)
def test_a_re_ask_waits_for_the_take_in_flight(redis_url: str, ns: str) -> None:
    """A re-ask grants again the worker's running slots of the queue: sent while another
    take of it is in flight, it would grant that take's slots too, and once the take's reply
    started them (a no-op ends at once), the re-ask's would start them a second time."""
    registry = Registry()
    ran: Counter[tuple[str, int]] = Counter()

    @registry.task("noop")
    async def noop(ctx: Context, payload: Any) -> None:
        ran[(ctx.slot_id, ctx.attempt)] += 1

    async def main() -> int:
        client = async_redis(redis_url)
        worker = Worker(client, registry, namespace=ns,
                        config=WorkerConfig(concurrency=16, pipelines=2))
        await worker.setup()
        takes = TwoTakes(worker, first_fails=False, second_lands_first=True)
        started = await takes.both(worker, again=True)
        for _ in range(3):  # the re-ask, once the take landed, and the rest of the jobs
            started += await worker.keyed.run_once()
        await _settle(worker)
        worker.execution.close()
        await client.aclose()
        return started

    with Client(redis_url, ns) as client:
        ids = client.submit_many([JobSpec(task="noop", concurrency_key=f"k{i}")
                                  for i in range(16)])
        asyncio.run(main())
        assert sorted(ran.elements()) == sorted((client.slots(j)[0].slot_id, 1) for j in ids)
