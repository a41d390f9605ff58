"""Real processes for fault tests: a private Redis under test (restartable, with AOF when a
test needs it, that can be driven out of memory), `sched worker`, `sched scheduler` and
`sched snapshotter` subprocesses with a short lease, a fresh Postgres database for the
snapshotter's history store, a TCP proxy per worker that can cut or stall its connections,
and the bookkeeping of which worker each fault touched (the checker's ground truth)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import redis

from conftest import POSTGRES_DSN, SCHED, TESTS
from scheduler import Client
from scheduler.core import namespace
from scheduler.history.store import open_store

from .truth import Outage, Truth, wall_ms

LEASE_S = 2.0
SHARD_LEASE_S = 2.0
SWEEP_INTERVAL_S = 1.0
# How long past its lease a slot may stay running before it is reclaimed: the reclaim
# interval, a dead owner's shard lease and its next tick, and a Redis fault of up to 3 s.
GRACE_MS = 6000
# A killed node's shards: its last renewal (up to a tick before) runs out, then another node
# takes them at its next tick (scheduler/node/leases.py ticks every ttl/3).
SHARD_TAKEOVER_MS = int(SHARD_LEASE_S * 1000 * 4 / 3)
# A killed snapshotter's pending events are taken over by the next one this long after
# its last read (30 s by default).
SNAPSHOT_CLAIM_IDLE_S = 2.0
# A consumer group of every events stream that never reads: the snapshotter trims what every
# group acked, and the checker reads the whole stream (the commit and orphan rules).
KEEP_EVENTS_GROUP = "fault-checker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_pings(port: int) -> bool:
    """A redis-server answers on this loopback port."""
    with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
        try:
            return bool(r.ping())
        except redis.exceptions.ConnectionError:
            return False


def stop_servers(procs: list[subprocess.Popen[bytes]], workdir: Path | None) -> None:
    """SIGKILL every process of a test's server set, reap them, remove their directory
    (None: keep it)."""
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)


def _stat(path: Path) -> list[str] | None:
    """A process's /proc stat fields after its name (state, ppid, ...); None once gone."""
    try:
        return path.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def children_of(pid: int) -> set[int]:
    """The live child processes of a process (Linux: /proc), zombies left out."""
    return {int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
            if (f := _stat(p)) is not None and int(f[1]) == pid and f[0] != "Z"}


def pid_alive(pid: int) -> bool:
    """The process runs (a zombie whose parent has not reaped it does not)."""
    f = _stat(Path(f"/proc/{pid}/stat"))
    return f is not None and f[0] != "Z"


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class RedisServer:
    """A private redis-server in a temp dir: the Redis under test. `aof=True` makes it
    durable (appendfsync always) so that a restart keeps every acknowledged write."""

    def __init__(self, *, aof: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="sched-redis-")
        self.port = free_port()
        self.aof = aof
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        persistence = (["--appendonly", "yes", "--appendfsync", "always"] if self.aof
                       else ["--appendonly", "no"])
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--maxmemory-policy", "noeviction", *persistence],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = self.client()
        wait_for(lambda: _pings(client), 10, "the private redis-server")
        client.close()
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def oom(self, on: bool) -> None:
        """Every write refused with OOM (maxmemory below what is used, noeviction), or not."""
        with contextlib.closing(self.client()) as c:
            c.config_set("maxmemory", 1 if on else 0)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def redis_server(*, aof: bool = False) -> Iterator[RedisServer]:
    server = RedisServer(aof=aof).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def history_database() -> Iterator[str]:
    """A fresh Postgres database (on the test server, conftest.POSTGRES_DSN) for one test's
    history store, its schema migrated as `sched db upgrade` does; dropped afterwards, with
    whatever connection a killed snapshotter left open."""
    name = f"sched_faults_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            dsn = psycopg.conninfo.make_conninfo(POSTGRES_DSN, dbname=name)
            store = open_store(dsn)
            store.upgrade()
            store.close()
            yield dsn
        finally:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@contextlib.contextmanager
def outbox_schema() -> Iterator[tuple[str, str]]:
    """(DSN, schema) of a fresh outbox in the test database, made as `sched db upgrade
    --outbox` makes it, with an `orders` table beside it for the application's own rows;
    dropped afterwards."""
    from scheduler.outbox.rows import upgrade

    schema = f"ob_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5) as admin:
        upgrade(admin, schema)
        admin.execute(f'CREATE TABLE "{schema}".orders (id bigserial PRIMARY KEY, job_id text)')
        try:
            yield POSTGRES_DSN, schema
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


class Processes:
    """Starts and reaps the worker and scheduler-node subprocesses of one namespace, and
    records in `truth.faulted_pids` every worker a fault touched."""

    def __init__(self, redis_url: str, ns: str, truth_url: str, truth: Truth, *,
                 lease_s: float = LEASE_S) -> None:
        self.redis_url = redis_url
        self.ns = ns
        self.lease_s = lease_s
        self.truth = truth
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "SCHED_TEST_REDIS_URL_APP": truth_url}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.roles: dict[int, str] = {}  # pid -> "worker" | "scheduler" | "snapshotter"
        self.history_dsn: str | None = None  # where the snapshotters write, once one started
        self.killed: set[int] = set()
        self.proxies: dict[int, Proxy] = {}  # worker pid -> its proxy
        self.logs = Path(tempfile.mkdtemp(prefix="sched-faults-"))

    def _start(self, *args: str, redis_url: str | None = None) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{len(self.procs)}-{args[0]}.log", "wb") as log:
            p = subprocess.Popen([*SCHED, "--redis-url", redis_url or self.redis_url,
                                  "--namespace", self.ns, *args, "--log-level", "warning"],
                                 env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.roles[p.pid] = args[0]
        return p

    def worker(self, *args: str, proxied: bool = False) -> subprocess.Popen[bytes]:
        """A worker; `proxied` puts a Proxy of its own between it and Redis."""
        proxy = Proxy(int(self.redis_url.rsplit(":", 1)[1].split("/")[0])) if proxied else None
        p = self._start("worker", "--app", "app_tasks:registry", "--lease", str(self.lease_s),
                        "--grace", "1", *args, redis_url=proxy.url if proxy else None)
        if proxy:
            self.proxies[p.pid] = proxy
        return p

    def node(self, *args: str) -> subprocess.Popen[bytes]:
        return self._start("scheduler", "--lease", str(self.lease_s), "--reclaim-interval",
                           "0.2", "--shard-lease", str(SHARD_LEASE_S), "--sweep-interval",
                           str(SWEEP_INTERVAL_S), *args)

    def snapshotter(self, dsn: str) -> subprocess.Popen[bytes]:
        """`sched snapshotter` into the history store at `dsn` (history_database()). Once one
        has run, the scenario's check waits for history to catch up and judges it (the
        history rule)."""
        if self.history_dsn is None:
            self._keep_events()
        self.history_dsn = dsn
        return self._start("snapshotter", "--postgres-dsn", dsn, "--claim-idle",
                           str(SNAPSHOT_CLAIM_IDLE_S))

    def relay(self, dsn: str, schema: str, *args: str) -> subprocess.Popen[bytes]:
        """`sched outbox relay` of the outbox in `schema` (outbox_schema())."""
        return self._start("outbox", "relay", "--postgres-dsn", dsn, "--outbox-schema", schema,
                           "--poll", "0.5", *args)

    def _keep_events(self) -> None:
        with Client(self.redis_url, self.ns) as c:
            shards = c.create_namespace()
            pipe = c.redis.pipeline(transaction=False)
            namespace.create_groups(pipe, (c.keys.events(s) for s in range(shards)),
                                    KEEP_EVENTS_GROUP)
            namespace.check_groups(pipe.execute(raise_on_error=False))

    def workers(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.alive() if self.roles[p.pid] == "worker"]

    # --- faults: each records the workers it touched ----------------------------------

    def kill(self, p: subprocess.Popen[bytes]) -> None:
        self.truth.faulted_pids.add(p.pid)
        if self.roles[p.pid] == "scheduler":  # its shards wait out their leases, then a tick
            now = wall_ms()
            self.truth.outages.append(Outage("node killed", now, now + SHARD_TAKEOVER_MS))
        self.killed.add(p.pid)
        p.send_signal(signal.SIGKILL)
        p.wait()
        if p.pid in self.proxies:
            self.proxies.pop(p.pid).close()

    def kill_child(self, pid: int) -> None:
        """SIGKILL a worker child of a supervisor (`--processes N`), which is no Popen of
        ours: the supervisor reaps it."""
        self.truth.faulted_pids.add(pid)
        os.kill(pid, signal.SIGKILL)

    def freeze(self, p: subprocess.Popen[bytes], seconds: float) -> None:
        self.truth.faulted_pids.add(p.pid)
        p.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        p.send_signal(signal.SIGCONT)

    def stall(self, p: subprocess.Popen[bytes], seconds: float) -> None:
        """Its connections stay open and carry nothing for `seconds`."""
        self.truth.faulted_pids.add(p.pid)
        proxy = self.proxies[p.pid]
        proxy.stall()
        time.sleep(seconds)
        proxy.restore()

    def touch_all_workers(self) -> None:
        """A fault of Redis itself (OOM, restart) may cost any worker its leases."""
        self.truth.faulted_pids |= {p.pid for p in self.workers()}

    @contextlib.contextmanager
    def redis_outage(self, what: str) -> Iterator[None]:
        """A fault of Redis itself while the block runs: any worker may lose its leases, and
        no node can reclaim. The outage lasts one lease tick longer: shard leases that ran
        out meanwhile are taken back at the nodes' next tick."""
        self.touch_all_workers()
        outage = Outage(what, wall_ms())
        self.truth.outages.append(outage)
        try:
            yield
        finally:
            outage.end_ms = wall_ms() + int(SHARD_LEASE_S * 1000 / 3)

    # --- reaping ------------------------------------------------------------------------

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def died(self) -> list[str]:
        """Processes that exited although no fault killed them: a violation in itself."""
        return [f"process: {self.roles[p.pid]} pid {p.pid} exited with code {p.returncode}"
                for p in self.procs if p.poll() is not None and p.pid not in self.killed]

    def stop_all(self) -> None:
        for p in self.alive():
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for proxy in self.proxies.values():
            proxy.close()
        self.proxies.clear()

    def output(self) -> str:
        """The tail of every process's log, after asking each live one to log where its
        tasks wait (SIGUSR1, cli/run.py)."""
        for p in self.alive():
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                         for f in sorted(self.logs.iterdir()))


@contextlib.contextmanager
def processes(redis_url: str, ns: str, truth_url: str, truth: Truth,
              **kw: float) -> Iterator[Processes]:
    procs = Processes(redis_url, ns, truth_url, truth, **kw)
    failed = False
    try:
        yield procs
    except BaseException:
        # A failure seen once in CI may not come back: its logs are the next person's lead.
        failed = True
        print(f"the processes' logs, at the failure:\n{procs.output()}")
        raise
    finally:
        procs.stop_all()
        if failed or os.environ.get("SCHED_KEEP_FAULT_LOGS"):  # whole logs, to study
            print(f"process logs kept in {procs.logs}")
        else:
            shutil.rmtree(procs.logs, ignore_errors=True)


class Proxy:
    """TCP proxy to Redis in a background thread. `cut()` drops every connection and refuses
    new ones; `stall()` keeps connections open but forwards nothing; `restore()` undoes both."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.mode = "open"
        self.loop = asyncio.new_event_loop()
        self.conns: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self._ready.wait(5)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.flowing = asyncio.Event()
        self.flowing.set()
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        self.loop.run_forever()
        server.close()
        for w in self.conns:
            w.close()
        tasks = asyncio.all_tasks(self.loop)
        for t in tasks:
            t.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.run_until_complete(server.wait_closed())
        self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "cut":
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.conns |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self.flowing.wait()
                    if self.mode == "cut":
                        break
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.conns -= {writer, up_writer}

    def _set(self, mode: str) -> None:
        def apply() -> None:
            self.mode = mode
            if mode == "stall":
                self.flowing.clear()
            else:
                self.flowing.set()
            if mode == "cut":
                for w in list(self.conns):
                    w.close()
        self.loop.call_soon_threadsafe(apply)

    def cut(self) -> None:
        self._set("cut")

    def stall(self) -> None:
        self._set("stall")

    def restore(self) -> None:
        self._set("open")

    def close(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
