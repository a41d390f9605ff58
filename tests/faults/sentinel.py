"""A replicated Redis under Sentinel on loopback for fault tests: a primary, its replicas and
three redis-sentinel processes in a temp dir, each stopped by pid. `url` is the sentinel URL
every process and client of the test uses; `kill_primary()` SIGKILLs whichever server is the
primary now."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from .harness import free_port, port_pings, stop_servers, wait_for

SERVICE = "sched-test"


class SentinelSet:
    def __init__(self, down_after_ms: int = 1000, replicas: int = 2) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sched-sentinel-"))
        self.down_after_ms = down_after_ms
        self.replicas = replicas
        self.ports = {name: free_port() for name in "abcd"[:1 + replicas]}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def _server(self, name: str, *args: str) -> None:
        data = self.dir / name
        data.mkdir()
        self.procs[name] = subprocess.Popen(
            ["redis-server", "--port", str(self.ports[name]), "--bind", "127.0.0.1",
             "--dir", str(data), "--save", "", "--appendonly", "no",
             "--maxmemory-policy", "noeviction", "--logfile", str(data / "redis.log"), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> SentinelSet:
        self._server("a")
        wait_for(lambda: port_pings(self.ports["a"]), 10, "the primary")
        for name in list(self.ports)[1:]:
            self._server(name, "--replicaof", "127.0.0.1", str(self.ports["a"]))
        wait_for(lambda: self._replica_synced(self.ports["a"]), 20, "the replicas' first sync")
        for i, port in enumerate(self.sentinel_ports):
            conf = self.dir / f"sentinel-{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"logfile {self.dir / f'sentinel-{i}.log'}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports['a']} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n")
            self.procs[f"sentinel-{i}"] = subprocess.Popen(
                ["redis-server", str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: all(self._sentinel_sees_replica(p) for p in self.sentinel_ports), 20,
                 "every sentinel to see the primary and its replica")
        return self

    def primary_port(self) -> int:
        with contextlib.closing(redis.Redis(port=self.sentinel_ports[0], socket_timeout=2)) as s:
            _, port = s.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def kill_primary(self) -> int:
        """SIGKILL the current primary; returns its port."""
        port = self.primary_port()
        name = next(n for n, p in self.ports.items() if p == port)
        self.procs[name].kill()
        self.procs[name].wait()
        return port

    def freeze_primary(self) -> int:
        """SIGSTOP the current primary (a slow one, not a dead one: SIGCONT it with thaw());
        returns its port."""
        port = self.primary_port()
        self.procs[next(n for n, p in self.ports.items() if p == port)].send_signal(
            signal.SIGSTOP)
        return port

    def thaw(self, port: int) -> None:
        self.procs[next(n for n, p in self.ports.items() if p == port)].send_signal(
            signal.SIGCONT)

    def role(self, port: int) -> str:
        with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
            return str(r.info("replication")["role"])

    def wait_failover(self, old_port: int, timeout: float = 30) -> float:
        """Seconds until the sentinels name another primary that answers as one."""
        t0 = time.monotonic()
        wait_for(lambda: self._promoted(old_port), timeout, "the sentinels' failover")
        return time.monotonic() - t0

    def _promoted(self, old_port: int) -> bool:
        try:
            port = self.primary_port()
        except redis.exceptions.RedisError:
            return False
        if port == old_port:
            return False
        with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
            try:
                return r.info("replication")["role"] == "master"
            except redis.exceptions.RedisError:
                return False

    def _replica_synced(self, primary: int) -> bool:
        with contextlib.closing(redis.Redis(port=primary, socket_timeout=2)) as r:
            try:
                info = r.info("replication")
            except redis.exceptions.RedisError:
                return False
        return int(info.get("connected_slaves", 0)) >= self.replicas and all(
            info.get(f"slave{i}", {}).get("state") == "online" for i in range(self.replicas))

    def _sentinel_sees_replica(self, port: int) -> bool:
        with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as s:
            try:
                return len(s.sentinel_slaves(SERVICE)) >= self.replicas
            except redis.exceptions.RedisError:
                return False

    def stop(self, keep: bool = False) -> None:
        """`keep`: leave the servers' and sentinels' logs (and their data) for study."""
        stop_servers(list(self.procs.values()), None if keep else self.dir)
        if keep:
            print(f"redis and sentinel logs kept in {self.dir}")


@contextlib.contextmanager
def sentinel_set(down_after_ms: int = 1000, replicas: int = 2) -> Iterator[SentinelSet]:
    s = SentinelSet(down_after_ms, replicas)
    failed = False
    try:
        yield s.start()
    except BaseException:
        failed = True  # what the sentinels did (elections, failovers) explains most failures
        raise
    finally:
        s.stop(keep=failed or bool(os.environ.get("SCHED_KEEP_FAULT_LOGS")))

