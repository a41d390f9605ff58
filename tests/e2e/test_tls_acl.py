"""The whole stack over TLS, as an ACL user limited to the namespace's keys: a redis-server
with `--tls-port` only (no plain port), a CA and a server certificate made here with openssl,
and a user `app` that may touch `<ns>:*` and nothing else, without the dangerous commands.
submit, `sched worker`, `sched scheduler`, `sched snapshotter` and `sched status` all go
through `rediss://app:...@127.0.0.1:PORT/0?ssl_ca_certs=...`. A client without the CA, or
with the wrong password, gets one line."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from faults.harness import free_port, wait_for

from conftest import SCHED
from scheduler import Client, RedisFailure
from scheduler.core.states import TERMINAL

pytestmark = pytest.mark.slow

PASSWORD = "s3cret-Pa55"
# What the project needs of Redis, and no more: its own keys, no admin or dangerous commands
# but INFO (status reads the server's persistence and memory).
ACL = "on >{password} ~{ns}:* resetchannels -@all +@read +@write +@stream +@scripting " \
      "+@connection +@transaction +@keyspace -@dangerous +info +time +ping"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def tls_redis(tmp_path: Path, ns: str) -> Iterator[tuple[str, Path]]:
    # The CA says what its key is for: Python 3.13 verifies strictly (VERIFY_X509_STRICT)
    # and refuses a CA certificate without a key usage extension.
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=sched-test-ca", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=tmp_path)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
             "server.key", "-out", "server.csr", cwd=tmp_path)
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt",
             cwd=tmp_path)
    port = free_port()
    (tmp_path / "redis.conf").write_text(
        f"port 0\ntls-port {port}\nbind 127.0.0.1\ndir {tmp_path}\nsave \"\"\n"
        f"tls-cert-file {tmp_path}/server.crt\ntls-key-file {tmp_path}/server.key\n"
        f"tls-ca-cert-file {tmp_path}/ca.crt\ntls-auth-clients no\n"
        f"user default off\nuser app {ACL.format(password=PASSWORD, ns=ns)}\n")
    proc = subprocess.Popen(["redis-server", str(tmp_path / "redis.conf")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = (f"rediss://app:{PASSWORD}@127.0.0.1:{port}/0?ssl_ca_certs={tmp_path}/ca.crt")
    probe = redis.Redis.from_url(url, socket_timeout=2)

    def up() -> bool:
        try:
            return bool(probe.ping())
        except redis.exceptions.ConnectionError:
            return False
    try:
        wait_for(up, 15, "the TLS redis-server")
        yield url, tmp_path
    finally:
        probe.close()
        proc.kill()
        proc.wait()


def _sched(url: str, ns: str, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SCHED, "--redis-url", url, "--namespace", ns, *args],
                          capture_output=True, text=True, timeout=60, **kw)  # type: ignore[call-overload]


def test_the_stack_runs_over_tls_as_a_namespace_limited_user(
        tls_redis: tuple[str, Path], ns: str, app_env: dict[str, str], redis_url: str,
        r: redis.Redis) -> None:
    url, tmp = tls_redis
    app_env = {**app_env, "SCHED_TEST_REDIS_URL_APP": redis_url}  # where handlers record
    with Client(url, ns, history=str(tmp / "h.sqlite3")) as client:
        ids = client.submit_many([{"task": "test.effect",
                                   "payload": {"effects": f"{ns}:effects"}}
                                  for _ in range(20)])
        started = [subprocess.Popen(
            [*SCHED, "--redis-url", url, "--namespace", ns, *args, "--log-level", "warning"],
            env=app_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for args in (("worker", "--app", "app_tasks:registry"), ("scheduler",),
                         ("snapshotter", "--history-file", str(tmp / "h.sqlite3")))]
        try:
            def done() -> bool:
                return all(s.status in TERMINAL for j in ids for s in client.slots(j))
            wait_for(done, 60, "the jobs to run over TLS")
            slots = [s for j in ids for s in client.slots(j)]
            assert {s.status.value for s in slots} == {"succeeded"}, client.get_slot(
                slots[0].slot_id).attempts
            out = _sched(url, ns, "status", env=app_env)
            assert out.returncode == 0, out.stdout + out.stderr
            wait_for(lambda: len(client.history(job_id=ids[0])) == 1, 30, "history over TLS")
        finally:
            for p in started:
                p.terminate()
            logs = [p.communicate(timeout=30)[0].decode() for p in started]
        for log in logs:
            assert "NOPERM" not in log and "Traceback" not in log, log
        assert sum(int(v) for v in r.hvals(f"{ns}:effects")) == 20
        # The user can reach nothing outside its namespace, and no dangerous command.
        with pytest.raises(RedisFailure, match="permission"):
            Client(url, "other").submit("t")
        with redis.Redis.from_url(url) as raw, pytest.raises(redis.exceptions.NoPermissionError):
            raw.flushall()


def test_without_the_ca_or_with_a_wrong_password_it_is_one_line(
        tls_redis: tuple[str, Path], ns: str, app_env: dict[str, str]) -> None:
    url, _ = tls_redis
    no_ca = url.split("?")[0]
    out = _sched(no_ca, ns, "submit", "t", env=app_env)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "certificate" in out.stderr.lower(), out.stderr
    wrong = url.replace(PASSWORD, "nope")
    out = _sched(wrong, ns, "submit", "t", env=app_env)
    assert out.returncode == 1 and "password" in out.stderr, out.stderr
    assert PASSWORD not in out.stderr and "nope" not in out.stderr
