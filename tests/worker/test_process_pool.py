"""The process pool: `pool="process"` handlers (tests/pool_tasks.py) run in real child
processes of a real worker on the real Redis; what they did comes back in their results and
the attempts Redis records."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pool_tasks
import pytest
import redis
from faults.harness import children_of

from helpers import run_until, running, sched, sched_process
from scheduler import Client, Registry, RetryPolicy, Slot, SlotStatus
from scheduler.core.errors import ConfigError
from scheduler.core.states import TERMINAL
from scheduler.node.node import NodeConfig, SchedulerNode
from scheduler.redis.clients import async_redis
from scheduler.testing import TestScheduler
from scheduler.worker.worker import Worker, WorkerConfig

FAST_RETRY = RetryPolicy(max_attempts=3, base_s=0.05, max_s=0.05, jitter=0)


def _ended(client: Client, job_id: str) -> Slot | None:
    [slot] = client.runs(job_id)[-1:] or [None]
    return slot if slot is not None and slot.status in TERMINAL else None


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not reaped yet has exited too)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.slow
def test_a_handler_in_a_child_gets_its_context_logs_once_and_returns(redis_url: str,
                                                                     ns: str) -> None:
    with Client(redis_url, ns) as client:
        job_id = client.submit("pool.report", {"name": "q3"}, delivery="exactly_once")
        asyncio.run(run_until(redis_url, ns, pool_tasks.registry,
                              lambda: _ended(client, job_id) is not None, process_pool=1))
        slot = _ended(client, job_id)
    assert slot is not None and slot.status is SlotStatus.SUCCEEDED
    got: dict[str, Any] = slot.result
    assert got.pop("pid") != os.getpid()  # it ran in a child
    assert got == {"slot_id": slot.slot_id, "job_id": job_id, "attempt": 1,
                   "fire_ms": slot.fire_ms, "task": "pool.report", "delivery": "exactly_once",
                   "idempotency_key": slot.slot_id, "once": [True, False],
                   "payload": {"name": "q3"}}
    [attempt] = slot.attempts
    assert [line.split(" ", 1)[1] for line in attempt.log or []] == [
        "INFO building q3", "WARNING half way"]


@pytest.mark.slow
def test_retry_cancel_exceptions_and_death_in_a_child_steer_the_slot_as_in_a_thread(
        redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        ids = {how: client.submit("pool.steer", how, retry=FAST_RETRY)
               for how in ("raise", "cancel", "return")}
        ids["die"] = client.submit("pool.die", retry=FAST_RETRY)
        asyncio.run(run_until(redis_url, ns, pool_tasks.registry,
                              lambda: all(_ended(client, j) for j in ids.values()),
                              node=True, process_pool=2))
        slots = {how: _ended(client, j) for how, j in ids.items()}
    attempts = {how: [(a.outcome, a.error) for a in s.attempts] for how, s in slots.items()
                if s is not None}
    assert attempts["return"] == [("retried", "not yet"), ("succeeded", None)]
    assert slots["return"] is not None and slots["return"].result == 2
    assert attempts["cancel"] == [("retried", "not yet"), ("cancelled", "no point")]
    assert attempts["die"] == [  # and the pool replaced it: the retry ran
        ("failed", "the process-pool child running this handler died (exit status 3)"),
        ("succeeded", None)]
    line = pool_tasks.steer.__code__.co_firstlineno + 6  # its raise
    assert attempts["raise"][:2] == [
        ("retried", "not yet"),
        ("failed", f"ValueError: bad input on attempt 2 (at pool_tasks.py:{line})")]


@pytest.mark.slow
def test_retry_after_in_a_child_sets_when_the_next_attempt_runs(redis_url: str,
                                                                 ns: str) -> None:
    """Retry(after=1.5) raised in a child: the next attempt waits those 1.5 s, not the
    policy's 0.05 s backoff (a Retry is not an error)."""
    with Client(redis_url, ns) as client:
        job_id = client.submit("pool.later", 1.5, retry=FAST_RETRY)
        asyncio.run(run_until(redis_url, ns, pool_tasks.registry,
                              lambda: _ended(client, job_id) is not None, node=True,
                              process_pool=1))
        slot = _ended(client, job_id)
    assert slot is not None and slot.status is SlotStatus.SUCCEEDED
    first, second = slot.attempts
    assert (first.outcome, first.error) == ("retried", "later")
    assert first.finished_ms is not None and second.started_ms is not None
    assert second.started_ms - first.finished_ms >= 1500 - 50, slot.attempts


@pytest.mark.slow
def test_a_cpu_bound_handler_past_its_timeout_is_killed_and_the_pool_goes_on(
        redis_url: str, ns: str, tmp_path: Path) -> None:
    """The child is gone within 1 s of the timeout, the attempt is timed_out, the retry
    runs, and the pool (one child: the killed one's replacement) serves the next run."""
    spun = tmp_path / "spin.json"
    seen: dict[str, Any] = {}
    with Client(redis_url, ns) as client:
        job_id = client.submit("pool.spin", {"file": str(spun), "seconds": 60}, timeout=1,
                               retry=FAST_RETRY)

        def done() -> bool:
            if "pid" not in seen and spun.exists() and spun.read_text():
                seen.update(json.loads(spun.read_text()))
            if "pid" in seen and "gone" not in seen and _gone(seen["pid"]):
                seen["gone"] = time.time()
                seen["next"] = client.submit("pool.pid")
            return "next" in seen and all(_ended(client, j) for j in (job_id, seen["next"]))

        asyncio.run(run_until(redis_url, ns, pool_tasks.registry, done, node=True,
                              process_pool=1))
        slot, after = _ended(client, job_id), _ended(client, seen["next"])
    assert seen["gone"] - seen["at"] < 1 + 1.0, seen  # its timeout, then within a second
    assert slot is not None and [a.outcome for a in slot.attempts] == ["timed_out",
                                                                        "succeeded"]
    assert after is not None and after.status is SlotStatus.SUCCEEDED
    assert slot.result == after.result != seen["pid"]  # the replacement ran both


@pytest.mark.slow
def test_a_run_that_waited_for_the_child_is_still_killed_at_its_timeout(
        redis_url: str, ns: str, tmp_path: Path) -> None:
    """A busy pool: its one child runs a long job, a second run is claimed meanwhile and waits
    for the child, then hangs past its timeout. Its timeout counts from when the child took
    it, and holds: the child is killed within a second of it, the attempt is timed_out, and
    the retry runs on the replacement."""
    busy, hung = tmp_path / "busy.json", tmp_path / "hung.json"
    seen: dict[str, Any] = {}
    with Client(redis_url, ns) as client:
        first = client.submit("pool.spin", {"file": str(busy), "seconds": 2})
        second: list[str] = []

        def done() -> bool:
            if not second and busy.exists() and busy.read_text():
                second.append(client.submit("pool.spin", {"file": str(hung), "seconds": 60},
                                            timeout=1, retry=FAST_RETRY))
            if "pid" not in seen and hung.exists() and hung.read_text():
                seen.update(json.loads(hung.read_text()))
            if "pid" in seen and "gone" not in seen and _gone(seen["pid"]):
                seen["gone"] = time.time()
            return "gone" in seen and all(_ended(client, j) for j in (first, *second))

        asyncio.run(run_until(redis_url, ns, pool_tasks.registry, done, node=True,
                              process_pool=1, timeout=30))
        waited, ran_first = _ended(client, second[0]), _ended(client, first)
        busy_until = json.loads(busy.read_text())["at"] + 2
    assert ran_first is not None and ran_first.status is SlotStatus.SUCCEEDED
    assert seen["at"] >= busy_until - 0.5, seen  # it did wait for the busy child
    assert seen["gone"] - seen["at"] < 1 + 1.0, seen  # its timeout, then within a second
    assert waited is not None and [a.outcome for a in waited.attempts] == ["timed_out",
                                                                            "succeeded"]


@pytest.mark.slow
def test_a_pool_of_one_replaces_its_dead_child(redis_url: str, ns: str) -> None:
    """With --process-pool 1, the one child dies under a handler (os._exit, as the OOM
    killer or a segfault would end it): the pool starts another, and the retry and a later
    job both run."""
    with Client(redis_url, ns) as client:
        died = client.submit("pool.die", retry=FAST_RETRY)
        later: list[str] = []

        def done() -> bool:
            slot = _ended(client, died)
            if slot is not None and not later:
                later.append(client.submit("pool.pid"))
            return bool(later) and _ended(client, later[0]) is not None

        worker = asyncio.run(run_until(redis_url, ns, pool_tasks.registry, done, node=True,
                                       process_pool=1, timeout=30))
        slot, after = _ended(client, died), _ended(client, later[0])
    assert slot is not None and [(a.outcome, a.error) for a in slot.attempts] == [
        ("failed", "the process-pool child running this handler died (exit status 3)"),
        ("succeeded", None)]
    assert after is not None and after.status is SlotStatus.SUCCEEDED
    assert worker.pool is not None and worker.pool.replaced == 1


@pytest.mark.slow
def test_a_child_is_replaced_after_max_tasks_per_child_runs(redis_url: str, ns: str) -> None:
    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "pool.pid"} for _ in range(5)])
        asyncio.run(run_until(redis_url, ns, pool_tasks.registry,
                              lambda: all(_ended(client, j) for j in ids), process_pool=1,
                              max_tasks_per_child=2))
        pids = [s.result for s in (_ended(client, j) for j in ids) if s is not None]
    assert len(pids) == 5 and len(set(pids)) == 3
    assert max(pids.count(p) for p in pids) == 2


@pytest.mark.slow
def test_the_children_die_with_their_worker_even_sigkilled_mid_run(
        redis_url: str, ns: str, app_env: dict[str, str], tmp_path: Path) -> None:
    """Both children busy in pure-Python CPU (they read nothing from the worker meanwhile)
    when the worker is SIGKILLed."""
    worker = sched_process(redis_url, ns, app_env, "worker", "--app", "pool_tasks:registry",
                           "--process-pool", "2")
    files = [tmp_path / f"{i}.json" for i in range(2)]
    with running(worker), Client(redis_url, ns) as client:
        for f in files:
            client.submit("pool.spin", {"file": str(f), "seconds": 60})
        deadline = time.monotonic() + 30
        while not all(f.exists() and f.read_text() for f in files):
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.05)
        children = [json.loads(f.read_text())["pid"] for f in files]
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        deadline = time.monotonic() + 5
        try:
            while not all(_gone(p) for p in children):
                assert time.monotonic() < deadline, "a child outlived its worker"
                time.sleep(0.05)
        finally:  # none left behind, whatever happened (they hold the worker's stderr)
            for p in children:
                if not _gone(p):
                    os.kill(p, signal.SIGKILL)


def test_an_async_def_or_a_handler_a_child_cannot_import_is_refused_at_registration() -> None:
    registry = Registry()

    async def waits(ctx: Any, payload: Any) -> None:
        pass

    def nested(ctx: Any, payload: Any) -> None:
        pass

    with pytest.raises(TypeError, match="takes a plain def, not an async def"):
        registry.task("a", pool="process")(waits)
    with pytest.raises(TypeError, match="top level of a module"):
        registry.task("b", pool="process")(nested)
    with pytest.raises(TypeError, match="top level of a module"):
        registry.task("c", pool="process")(lambda ctx, payload: None)
    with pytest.raises(ValueError, match='pool must be "thread" or "process"'):
        registry.task("d", pool="processes")
    assert registry.tasks == {}
    with pytest.raises(ConfigError, match="process_pool must be from 1 to 1,024, not 0"):
        WorkerConfig(process_pool=0)
    with pytest.raises(ConfigError, match="max tasks per child must be >= 0"):
        WorkerConfig(max_tasks_per_child=-1)


@pytest.mark.parametrize("args, problem", [
    (["--process-pool", "0"], "'--process-pool': 0 is not in the range 1<=x<=1024"),
    (["--max-tasks-per-child", "-1"], "'--max-tasks-per-child': -1 is not in the range 0<=x<=1000000000"),
    (["--process-pool", "many"], "'many' is not a valid integer"),
    (["--process-pool", "1025"], "'--process-pool': 1025 is not in the range 1<=x<=1024"),
])
def test_the_cli_refuses_bad_pool_values_in_one_line(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        args: list[str], problem: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, "worker", "--app", "pool_tasks:registry",
                           *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and problem in err, err
    assert not list(r.scan_iter(match=f"{ns}:*", count=10_000))


@pytest.mark.slow
def test_sigterm_while_the_pool_starts_stops_the_worker_and_its_children(
        redis_url: str, ns: str, app_env: dict[str, str], tmp_path: Path) -> None:
    """The handlers' module takes long to import in a child (a model to load): a SIGTERM
    meanwhile stops the worker within moments, its children killed, rather than once they
    are ready (up to START_S)."""
    (tmp_path / "heavy_tasks.py").write_text(
        "import sys, time\nfrom scheduler import Registry\nregistry = Registry()\n"
        "if sys.argv[0].endswith('child.py'):\n    time.sleep(60)\n\n\n"
        "@registry.task('t', pool='process')\ndef t(ctx, payload):\n    return 1\n")
    env = {**app_env, "PYTHONPATH": os.pathsep.join([str(tmp_path), app_env["PYTHONPATH"]])}
    worker = sched_process(redis_url, ns, env, "worker", "--app", "heavy_tasks:registry",
                           "--process-pool", "2")
    with running(worker):
        deadline = time.monotonic() + 30
        while len(kids := children_of(worker.pid)) < 2:
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.02)
        worker.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert worker.wait(timeout=60) == 0
        assert time.monotonic() - stopped < 5
        deadline = time.monotonic() + 5
        while not all(_gone(p) for p in kids):
            assert time.monotonic() < deadline, "a child outlived its worker"
            time.sleep(0.05)


def test_the_testing_mode_runs_process_handlers_in_process() -> None:
    with TestScheduler(pool_tasks.registry) as s:
        job_id = s.client.submit("pool.report", {"name": "t"})
        [ran] = s.drain()
        assert ran.result["pid"] == os.getpid() and ran.result["once"] == [True, False]
        assert s.client.result(job_id)["job_id"] == job_id


@pytest.mark.slow
def test_a_run_still_going_after_the_grace_period_is_released_and_its_child_killed(
        redis_url: str, ns: str, tmp_path: Path) -> None:
    spun = tmp_path / "spin.json"
    with Client(redis_url, ns) as client:
        job_id = client.submit("pool.spin", {"file": str(spun), "seconds": 60})

        async def go() -> list[int]:
            conn = async_redis(redis_url)
            worker = Worker(conn, pool_tasks.registry, namespace=ns,
                            config=WorkerConfig(process_pool=2, grace_s=0.2, block_ms=50))
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + 30
            while not (spun.exists() and spun.read_text()):
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.02)
            assert worker.pool is not None
            pids = worker.pool.pids()
            worker.stop()
            await task
            await conn.aclose()
            return pids

        pids = asyncio.run(go())
        [slot] = client.slots(job_id)
    assert [a.outcome for a in slot.attempts] == ["released"]
    assert json.loads(spun.read_text())["pid"] in pids
    assert all(_gone(p) for p in pids)  # the busy child and the idle one: none outlives it


@pytest.mark.slow
def test_a_cancelled_run_has_its_child_killed(redis_url: str, ns: str, tmp_path: Path) -> None:
    spun = tmp_path / "spin.json"
    seen: dict[str, Any] = {}
    with Client(redis_url, ns) as client:
        job_id = client.submit("pool.spin", {"file": str(spun), "seconds": 60})

        def done() -> bool:
            if "pid" not in seen and spun.exists() and spun.read_text():
                seen.update(json.loads(spun.read_text()))
                client.cancel(job_id)
            return "pid" in seen and _gone(seen["pid"]) and _ended(client, job_id) is not None

        asyncio.run(run_until(redis_url, ns, pool_tasks.registry, done, process_pool=1,
                              lease_s=1.5))
        slot = _ended(client, job_id)
    assert slot is not None and [(a.outcome, a.error) for a in slot.attempts] == [
        ("cancelled", "cancelled on request")]


@pytest.mark.slow
def test_a_handler_module_a_child_cannot_import_stops_the_worker_in_one_line(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gpu_tasks.py").write_text(
        "import sys\nfrom scheduler import Registry\nregistry = Registry()\n"
        "if sys.argv[0].endswith('child.py'):\n"
        "    raise RuntimeError('no GPU in this process')\n\n\n"
        "@registry.task('t', pool='process')\ndef t(ctx, payload):\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = sched(capsys, redis_url, ns, "worker", "--app", "gpu_tasks:registry")
    assert code == 1 and out == ""
    assert err.strip() == ("error: a process-pool child cannot load the handlers: "
                           "RuntimeError: no GPU in this process"), err
    assert not list(r.scan_iter(match=f"{ns}:*", count=10_000))


def test_a_registry_without_process_tasks_starts_no_pool(redis_url: str, ns: str) -> None:
    registry, ran = Registry(), []

    @registry.task("plain")
    def plain(ctx: Any, payload: Any) -> None:
        ran.append(payload)

    with Client(redis_url, ns) as client:
        client.submit("plain", 1)
        worker = asyncio.run(run_until(redis_url, ns, registry, lambda: bool(ran)))
    assert worker.pool is None and worker.execution.pool is None


@pytest.mark.slow
def test_ctx_once_in_a_child_raises_lease_lost_once_the_slot_was_reclaimed(
        redis_url: str, ns: str, tmp_path: Path) -> None:
    """The worker's heartbeat (and its watchdog) stopped: the lease runs out, the node
    reclaims the slot, and the child's ctx.once, asked only then, is told the lease is gone."""
    files = {name: str(tmp_path / name) for name in ("go", "out", "started")}
    with Client(redis_url, ns) as client:
        job_id = client.submit("pool.late_once", files)

        async def go() -> None:
            conn = async_redis(redis_url)
            worker = Worker(conn, pool_tasks.registry, namespace=ns,
                            config=WorkerConfig(process_pool=1, lease_s=1, block_ms=50))
            node = SchedulerNode(conn, namespace=ns,
                                 config=NodeConfig(lease_s=1, reclaim_interval_s=0.1))
            tasks = [asyncio.create_task(s.run()) for s in (worker, node)]
            deadline = time.monotonic() + 30

            async def until(done: Callable[[], bool]) -> None:
                while not done():
                    assert time.monotonic() < deadline and not any(t.done() for t in tasks)
                    await asyncio.sleep(0.02)

            await until(lambda: Path(files["started"]).exists())
            worker.heartbeat.stop()
            await until(lambda: len(client.runs(job_id)[-1].attempts) > 1)  # reclaimed
            open(files["go"], "w").close()  # noqa: ASYNC230 # an empty file, at once
            await until(lambda: Path(files["out"]).exists())
            worker.stop()
            node.stop()
            await asyncio.gather(*tasks)
            await conn.aclose()

        asyncio.run(go())
    assert Path(files["out"]).read_text().startswith("LeaseLost: ")


@pytest.mark.slow
def test_progress_from_a_child_reaches_the_slot(redis_url: str, ns: str) -> None:
    """ctx.progress in a child crosses the pipe to the worker, whose heartbeat writes it; a
    bad value raises in the handler, in the child."""
    with Client(redis_url, ns) as client:
        job_id = client.submit("pool.progress", 1.6)
        asyncio.run(run_until(redis_url, ns, pool_tasks.registry,
                              lambda: _ended(client, job_id) is not None, process_pool=1,
                              lease_s=3.0))
        slot = _ended(client, job_id)
        assert client.progress(job_id) == (slot.progress if slot else None)
    assert slot is not None and slot.status is SlotStatus.SUCCEEDED, slot
    assert "fraction must be a number from 0 to 1" in slot.result
    assert slot.progress is not None
    assert (slot.progress.fraction, slot.progress.message, slot.progress.attempt) == (
        0.5, "half way", 1)


@pytest.mark.slow
def test_a_run_stopped_while_queued_behind_a_busy_child_never_begins(
        redis_url: str, ns: str, tmp_path: Path) -> None:
    """A pool of one child runs a long job; a second run is claimed meanwhile and sent to the
    child to go next (pipelined), then cancelled before the child reaches it. It never
    begins (its file is never written), the busy child is not killed for it, and the first
    job succeeds. The child runs in a session of its own (its own scheduling group)."""
    busy, queued = tmp_path / "busy.json", tmp_path / "queued.json"
    seen: dict[str, Any] = {}
    with Client(redis_url, ns) as client:
        first = client.submit("pool.spin", {"file": str(busy), "seconds": 4})
        second: list[str] = []

        def done() -> bool:
            if not second and busy.exists() and busy.read_text():
                seen.update(json.loads(busy.read_text()))
                seen["sid"] = os.getsid(seen["pid"])
                second.append(client.submit("pool.spin", {"file": str(queued), "seconds": 0}))
            if second and "cancelled" not in seen:
                [slot] = client.runs(second[0])[-1:] or [None]
                if slot is not None and slot.status is SlotStatus.RUNNING:
                    assert time.time() - seen["at"] < 3, "claimed too late to test this"
                    client.cancel(second[0])
                    seen["cancelled"] = True
            return "cancelled" in seen and all(_ended(client, j) for j in (first, *second))

        asyncio.run(run_until(redis_url, ns, pool_tasks.registry, done, process_pool=1,
                              lease_s=1.5, timeout=30))
        ran, stopped = _ended(client, first), _ended(client, second[0])
    assert not queued.exists()
    assert stopped is not None and [(a.outcome, a.error) for a in stopped.attempts] == [
        ("cancelled", "cancelled on request")]
    assert ran is not None and ran.status is SlotStatus.SUCCEEDED
    assert ran.result == seen["pid"]  # its child was not killed for the other run
    assert seen["sid"] == seen["pid"] != os.getsid(0)


def _marks(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_run_queued_behind_a_long_one_moves_to_a_child_that_becomes_free(
        redis_url: str, ns: str, tmp_path: Path) -> None:
    """Two children: a long run (5 s) goes to the first, a short one (1 s) to the second,
    then a third is claimed, and sent to the first child (each holds one: the first in order
    wins) to go after the long run. When the second child ends its run it is free, and the
    third moves to it: it begins about when the short one ends, not when the long one does.
    Each run began exactly once (its file has one line), and no child was killed."""
    files = {name: tmp_path / f"{name}.jsonl" for name in ("long", "short", "queued")}
    seconds = {"long": 5.0, "short": 1.0, "queued": 0.0}
    ids: dict[str, str] = {}
    with Client(redis_url, ns) as client:
        def submit(name: str) -> None:
            ids[name] = client.submit("pool.mark", {"file": str(files[name]),
                                                    "seconds": seconds[name]})

        def done() -> bool:
            # Each is submitted once the one before began, so each is claimed in order.
            if "long" not in ids:
                submit("long")
            elif "short" not in ids and _marks(files["long"]):
                submit("short")
            elif "queued" not in ids and _marks(files["short"]):
                submit("queued")
            if len(ids) < 3 or not all(_ended(client, j) for j in ids.values()):
                return False
            # A child that began a run it had said Dropped is killed for it at once.
            alive.append(not _gone(_marks(files["long"])[0]["pid"]))
            return True

        alive: list[bool] = []
        worker = asyncio.run(run_until(redis_url, ns, pool_tasks.registry, done,
                                       process_pool=2, timeout=60))
        slots = {name: _ended(client, job_id) for name, job_id in ids.items()}
    marks = {name: _marks(path) for name, path in files.items()}
    assert all(len(m) == 1 for m in marks.values()), marks  # none ran twice
    assert all(s is not None and s.status is SlotStatus.SUCCEEDED for s in slots.values())
    long, short, queued = marks["long"][0], marks["short"][0], marks["queued"][0]
    assert long["pid"] != short["pid"]
    assert short["at"] - long["at"] < 3, "the short run began too late to test this"
    # Without the move it would begin when the long one ends, 5 s after it began.
    assert queued["at"] - long["at"] < 3.5, (queued["at"] - long["at"], marks)
    assert queued["at"] - short["at"] < 1 + 1.5
    assert queued["pid"] == short["pid"]
    assert worker.pool is not None and worker.pool.moved == 1  # it was queued on the first
    assert alive == [True]  # the long run's child was not killed
