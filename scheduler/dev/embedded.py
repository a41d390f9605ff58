"""A private `redis-server` for `sched dev` on a laptop with none running: started in a temp
dir on a free port, without persistence, and stopped (its files removed) with the process."""

from __future__ import annotations

import shutil
import socket
import subprocess  # nosec B404 # runs redis-server alone, with a fixed argument list
import tempfile
import time
from pathlib import Path

import redis

import scheduler.redis.transport as transport
from scheduler.core.errors import ConfigError
from scheduler.redis.clients import sync_redis, where
from scheduler.redis.failures import REDIS_ERRORS, translate


def answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether a Redis answers PING at `url`; False only when nothing answers there. A Redis
    that answers but refuses (a wrong password, no permission) raises RedisRefused: the
    user's jobs must not go to a private Redis because a password was mistyped."""
    client = sync_redis(url, timeout_s=timeout_s, retries=0)
    try:
        return bool(transport.call_sync(client, "ping"))
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
        if isinstance(exc, redis.exceptions.AuthenticationError):
            raise translate(exc, where(client)) from exc
        return False
    except REDIS_ERRORS as exc:
        raise translate(exc, where(client)) from exc
    finally:
        client.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedRedis:
    def __init__(self, executable: str = "redis-server") -> None:
        path = shutil.which(executable)
        if path is None:
            raise ConfigError(f"{executable} is not installed: install Redis 7 (e.g. "
                              f"`apt-get install redis-server`) or point --redis-url at one")
        self.executable = path
        self.dir = ""
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        self.dir = tempfile.mkdtemp(prefix="sched-dev-redis-")
        log = Path(self.dir) / "redis.log"
        for _ in range(3):  # another process may take the free port before redis binds it
            self.port = free_port()
            self.process = subprocess.Popen(  # nosec B603 # redis-server, no shell, no input
                [self.executable, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--dir", self.dir, "--save", "", "--appendonly", "no",
                 "--logfile", str(log)], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + timeout_s
            while self.process.poll() is None and time.monotonic() < deadline:
                if answers(self.url, 0.2):
                    return self
                time.sleep(0.05)
            self.stop(keep_dir=True)
        tail = log.read_text()[-500:] if log.exists() else ""
        shutil.rmtree(self.dir, ignore_errors=True)
        raise ConfigError(f"the private redis-server did not start: {tail.strip() or 'no log'}")

    def stop(self, keep_dir: bool = False) -> None:
        """Idempotent."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if not keep_dir and self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
