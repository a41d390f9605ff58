"""No `sched` command prints a password: each bad Redis URL and Postgres DSN given to every
command (its entry point in this process, and a few as real processes; the long-running ones
as processes), and what they print on stdout and stderr searched for it; then the console's
History page, which showed a store's error to every viewer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SCHED
from helpers import http_get, running, sched, serve_console

SECRET = "Hunter2pw"
FORMATS = ("text", "json")
UP_WITHIN_S = 60  # how long a long-running process may take to log its first line
RETRYING_S = 3  # then how long it keeps trying (and logging) before its Ctrl-C

# Postgres DSNs that cannot be used, each holding SECRET (or pieces of it).
DSNS = {
    "malformed": f"postgresql://bob:{SECRET}@[::1:1/db",
    "misspelt scheme": f"postgress://bob:{SECRET}@127.0.0.1/db",
    "unencoded @": "postgresql://bob:Hunter@2pw@127.0.0.1:1/db",
    "unencoded /": "postgresql://bob:Hunter/2pw@127.0.0.1:1/db",
    "nothing listens": f"postgresql://bob:{SECRET}@127.0.0.1:1/db",
    "query password": f"postgresql://bob@127.0.0.1:1/db?password={SECRET}",
    "keywords": f"host=127.0.0.1 port=1 user=bob password={SECRET} dbname=x",
    "keywords quoted": "host=127.0.0.1 port=1 password='Hunter 2pw' dbname=x",
    "keywords bad option": f"host=127.0.0.1 password={SECRET} bogus=1",
    "no such role": f"postgresql://bob:{SECRET}@127.0.0.1:5432/test",
    "space": "postgresql://bob:Hunter 2pw@127.0.0.1:1/db",
}
# Redis URLs that cannot be used (nothing listens on port 1), each holding SECRET.
URLS = {
    "refused": f"redis://:{SECRET}@127.0.0.1:1/0",
    "user and password": f"redis://app:{SECRET}@127.0.0.1:1/0",
    "unencoded @": "redis://app:Hunter@2pw@127.0.0.1:1/0",
    "unencoded /": "redis://:Hunter/2pw@127.0.0.1:1/0",
    "unencoded ?": "redis://:Hunter?2pw@127.0.0.1:1/0",
    "unencoded :": "redis://app:Hunter:2pw@127.0.0.1:1/0",
    "bad port": f"redis://:{SECRET}@127.0.0.1:port/0",
    "bad database": f"redis://:{SECRET}@127.0.0.1:1/zero",
    "query password": f"redis://127.0.0.1:1/0?password={SECRET}",
    "ssl_password": f"rediss://127.0.0.1:1/0?ssl_password={SECRET}",
    "socket": f"unix://:{SECRET}@/nonexistent/redis.sock?db=0",
    "sentinel": f"redis+sentinel://:{SECRET}@127.0.0.1:1/mymaster?sentinel_password={SECRET}",
    "cluster": f"redis+cluster://app:{SECRET}@127.0.0.1:1",
    "space": "redis://:Hunter 2pw@127.0.0.1:1/0",
}


def leaked(text: str) -> bool:
    """SECRET, or a piece a parser cut from it (all are 4+ characters)."""
    return any(piece in text for piece in (SECRET, "Hunter", "2pw@", "Hunter 2pw"))


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SCHED, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("dsn", list(DSNS.values()), ids=list(DSNS))
@pytest.mark.parametrize("command", [["history"], ["db", "upgrade"], ["recover"],
                                     ["snapshotter"], ["runs", "0" * 32]], ids=" ".join)
def test_no_command_prints_a_postgres_password(capsys: pytest.CaptureFixture[str],
                                               redis_url: str, ns: str, dsn: str,
                                               command: list[str]) -> None:
    """`cannot reach Postgres (... "postgresql://bob:pw@...")` and `'postgress://bob:pw@...'
    is not a Postgres DSN` printed it. (`sched`'s entry point in this process: the real
    processes' own output is test_the_sched_process_prints_no_password's.)"""
    code, out, err = sched(capsys, redis_url, ns, *command, "--postgres-dsn", dsn)
    assert code == 1, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not leaked(out + err), err


@pytest.mark.parametrize("dsn", [DSNS["malformed"], DSNS["unencoded @"], DSNS["keywords"]])
def test_a_dsn_from_the_environment_is_masked_too(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   redis_url: str, ns: str, dsn: str) -> None:
    monkeypatch.setenv("SCHED_POSTGRES_DSN", dsn)
    code, out, err = sched(capsys, redis_url, ns, "history")
    assert code == 1 and not leaked(out + err), err


@pytest.mark.parametrize("url", list(URLS.values()), ids=list(URLS))
@pytest.mark.parametrize("command", [["status"], ["submit", "t"], ["dlq", "list"]],
                         ids=" ".join)
def test_no_command_prints_a_redis_password(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch, ns: str, url: str,
                                            command: list[str]) -> None:
    """An unencoded @ or / in the password, and ssl_password=, leaked through the masking."""
    monkeypatch.setenv("SCHED_REDIS_URL", url)
    code, out, err = sched(capsys, url, ns, *command)
    assert code == 1, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not leaked(out + err), err


@pytest.mark.parametrize("args", [
    ["--redis-url", URLS["unencoded @"], "status"],
    ["--redis-url", URLS["ssl_password"], "submit", "t"],
    ["history", "--postgres-dsn", DSNS["malformed"]],
    ["db", "upgrade", "--postgres-dsn", DSNS["keywords quoted"]],
], ids=["status", "submit", "history", "db upgrade"])
def test_the_sched_process_prints_no_password(ns: str, args: list[str]) -> None:
    """The same through real `sched` processes, for a few of the cases above."""
    done = run("--namespace", ns, *args)
    assert done.returncode == 1, done
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not leaked(done.stdout + done.stderr), done.stderr


@pytest.mark.slow  # each process runs seconds of retries in both log formats
@pytest.mark.parametrize("url", [URLS["unencoded @"], URLS["ssl_password"], URLS["sentinel"],
                                 URLS["refused"]], ids=["unencoded @", "ssl_password",
                                                        "sentinel", "refused"])
@pytest.mark.parametrize("command", [
    ["worker", "--app", "scheduler.dev.examples.tasks:registry"], ["scheduler"],
    ["dev", "--no-web", "--no-history", "--metrics-port", "0"]], ids=lambda c: c[0])
def test_a_long_running_process_logs_no_redis_password(tmp_path: Path, ns: str, url: str,
                                                       command: list[str]) -> None:
    """A process that keeps trying logs the failure again and again, in both formats (one
    process each, side by side)."""
    files = {fmt: (tmp_path / f"{fmt}.out", tmp_path / f"{fmt}.err") for fmt in FORMATS}
    with contextlib.ExitStack() as stack:
        procs = [subprocess.Popen([*SCHED, "--redis-url", url, "--namespace", ns, *command,
                                   "--log-format", fmt],
                                  stdout=stack.enter_context(out.open("w")),
                                  stderr=stack.enter_context(err.open("w")))
                 for fmt, (out, err) in files.items()]
    # Up once it logs its first line (its imports done, Redis tried): a Ctrl-C before then
    # lands in its imports, which a loaded box can make take seconds.
    deadline = time.monotonic() + UP_WITHIN_S
    while not all(proc.poll() is not None or err.read_text().endswith("\n")
                  for proc, (_, err) in zip(procs, files.values(), strict=True)):
        assert time.monotonic() < deadline, f"a process logged nothing in {UP_WITHIN_S} s"
        time.sleep(0.1)
    time.sleep(RETRYING_S)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc, (out, err) in zip(procs, files.values(), strict=True):
        proc.wait(timeout=30)
        said = out.read_text() + err.read_text()
        assert said, "the process said nothing"
        assert not leaked(said), said
        assert "Traceback" not in said, said


@pytest.mark.parametrize("dsn", [DSNS["malformed"], DSNS["unencoded @"], DSNS["no such role"],
                                 DSNS["keywords quoted"], DSNS["space"]],
                         ids=["malformed", "unencoded @", "no such role", "keywords quoted",
                              "space"])
@pytest.mark.slow  # a real long-running `sched` process
def test_the_history_page_shows_no_postgres_password(redis_url: str, ns: str,
                                                     dsn: str) -> None:
    """The console's History page showed psycopg's error, DSN and password in it, to every
    viewer (read-only ones too)."""
    proc, base = serve_console(redis_url, ns, "--read-only", "--postgres-dsn", dsn)
    with running(proc):
        status, page = http_get(f"{base}/history")
        assert status == 200 and "Postgres" in page, page
        assert not leaked(page), page


@pytest.mark.slow  # a real long-running `sched` process
def test_sched_dev_logs_no_postgres_password(tmp_path: Path, ns: str) -> None:
    start = time.monotonic()
    done = run("--namespace", ns, "dev", "--no-web", "--metrics-port", "0", "--postgres-dsn",
               DSNS["malformed"])
    assert done.returncode == 1 and time.monotonic() - start < 60
    assert not leaked(done.stdout + done.stderr), done.stderr


@pytest.mark.parametrize("url, dsn", [(URLS["space"], DSNS["space"]),
                                      (URLS["unencoded @"], DSNS["keywords quoted"])],
                         ids=["space", "unencoded"])
def test_sched_devs_banner_shows_no_password(capsys: pytest.CaptureFixture[str], url: str,
                                             dsn: str) -> None:
    """The banner names the Redis URL and the history store in commands to copy: a password
    holding a space was printed whole."""
    from scheduler.cli.dev import _banner

    _banner("ns", url, False, "everything", dsn, "http://127.0.0.1:9464/metrics",
            "http://127.0.0.1:8080/")
    out = capsys.readouterr().out
    assert "***" in out and not leaked(out), out
