"""The children of `sched worker --processes N` grouped under their supervisor: a child reads
its supervisor from SCHED_SUPERVISOR (a malformed value is one line and exit 1), its heartbeat
carries it, and `client.supervisors()`, `sched workers` and `sched status` group the children
under a line per supervisor (host, pid, children alive, restarts); workers started on their
own are listed as before."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from typing import Any

import msgspec
import pytest
import redis

from helpers import garble, running, sched, sched_process, until, workers_of
from scheduler import AsyncClient, Client
from scheduler.core.keys import Keys
from scheduler.worker.worker import SupervisorRef

HOST = socket.gethostname()
REF = SupervisorRef(id="sup-7f3a", pid=4242, host=HOST, index=0, processes=2, restarts=0)
HEADING = f"supervisor sup-7f3a on {HOST}, pid 4242"


def test_children_are_grouped_under_their_supervisor(capsys: pytest.CaptureFixture[str],
                                                     redis_url: str, ns: str) -> None:
    """Two children of one supervisor (the second restarted 3 times) and a worker on its own,
    started before the namespace exists, as users start them; then the first submit."""
    refs = [REF, msgspec.structs.replace(REF, index=1, restarts=3), None]

    async def main_() -> tuple[list[Any], list[tuple[int, str, str]]]:
        seen: list[Any] = []
        async with workers_of(redis_url, ns, refs) as workers, \
                AsyncClient(redis_url, ns) as client:
            async def waiting() -> bool:
                return sum(w.alive and w.waiting for w in await client.workers()) == 3
            await until("three waiting workers", waiting)
            # a waiting child is grouped already (its entry carries the supervisor)
            seen.append(await client.supervisors())
            await client.submit("nothing.here")  # creates the namespace

            async def started() -> bool:
                found = await client.workers()
                return len(found) == 3 and all(w.alive and not w.waiting for w in found)
            await until("the workers to start", started)
            seen.append(await client.workers())
            outputs = [await asyncio.to_thread(sched, capsys, redis_url, ns, *args)
                       for args in (["workers"], ["workers", "--json"],
                                    ["status", "--max-lag", "3600"])]
            workers[0].stop()  # a clean stop leaves the registry

            async def left() -> bool:
                return len(await client.workers()) == 2
            await until("the first child to leave", left)
            seen.append(await client.supervisors())
        return seen, outputs

    (waiting, found, after), outputs = asyncio.run(main_())
    [sup] = waiting
    assert (sup.supervisor_id, sup.pid, sup.processes, sup.children_alive, sup.restarts) == \
        ("sup-7f3a", 4242, 2, 2, 3)
    assert [w.child for w in sup.children] == [0, 1] and sup.host == HOST

    alone = [w for w in found if w.supervisor is None]
    assert len(alone) == 1 and alone[0].child is None and alone[0].restarts is None
    children = sorted((w for w in found if w.supervisor), key=lambda w: w.child or 0)
    assert [(w.supervisor, w.supervisor_pid, w.child, w.processes, w.restarts)
            for w in children] == [("sup-7f3a", 4242, 0, 2, 0), ("sup-7f3a", 4242, 1, 2, 3)]

    [sup] = after  # the first child stopped: it left the registry
    assert (sup.children_alive, sup.processes, [w.child for w in sup.children]) == (1, 2, [1])

    (code, text, _), (_, as_json, _), (status_code, status_text, _) = outputs
    assert code == 0 and status_code == 0
    lines = text.splitlines()
    assert lines[0] == "workers: 3 alive" and lines[1].startswith("WORKER")
    assert lines[2].startswith(alone[0].worker_id + " ")  # on its own: as before
    assert lines[3] == f"{HEADING}: 2/2 children alive, 3 restarts"
    assert [line.split()[0] for line in lines[4:]] == [w.worker_id for w in children]
    assert all(line.startswith("  ") for line in lines[4:])
    assert f"{HEADING}: 2/2 children alive, 3 restarts" in status_text.splitlines()
    rows = {w["worker_id"]: w for w in json.loads(as_json)}
    assert rows[alone[0].worker_id]["supervisor"] is None
    assert {k: rows[children[1].worker_id][k] for k in (
        "supervisor", "supervisor_pid", "child", "processes", "restarts")} == {
        "supervisor": "sup-7f3a", "supervisor_pid": 4242, "child": 1, "processes": 2,
        "restarts": 3}


def test_garbled_registry_entries_break_no_reader(capsys: pytest.CaptureFixture[str],
                                                  r: redis.Redis, redis_url: str,
                                                  ns: str) -> None:
    """A field that does not parse reads as absent: supervisor fields that are not numbers
    group nothing, and `sched workers` lists every entry."""
    garble(r, ns)
    with Client(redis_url, ns) as client:
        other, odd, unread = sorted(client.workers(), key=lambda w: w.worker_id)
        assert odd.alive and odd.supervisor is None and odd.supervisor_pid is None
        assert (other.worker_id, other.alive, other.pid, other.concurrency,
                other.by_queue["q"].succeeded_per_s) == ("<b>x", True, 0, 0, 1)
        assert unread.worker_id == "\ufffd" and not unread.alive  # its hash: not found
        assert client.supervisors() == []
    code, out, err = sched(capsys, redis_url, ns, "workers")
    assert code == 0 and "2 alive (3 known)" in out and "odd" in out, err


def test_terminal_escapes_in_registry_entries_do_not_reach_the_terminal(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str) -> None:
    """Anyone who can write to Redis can write a worker entry: its id, host and supervisor
    are printed with every character that does not print shown as U+FFFD."""
    keys = Keys(ns)
    now = int(r.time()[0]) * 1000
    wid = "w\x1b[2J\x1b[31mred"
    r.zadd(keys.workers, {wid: now})
    r.hset(keys.worker(wid), mapping={
        "host": "h\x07", "pid": 1, "lease_ms": 30_000, "seen_ms": now, "queues": "q\x1b[0m",
        "supervisor": "s\x1b]0;owned\x07", "supervisor_pid": 2, "child": 0, "processes": 1,
        "restarts": 0})
    code, out, err = sched(capsys, redis_url, ns, "workers")
    assert code == 0, err
    assert "w\ufffd[2J\ufffd[31mred" in out and "s\ufffd]0;owned\ufffd" in out, out
    assert not any(c in out for c in "\x1b\x07"), out


def test_a_supervisor_description_is_checked() -> None:
    text = msgspec.json.encode(REF).decode()
    assert SupervisorRef.parse(text) == REF
    for bad, says in [("{not json", "malformed"), ("[]", "Expected `object`"),
                      (text.replace('"index":0', '"index":2'), "index must be 0 .. 1"),
                      (text.replace('"pid":4242', '"pid":"4242"'), "Expected `int`"),
                      (text.replace('"id":"sup-7f3a"', '"id":""'), "1 to 200 characters")]:
        with pytest.raises(ValueError, match="SCHED_SUPERVISOR is not a supervisor's") as e:
            SupervisorRef.parse(bad)
        assert says in str(e.value), (bad, str(e.value))


@pytest.mark.slow
def test_sched_worker_reads_its_supervisor_from_the_environment(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str,
        app_env: dict[str, str]) -> None:
    """As the supervisor starts a child: `python -m scheduler.cli ... worker` with
    SCHED_SUPERVISOR set. A malformed value: one line, exit 1, nothing registered."""
    args = ("worker", "--app", "app_tasks:registry", "--log-level", "error")
    bad = sched_process(redis_url, ns, {**app_env, "SCHED_SUPERVISOR": '{"id": "x"}'}, *args)
    ref = msgspec.structs.replace(REF, pid=os.getpid(), index=1, restarts=1)
    child = sched_process(redis_url, ns, {**app_env, "SCHED_SUPERVISOR":
                                          msgspec.json.encode(ref).decode()}, *args)
    with running(child, bad), Client(redis_url, ns) as client:
        deadline = time.monotonic() + 30
        while not (found := [w for w in client.workers() if w.pid == child.pid]):
            assert child.poll() is None and time.monotonic() < deadline, "no child registered"
            time.sleep(0.05)
        assert found[0].supervisor == "sup-7f3a", found
        [sup] = client.supervisors()
        [w] = sup.children
        assert (sup.pid, sup.restarts, sup.children_alive, w.child, w.pid) == \
            (os.getpid(), 1, 1, 1, child.pid)
        assert bad.wait(timeout=30) == 1
        assert bad.stderr is not None
        lines = bad.stderr.read().decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "error: SCHED_SUPERVISOR is not a supervisor's description (Object missing "
            "required field `pid`)"), lines
        assert [x.pid for x in client.workers()] == [child.pid]  # the bad one never registered
        code, out, _ = sched(capsys, redis_url, ns, "workers")
    assert code == 0
    assert f"supervisor sup-7f3a on {HOST}, pid {os.getpid()}: 1/2 children alive, 1 restart" \
        in out.splitlines()
