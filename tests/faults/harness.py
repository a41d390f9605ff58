"""Real processes for fault tests: `sched worker` and `sched scheduler` subprocesses with a
short lease, a private Redis server, and a TCP proxy that can cut or stall connections."""

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
from collections.abc import Callable, Iterator
from pathlib import Path

from conftest import SCHED, TESTS

LEASE_S = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Processes:
    """Starts and reaps worker and scheduler-node subprocesses of one namespace."""

    def __init__(self, redis_url: str, ns: str, *, lease_s: float = LEASE_S,
                 app_redis_url: str | None = None) -> None:
        self.redis_url = redis_url
        self.ns = ns
        self.lease_s = lease_s
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "SCHED_TEST_REDIS_URL_APP": app_redis_url or redis_url}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = Path(tempfile.mkdtemp(prefix="sched-faults-"))

    def _start(self, *args: str, redis_url: str | None = None) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{len(self.procs)}-{args[0]}.log", "wb") as log:
            p = subprocess.Popen([*SCHED, "--redis-url", redis_url or self.redis_url,
                                  "--namespace", self.ns, *args, "--log-level", "warning"],
                                 env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def worker(self, *args: str, redis_url: str | None = None) -> subprocess.Popen[bytes]:
        return self._start("worker", "--app", "app_tasks:registry", "--lease", str(self.lease_s),
                           "--grace", "1", *args, redis_url=redis_url)

    def node(self, *args: str) -> subprocess.Popen[bytes]:
        return self._start("scheduler", "--lease", str(self.lease_s), "--reclaim-interval",
                           "0.2", *args)

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

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

    def output(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                         for f in sorted(self.logs.iterdir()))


@contextlib.contextmanager
def processes(redis_url: str, ns: str, **kw: object) -> Iterator[Processes]:
    procs = Processes(redis_url, ns, **kw)  # type: ignore[arg-type]
    try:
        yield procs
    finally:
        procs.stop_all()
        shutil.rmtree(procs.logs, ignore_errors=True)


class RedisServer:
    """A private redis-server with AOF (appendfsync always) in a temp dir; restartable."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sched-redis-")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis
        client = redis.Redis(port=self.port)
        wait_for(lambda: _pings(client), 10, "the private redis-server")
        client.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _pings(client: object) -> bool:
    import redis
    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except redis.exceptions.ConnectionError:
        return False


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
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
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
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
