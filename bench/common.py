"""Helpers shared by the benchmarks: namespaces, CPU counters, cleanup."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis


def fresh_namespace(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:6]}"


def redis_cpu_s(r: redis.Redis) -> float:
    info: Any = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def commandstats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    """(calls, usec) per command from INFO commandstats. Commands a script runs count both
    under their own name and inside the script's evalsha, so the two overlap."""
    info: Any = r.info("commandstats")
    return {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for k, v in info.items()}


def commandstats_per_job(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                         jobs: int, top: int = 12) -> dict[str, dict[str, float]]:
    """The commands that cost Redis the most over a run, as calls and microseconds per job."""
    out = {}
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if usec - u0 > 0:
            out[name] = {"calls": round((calls - c0) / jobs, 2), "us": round((usec - u0) / jobs, 2)}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["us"])[:top])


_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def postgres_cpu_s() -> float:
    """CPU seconds of every postgres process, plus what exited backends left in the
    postmaster's children counters: a connection's backend dies with it."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, _, rest = text.partition("(")[2].rpartition(")")
        if not name.startswith("postgres"):
            continue
        f = rest.split()
        total += (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / _TICK
    return total


def drop_namespace(r: redis.Redis, ns: str) -> None:
    """Delete a namespace's keys (on a cluster node: its own keys, one by one, since a node
    refuses a multi-key UNLINK across hash slots)."""
    pipe = r.pipeline(transaction=False)
    for i, key in enumerate(r.scan_iter(match=f"{ns}:*", count=5000)):
        pipe.unlink(key)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


def machine(r: redis.Redis) -> dict[str, Any]:
    info: Any = r.info("server")
    return {"python": platform.python_version(), "redis": info["redis_version"],
            "cpus": os.cpu_count(), "platform": platform.platform(), "at": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


@contextlib.contextmanager
def private_redis(replica_of: str | None = None) -> Iterator[str]:
    """A redis-server on a free loopback port, no persistence, stopped afterwards; with
    `replica_of` (a redis:// URL), a replica of that server, returned once it is in sync."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    follow = []
    if replica_of is not None:
        primary = redis.connection.parse_url(replica_of)  # type: ignore[no-untyped-call]
        follow = ["--replicaof", primary.get("host", "127.0.0.1"), str(primary["port"])]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", workdir, *follow],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                if not follow or client.info("replication").get(
                        "master_link_status") == "up":
                    break
                time.sleep(0.05)
                continue
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("could not start a private redis-server") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def history_schema(dsn: str | None, name: str, keep: bool = False) -> Iterator[str | None]:
    """A Postgres history DSN pointed at a schema of the run's own, dropped afterwards unless
    `keep`: each run starts from empty tables and leaves none for the next (a 5-minute run at
    10k jobs/s writes ~9M rows, and a growing table slowed later runs). Other DSNs (sqlite://,
    None) are yielded as given."""
    if not dsn or dsn.startswith("sqlite://"):
        yield dsn
        return
    import psycopg

    schema = name.replace("-", "_")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process (a graceful stop), then wait; kill what does not stop in 30 s."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
