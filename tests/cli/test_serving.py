"""The long-running commands serve metrics as processes: `sched exporter`, `--metrics-port` on
`sched worker`, and `sched status --watch` until Ctrl-C."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from conftest import SCHED
from scheduler.dev.embedded import free_port


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()  # type: ignore[no-any-return]


def wait_until_served(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.communicate()[0].decode()
        try:
            return get(url)
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, f"nothing served at {url}"
            time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out.decode()
    return out.decode()


@pytest.mark.slow  # a real long-running `sched` process
def test_exporter_process(redis_url: str, ns: str) -> None:
    port = free_port()
    proc = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, "exporter",
                             "--port", str(port), "--host", "127.0.0.1", "--log-format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_until_served(f"http://127.0.0.1:{port}/healthz", proc) == "ok\n"
        text = get(f"http://127.0.0.1:{port}/metrics")
    finally:
        out = stop(proc)
    assert "sched_exporter_up 1.0" in text and "sched_workers_alive 0.0" in text
    assert "sched_runs_total" not in text  # the exporter serves the namespace, not itself
    assert json.loads(out.splitlines()[0])["message"].startswith("exporter for namespace")


@pytest.mark.slow  # a real long-running `sched` process
def test_worker_metrics_port(redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    port = free_port()
    proc = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker",
                             "--app", "app_tasks:registry", "--metrics-port", str(port),
                             "--log-level", "warning"],
                            env=app_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        text = wait_until_served(f"http://127.0.0.1:{port}/metrics", proc)
    finally:
        stop(proc)
    for name in ("sched_retries_total 0.0", "sched_commits_refused_total 0.0",
                 "# TYPE sched_runs_total counter", "# TYPE sched_start_lag_seconds histogram"):
        assert name in text


@pytest.mark.slow
def test_sched_worker_starts_handlers_eagerly_unless_told_not_to(
        redis_url: str, ns: str, app_env: dict[str, str]) -> None:
    """On 3.12+ a handler runs up to its first await inside the claim that started it;
    `--no-eager-start` (and 3.11) schedule it on the loop."""
    import sys

    import redis as redis_py

    from scheduler import Client

    r = redis_py.Redis.from_url(redis_url)
    places = {}
    with Client(redis_url, ns) as client:
        for flag in ("", "--no-eager-start"):
            effects = f"{ns}:where:{flag}"
            job = client.submit("test.where_started", {"effects": effects})
            proc = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns,
                                     "worker", "--app", "app_tasks:registry",
                                     "--log-level", "warning", *([flag] if flag else [])],
                                    env={**{k: v for k, v in app_env.items()
                                            if k != "SCHED_EAGER_START"},
                                         "SCHED_TEST_REDIS_URL_APP": redis_url},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 30
                while not r.hlen(effects) and proc.poll() is None \
                        and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                out = stop(proc)
            assert r.hlen(effects), out
            places[flag] = {v.decode() for v in r.hvals(effects)}
            assert client.get_job(job) is not None
    eager = "claim" if sys.version_info >= (3, 12) else "loop"
    assert places == {"": {eager}, "--no-eager-start": {"loop"}}


@pytest.mark.slow  # a real long-running `sched` process
def test_status_watch_refreshes_until_interrupted(redis_url: str, ns: str) -> None:
    proc = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, "status",
                             "--watch", "--interval", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        screens = 0
        while screens < 2:
            line = proc.stdout.readline().decode()
            screens += line.startswith("namespace ")
            assert line and time.monotonic() < deadline
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 3  # the last screen's verdict: no worker alive
    assert b"Traceback" not in out


@pytest.mark.parametrize("command", [
    ["exporter", "--port"], ["worker", "--app", "app_tasks:registry", "--metrics-port"],
    ["worker", "--app", "app_tasks:registry", "--processes", "2", "--metrics-port"]])
def test_a_busy_port_is_one_line(redis_url: str, ns: str, app_env: dict[str, str],
                                 command: list[str]) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, *command,
                               str(port)], env=app_env, capture_output=True, text=True,
                              timeout=30)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and \
        proc.stderr.count("\n") == 1, proc.stderr


def test_a_service_runs_with_the_collector_thresholds_of_cli_run() -> None:
    """serve() sets GC_THRESHOLD for the service's life: at Python's default the collector
    was a sixth of the snapshotter's and the worker's CPU (cli/run.py)."""
    import asyncio
    import gc

    from scheduler.cli.run import GC_THRESHOLD, serve

    seen: list[tuple[int, int, int]] = []

    async def make() -> None:
        seen.append(gc.get_threshold())
        await asyncio.sleep(0)

    before = gc.get_threshold()
    try:
        serve(make, lambda: None)
    finally:
        gc.set_threshold(*before)
    assert seen == [GC_THRESHOLD] and GC_THRESHOLD[0] >= 20_000


def _read_lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


@pytest.mark.slow  # a real long-running `sched` process
@pytest.mark.parametrize("password", [False, True])
def test_sched_web_logs_where_it_serves_once_bound_and_that_it_stopped(
        redis_url: str, ns: str, password: bool) -> None:
    """`sched web` said nothing a person could use: no line with the port --port 0 got, and
    none when it stopped. The token is never shown, only that one is asked for, nor the
    Redis URL's password (a Redis that wants none: the console is not asked a page)."""
    token = "s3cret-console-token"
    url = redis_url.replace("redis://", "redis://app:pw-s3cret@") if password else redis_url
    shown = redis_url.replace("redis://", "redis://app:***@") if password else redis_url
    proc = subprocess.Popen([*SCHED, "--redis-url", url, "--namespace", ns, "web",
                             "--port", "0", "--token", token, "--read-only"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30  # as long as wait_until_served gives a process
        while not seen or "sched web: the console" not in seen[-1]:
            try:
                seen.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        start = seen[-1] if seen else ""
        assert f"the console of namespace {ns!r} at http://127.0.0.1:" in start, seen
        assert f"(Redis {shown}; token ***, read-only)" in start, start
        base = start.split(" at ", 1)[1].split("/ ", 1)[0]
        if not password:
            assert wait_until_served(f"{base}/healthz", proc) == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            proc.kill()
    reader.join(timeout=30)  # it ends with the process's stderr
    if proc.stderr is not None:
        proc.stderr.close()
    rest = ""
    while not lines.empty():
        rest += lines.get()
    # Stopped as SIGTERM stops a process (uvicorn raises it again once it has shut down).
    assert proc.returncode in (0, -signal.SIGTERM), rest
    assert "sched web stopped" in rest, rest
    assert password or "Traceback" not in rest, rest  # (a refused password is logged)
    assert token not in "".join(seen) + rest and "pw-s3cret" not in "".join(seen) + rest
