"""Sentinel URLs as every process and client takes them; `durability="replicated"`: a
submit that returns only once WAIT saw the replicas confirm it, and says so in one line (and
a DurabilityError naming what was written) when they do not; and no password printed. The
failover itself is tests/faults/test_sentinel_failover.py."""

from __future__ import annotations

import subprocess

import pytest
import redis
from faults.harness import RedisServer

from conftest import SCHED, ns_keys
from scheduler import Client, DurabilityError
from scheduler.core.errors import ConfigError, RedisRefused, ValidationError
from scheduler.dev.embedded import answers
from scheduler.redis.clients import sync_redis, where
from scheduler.redis.urls import SentinelUrl, parse_sentinel


def test_sentinel_urls_parse() -> None:
    assert parse_sentinel("redis://127.0.0.1:6379/0") is None
    s = parse_sentinel("redis+sentinel://app:s%40cret@10.0.0.1:26379,[::1]:26380/orders/2"
                       "?sentinel_password=x")
    assert s == SentinelUrl(sentinels=(("10.0.0.1", 26379), ("::1", 26380)), service="orders",
                            db=2, username="app", password="s@cret", tls=False,
                            tls_options=(), sentinel_username=None, sentinel_password="x")
    t = parse_sentinel("rediss+sentinel://h:1/m?ssl_ca_certs=/ca.pem")
    assert t is not None and t.tls and t.db == 0 and t.tls_options == (("ssl_ca_certs",
                                                                        "/ca.pem"),)


@pytest.mark.parametrize("url, says", [
    ("redis+sentinel://h:26379", "names its service"),
    ("redis+sentinel://h:26379/m/x", "names its service"),
    ("redis+sentinel://h/m", "not host:port"),
    ("redis+sentinel://h:1,:2/m", "not host:port"),
    ("redis+sentinel://h:1/m?timeout=3", "unknown option"),
])
def test_a_bad_sentinel_url_is_one_line(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_sentinel(url)
    with pytest.raises(ConfigError, match=says):
        Client(url)


def test_a_sentinel_client_names_its_service() -> None:
    client = sync_redis("redis+sentinel://127.0.0.1:1/orders")
    assert where(client) == "the primary of sentinel service 'orders'"
    client.close()


def test_bad_durability_options_are_refused_before_anything_is_written(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    with pytest.raises(ValidationError, match="durability"):
        Client(redis_url, ns, durability="fsync-ish")
    with pytest.raises(ValidationError, match="replicas"):
        Client(redis_url, ns, replicas=0)
    with Client(redis_url, ns) as client:
        with pytest.raises(ValidationError, match="durability"):
            client.submit("t", durability="eventually")
    assert ns_keys(r, ns) == []


def test_replicated_without_replicas_says_what_was_written(redis_url: str, ns: str,
                                                           r: redis.Redis) -> None:
    """The shared test Redis has no replica: WAIT confirms none, so the call fails after
    the timeout, and the jobs it wrote are named (they are in Redis, only not replicated)."""
    with Client(redis_url, ns, durability="replicated", replica_timeout_s=0.05) as client:
        with pytest.raises(DurabilityError, match="0 of the 1 replica") as caught:
            client.submit_many([{"task": "t", "dedupe_key": f"k{i}"} for i in range(3)])
        assert caught.value.confirmed == 0 and caught.value.wanted == 1
        assert len(caught.value.written) == 3
        assert all(client.get_job(j).task == "t" for j in caught.value.written)
        # The call's own durability wins over the client's: primary returns at once.
        assert client.submit_many([{"task": "t", "dedupe_key": "k0"}],
                                  durability="primary") == caught.value.written[:1]


def test_the_cli_says_durability_failures_in_one_line(redis_url: str, ns: str,
                                                      app_env: dict[str, str]) -> None:
    out = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, "submit", "t",
                          "--durability", "replicated", "--replica-timeout", "0.05"],
                         capture_output=True, text=True, env=app_env)
    assert out.returncode == 1
    assert "replica" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_a_bad_url_error_does_not_print_its_password() -> None:
    with pytest.raises(ConfigError) as caught:
        Client("redis://:hunter2@h:notaport/0")
    assert "hunter2" not in str(caught.value)


def test_a_wrong_password_is_an_error_not_a_missing_redis(tmp_path: object) -> None:
    """sched dev starts a private Redis only when nothing answers: a Redis that refuses the
    password is reported, so the user's jobs never go to a throwaway server."""
    server = RedisServer().start()
    try:
        with server.client() as c:
            c.config_set("requirepass", "right")
        url = f"redis://:wrong@127.0.0.1:{server.port}/0"
        with pytest.raises(RedisRefused, match="wrong Redis user name or password"):
            answers(url)
        assert answers(f"redis://:right@127.0.0.1:{server.port}/0")
        out = subprocess.run([*SCHED, "--redis-url", url, "dev", "--no-history"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out.stderr
        assert "password" in out.stderr and "wrong" not in out.stderr.replace(
            "wrong Redis", ""), out.stderr
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    finally:
        server.stop()
    assert not answers("redis://127.0.0.1:1/0")  # nothing listens: False, no error


def test_fsynced_is_refused_where_the_server_cannot_wait_for_its_aof(
        redis_url: str, ns: str, r: redis.Redis) -> None:
    """WAITAOF is Redis 7.2+, and needs the AOF on: otherwise a clear error, before any
    write (the shared test Redis is 7.0 without persistence)."""
    with Client(redis_url, ns, durability="fsynced") as client:
        with pytest.raises(ConfigError, match=r'"fsynced" needs WAITAOF \(Redis 7.2'):
            client.submit("t")
    assert [k for k in ns_keys(r, ns) if b":job:" in k] == []
