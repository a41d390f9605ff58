"""A Redis Cluster on loopback for tests: 3 masters and 3 replicas (`cluster-enabled yes`,
joined by `redis-cli --cluster create`), each a redis-server in a temp dir stopped by pid.
`url` names one node, as a user would; `kill_master()` SIGKILLs a master and `reshard()`
moves hash slots from one master to another with `redis-cli --cluster reshard`."""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from .harness import port_pings, stop_servers, wait_for


class ClusterSet:
    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sched-cluster-"))
        self.count = masters * (1 + replicas)
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.ports = [_cluster_port() for _ in range(self.count)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def _server(self, port: int) -> None:
        data = self.dir / str(port)
        data.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms), "--save", "",
             "--appendonly", "no", "--maxmemory-policy", "noeviction"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> ClusterSet:
        for port in self.ports:
            self._server(port)
        for port in self.ports:
            wait_for(lambda p=port: port_pings(p), 10, f"redis-server on {port}")
        subprocess.run(
            ["redis-cli", "--cluster", "create",
             *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        wait_for(self.healthy, 30, "the cluster to be ok on every node")
        return self

    def healthy(self) -> bool:
        for port in self.live_ports():
            with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
                try:
                    if r.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
                        return False
                except redis.exceptions.RedisError:
                    return False
        return self._replicas_synced()

    def _replicas_synced(self) -> bool:
        masters = self.masters()
        return len(masters) * (1 + self.replicas) <= len(self.live_ports()) and all(
            self._synced(p) for p in masters)

    def _synced(self, port: int) -> bool:
        with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
            info = r.info("replication")
        return int(info.get("connected_slaves", 0)) >= self.replicas and all(
            info.get(f"slave{i}", {}).get("state") == "online" for i in range(self.replicas))

    def live_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def masters(self) -> list[int]:
        """Ports of the masters that serve slots, as a live node sees them."""
        for port in self.live_ports():
            with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
                try:
                    shards = r.execute_command("CLUSTER SLOTS")
                except redis.exceptions.RedisError:
                    continue
            return sorted({int(s[2][1]) for s in shards})
        return []

    def master_of(self, key: str) -> int:
        with contextlib.closing(redis.Redis(port=self.live_ports()[0], socket_timeout=2)) as r:
            slot = int(r.execute_command("CLUSTER KEYSLOT", key))
            for lo, hi, master, *_ in r.execute_command("CLUSTER SLOTS"):
                if lo <= slot <= hi:
                    return int(master[1])
        raise AssertionError(f"no master serves {key!r}")

    def kill(self, port: int) -> None:
        self.procs[port].kill()
        self.procs[port].wait()

    def kill_master(self, port: int) -> float:
        """SIGKILL a master; returns seconds until its replica serves its slots."""
        self.kill(port)
        t0 = time.monotonic()
        wait_for(lambda: port not in self.masters() and self._all_slots_served(), 30,
                 "the replica's promotion")
        return time.monotonic() - t0

    def add_master(self) -> int:
        """Start one more node and join it to the cluster as a master with no slots (yet);
        returns its port once every node knows it."""
        port = _cluster_port()
        self.ports.append(port)
        self._server(port)
        wait_for(lambda: port_pings(port), 10, f"redis-server on {port}")
        subprocess.run(["redis-cli", "--cluster", "add-node", f"127.0.0.1:{port}",
                        f"127.0.0.1:{self.masters()[0]}"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        wait_for(lambda: all(self._knows(p, port) for p in self.live_ports())
                 and self._state_ok(port), 30, "every node to know the new one")
        return port

    def _state_ok(self, port: int) -> bool:
        with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
            try:
                return bool(r.execute_command("CLUSTER INFO").get("cluster_state") == "ok")
            except redis.exceptions.RedisError:
                return False

    def _knows(self, port: int, other: int) -> bool:
        with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
            try:
                nodes = r.execute_command("CLUSTER NODES")
            except redis.exceptions.RedisError:
                return False
        seen = nodes.get(f"127.0.0.1:{other}")  # redis-py parses CLUSTER NODES into a dict
        return seen is not None and "handshake" not in seen["flags"]

    def restart(self, port: int) -> None:
        """Start a killed node again on its own data dir: it rejoins the cluster (a master
        that was failed over comes back as its successor's replica)."""
        self._server(port)
        wait_for(lambda: port_pings(port), 10, f"redis-server on {port}")

    def _all_slots_served(self) -> bool:
        return any(self._state_ok(p) for p in self.live_ports())

    def node_id(self, port: int) -> str:
        with contextlib.closing(redis.Redis(port=port, socket_timeout=2)) as r:
            return str(r.execute_command("CLUSTER MYID").decode())

    def reshard(self, key: str, to_port: int) -> None:
        """Move the hash slot of `key` (and only it) to the master on `to_port`, keys and all,
        the way `redis-cli --cluster reshard` does: IMPORTING / MIGRATING, MIGRATE in
        batches, then SETSLOT NODE on every master."""
        source = self.master_of(key)
        if source == to_port:
            return
        slot, _, _ = self.start_migration(key, to_port)
        self.finish_migration(slot, source, to_port)

    def start_migration(self, key: str, to_port: int) -> tuple[int, str, str]:
        with contextlib.closing(redis.Redis(port=to_port, socket_timeout=2)) as r:
            slot = int(r.execute_command("CLUSTER KEYSLOT", key))
        source = self.master_of(key)
        src, dst = self.node_id(source), self.node_id(to_port)
        with contextlib.closing(redis.Redis(port=to_port, socket_timeout=5)) as t, \
                contextlib.closing(redis.Redis(port=source, socket_timeout=5)) as s:
            t.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src)
            s.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst)
        return slot, src, dst

    def finish_migration(self, slot: int, source: int, to_port: int) -> None:
        dst = self.node_id(to_port)
        with contextlib.closing(redis.Redis(port=source, socket_timeout=5)) as s:
            while True:
                keys = s.execute_command("CLUSTER GETKEYSINSLOT", slot, 50)
                if not keys:
                    break
                s.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        for port in (to_port, source, *self.masters()):
            with contextlib.closing(redis.Redis(port=port, socket_timeout=5)) as m:
                m.execute_command("CLUSTER SETSLOT", slot, "NODE", dst)

    def stop(self) -> None:
        stop_servers(list(self.procs.values()), self.dir)


@contextlib.contextmanager
def cluster_set(**kw: int) -> Iterator[ClusterSet]:
    c = ClusterSet(**kw)
    try:
        yield c.start()
    finally:
        c.stop()


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = random.randrange(20000, 55000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port

