"""Helpers shared by the tests: run transitions on one job's shard, run a worker until a
condition holds, call the CLI in-process, and serve the web console as a process."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import redis
import redis.asyncio

from conftest import SCHED
from scheduler import Client, Registry, RetryPolicy, SlotStatus
from scheduler.cli.main import main
from scheduler.core import events
from scheduler.core.keys import DISPATCH_GROUP, HISTORY_GROUP, Keys, shard_of
from scheduler.dev.embedded import free_port
from scheduler.history import reads as hash_read
from scheduler.history.snapshotter import Snapshotter, SnapshotterConfig
from scheduler.history.store import open_store
from scheduler.node.node import NodeConfig, SchedulerNode
from scheduler.redis.clients import async_redis
from scheduler.redis.clock import ManualClock
from scheduler.scripts import calls as scripts
from scheduler.scripts import replies
from scheduler.worker.worker import SupervisorRef, Worker, WorkerConfig

W = "worker-1"
LEASE = 30_000


class Shard:
    """One job's shard, with helpers that run transitions the way a worker does."""

    def __init__(self, r: redis.Redis, client: Client, clock: ManualClock, job_id: str) -> None:
        self.r, self.client, self.clock, self.job_id = r, client, clock, job_id
        self.keys = client.keys
        self.shard = shard_of(job_id, client.shards)
        self.prefix = self.keys.prefix(self.shard)
        self.slot_id = client.slots(job_id)[0].slot_id
        self.queue = client.get_job(job_id).queue
        self.stream = self.keys.queue(self.shard, self.queue)
        r.xgroup_create(self.stream, DISPATCH_GROUP, id="0", mkstream=True)

    def run(self, call: scripts.Call) -> Any:
        return scripts.run_sync(self.r, [call])[0]

    def read(self, consumer: str = W) -> list[tuple[str, bytes, str]]:
        reply = self.r.xreadgroup(DISPATCH_GROUP, consumer, {self.stream: ">"}, count=10)
        return [(self.queue, mid, f[b"s"].decode()) for _, msgs in reply for mid, f in msgs]

    def claim(self, entries: list[tuple[str, bytes, str]], worker: str = W) -> list[Any]:
        """claim.lua's flat reply, one list per entry ([code, values...])."""
        return replies.claim_items(self.run(scripts.claim(
            self.prefix, self.clock.now_ms(), worker, LEASE, entries)))

    def slot(self) -> Any:
        return self.client.get_slot(self.slot_id)

    def hand_over(self, worker: str) -> None:
        """W claims the slot (attempt 1) and releases it; `worker` claims it (attempt 2)."""
        self.claim(self.read())
        now = self.clock.now_ms()
        self.run(scripts.release(self.prefix, now, 1000, W,
                                 [scripts.Released(self.slot_id, 1, now)]))
        self.claim(self.read(consumer=worker), worker=worker)

    def events(self) -> list[tuple[str, list[dict[str, Any]]]]:
        out = []
        for _, f in self.r.xrange(self.keys.events(self.shard)):
            out.append((f[b"type"].decode(), events.records(f)))
        return out


def make(r: redis.Redis, client: Client, clock: ManualClock, **kw: Any) -> Shard:
    """A job in a queue of its own, so several in one test never share a stream."""
    kw.setdefault("queue", f"q{next(_queues)}")
    return Shard(r, client, clock, client.submit("t", {"n": 1}, **kw))


_queues = itertools.count()


async def run_until(redis_url: str, ns: str, registry: Registry, done: Callable[[], bool], *,
                    timeout: float = 30, node: bool = False, node_config: NodeConfig | None = None,
                    workers: int = 1, **config: Any) -> Worker:
    """Run `workers` workers, each on a connection of its own (and a scheduler node, for
    retries), until done() or the timeout; returns the first."""
    clients = [async_redis(redis_url) for _ in range(workers)]
    client = clients[0]
    config.setdefault("block_ms", 50)
    services: list[Any] = [Worker(c, registry, namespace=ns, config=WorkerConfig(**config))
                           for c in clients]
    worker: Worker = services[0]
    if node:
        services.append(SchedulerNode(client, namespace=ns, config=node_config))
    tasks = [asyncio.create_task(s.run()) for s in services]
    deadline = time.monotonic() + timeout
    try:
        while not done():
            assert time.monotonic() < deadline, "timed out waiting for the runs"
            for t in tasks:
                if t.done():
                    t.result()
            await asyncio.sleep(0.01)
    finally:
        for s in services:
            s.stop()
        await asyncio.gather(*tasks)
        for c in clients:
            await c.aclose()
    return worker


@asynccontextmanager
async def workers_of(redis_url: str, ns: str, supervisors: list[SupervisorRef | None]
                     ) -> AsyncIterator[list[Worker]]:
    """Workers without handlers, each on a connection of its own, one per entry: a child of
    that supervisor (as `sched worker --processes N` starts them), or on its own for None.
    Stopped when the block ends."""
    async with running_workers(redis_url, ns, Registry(), len(supervisors),
                               supervisors) as workers:
        yield workers


@asynccontextmanager
async def running_workers(redis_url: str, ns: str, registry: Registry, n: int,
                          supervisors: list[SupervisorRef | None] | None = None,
                          **config: Any) -> AsyncIterator[list[Worker]]:
    """n workers of `registry`, each on a connection of its own (a cluster client on a
    Cluster), running before anything is submitted, as users start them; stopped (drained)
    when the block ends. `supervisors`: the one each worker is a child of (None: none)."""
    conns = [async_redis(redis_url) for _ in range(n)]
    config.setdefault("block_ms", 50)
    workers = [Worker(c, registry, namespace=ns, config=WorkerConfig(**config), supervisor=s)
               for c, s in zip(conns, supervisors or [None] * n, strict=True)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield workers
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*tasks)
        for c in conns:
            await c.aclose()


async def until(what: str, done: Callable[[], Awaitable[bool]], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not await done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def garble(r: redis.Redis, ns: str) -> None:
    """Registry entries as anyone who can write to Redis may write them: a child whose
    supervisor's pid is no number, and fields of every kind that do not parse."""
    keys = Keys(ns)
    now = int(r.time()[0]) * 1000
    r.zadd(keys.workers, {"odd": now, "<b>x": now, b"\xff": now})  # the last: not UTF-8
    r.hset(keys.worker("odd"), mapping={"host": "h", "pid": 1, "lease_ms": 30_000,
                                        "seen_ms": now, "supervisor": "s", "supervisor_pid": "x",
                                        "child": 0, "processes": 2, "restarts": 0})
    r.hset(keys.worker("<b>x"), mapping={
        "pid": "x", "lease_ms": "abc", "seen_ms": now, "concurrency": "9" * 5000,
        "rates": '{"q": [1]}', "queue_inflight": "[1]", b"\xfe": b"\xff"})


def statuses(client: Client, ids: list[str]) -> Counter[str]:
    return Counter(s.status.value for i in ids for s in client.slots(i))


def sched(capsys: pytest.CaptureFixture[str], redis_url: str, ns: str,
          *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["--redis-url", redis_url, "--namespace", ns, *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err




def sched_process(redis_url: str, ns: str, env: dict[str, str],
                  *args: str) -> subprocess.Popen[bytes]:
    """A real `sched` process (`scheduler`, `worker`...) on the namespace; the handlers of
    tests/app_tasks.py record to the Redis under test."""
    return subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, *args],
                            env={**env, "SCHED_TEST_REDIS_URL_APP": redis_url},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@contextmanager
def running(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stops the processes when the block ends (SIGTERM; SIGKILL after 20 s), printing the
    stderr of each that did not exit cleanly."""
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                _, err = p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode not in (0, -signal.SIGKILL):
                print(err.decode()[-3000:])


def pending(r: redis.Redis, ns: str) -> int:
    """Events delivered to snapshotters and not acked yet, over every shard of the namespace
    (0 for a shard whose stream or group does not exist yet; any other error is raised)."""
    keys, total = Keys(ns), 0
    for s in range(int(r.hget(keys.meta, "shards") or 0)):  # type: ignore[arg-type]
        try:
            total += int(r.xpending(keys.events(s), HISTORY_GROUP)["pending"])
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
    return total


async def drain(redis_url: str, ns: str, store_dsn: str, *, config: SnapshotterConfig,
                hook: Callable[[Snapshotter], None] | None = None) -> Snapshotter:
    client = async_redis(redis_url)
    snap = Snapshotter(client, open_store(store_dsn), namespace=ns, config=config)
    if hook:
        hook(snap)
    hash_read.start(client)  # reads as Snapshotter.run makes them
    try:
        while await snap.run_once():
            pass
        await snap.flush()
    finally:
        await hash_read.stop(client)
        await client.aclose()
        snap.store.close()
    return snap


def make_dead(client: Client, redis_url: str, ns: str, n: int = 1,
              error: str = "no") -> list[str]:
    """n jobs whose one attempt failed (a real worker ran them): their slots are dead."""
    registry = Registry()

    @registry.task("t.dies")
    async def dies(ctx: Any, payload: Any) -> None:
        raise ValueError(error)

    ids = client.submit_many([{"task": "t.dies", "payload": i,
                               "retry": RetryPolicy(max_attempts=1)} for i in range(n)])
    asyncio.run(run_until(redis_url, ns, registry, lambda: all(
        client.slots(j)[0].status is SlotStatus.DEAD for j in ids)))
    return ids


def serve_console(redis_url: str, ns: str, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """A `sched web ARGS` process on a free loopback port, once it answers: (process, base
    URL). Stop it with `running`."""
    port = free_port()
    proc = sched_process(redis_url, ns, dict(os.environ), "web", "--port", str(port), *args)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=2).read()
            return proc, base
        except (urllib.error.URLError, ConnectionError):
            if proc.poll() is not None or time.monotonic() > deadline:
                with running(proc):
                    pytest.fail("sched web did not start")
            time.sleep(0.1)


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET, an error status included."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def materialize(url: str, ns: str, clock: ManualClock, shards: int) -> None:
    """One pass of a materializer over the namespace's `shards` shards, on `clock`."""
    from scheduler.node.materializer import Materializer

    async def go() -> None:
        client = async_redis(url)
        try:
            await Materializer(client, [Keys(ns).prefix(s) for s in range(shards)],
                               clock).run_once()
        finally:
            await client.aclose()
    asyncio.run(go())


@contextmanager
def outbox_schema(dsn: str, ns: str) -> Iterator[str]:
    """A fresh outbox schema of the namespace's own in Postgres, dropped afterwards."""
    import psycopg

    from scheduler.outbox.rows import upgrade

    schema = f"ob_{ns.replace('-', '_')[-12:].lower()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        upgrade(admin, schema)
    try:
        yield schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
