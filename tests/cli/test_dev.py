"""`sched dev` as a laptop user runs it: everything in one process, with a private
redis-server when none answers at the URL, stopped cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import SCHED
from scheduler import Client
from scheduler.dev.embedded import answers, free_port

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them


def wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0].decode()
        assert time.monotonic() < deadline, "sched dev did not get ready"
        time.sleep(0.05)
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_dev_starts_a_private_redis_runs_jobs_and_cleans_up(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    proc = subprocess.Popen([*SCHED, "--redis-url", nowhere, "--namespace", "devtest", "dev",
                             "--metrics-port", "0", "--ready-file", str(ready),
                             "--log-format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        info = wait_for_file(ready, proc, 30)
        assert info["embedded_redis"] is True and info["redis_url"] != nowhere
        with Client(info["redis_url"], "devtest") as client:
            ids = client.submit_many([{"task": "demo.noop"} for _ in range(50)])
            deadline = time.monotonic() + 20
            while {s.status.value for i in ids for s in client.slots(i)} != {"succeeded"}:
                assert time.monotonic() < deadline, "the dev worker did not run the jobs"
                time.sleep(0.05)
            assert client.status().workers_alive == 1
        with urllib.request.urlopen(info["metrics_url"], timeout=10) as resp:
            text = resp.read().decode()
        assert 'sched_runs_total{outcome="succeeded",queue="default",task="demo.noop"} 50.0' \
            in text
        assert "sched_workers_alive 1.0" in text
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out.decode()
    lines = out.decode().splitlines()
    assert any(line.startswith("  metrics:  http://127.0.0.1:") for line in lines)
    logs = [json.loads(line) for line in lines if line.startswith("{")]
    assert {"ts", "level", "logger", "message"} <= set(logs[0])
    assert any("private redis-server" in log["message"] for log in logs)
    assert not answers(info["redis_url"]), "the private redis-server must stop with sched dev"
    assert not ready.exists()


def test_dev_without_redis_or_redis_server_is_one_line(tmp_path: Path) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    proc = subprocess.run([*SCHED, "--redis-url", nowhere, "dev"], capture_output=True,
                          text=True, env={"PATH": str(tmp_path)}, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: redis-server is not installed") and \
        proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_the_readme_demo_works_on_a_machine_without_a_running_redis() -> None:
    """`bash scripts/demo.sh`, the README's first command, with nothing answering at the
    Redis URL: sched dev starts its private redis-server and the demo runs on it."""
    root = Path(__file__).resolve().parents[2]
    assert "sched dev" in (root / "scripts" / "demo.sh").read_text()
    env = {**os.environ, "SCHED_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    proc = subprocess.run(["bash", str(root / "scripts" / "demo.sh")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "rror" not in proc.stderr, proc.stderr
    out = proc.stdout
    assert "(private redis-server)" in out
    assert "... and the worker ran them in about" in out
    assert "== sched status" in out and "\nhealthy\n" in out
    assert 'sched_runs_total{outcome="succeeded",queue="default",task="demo.noop"} 20000.0' in out
    assert out.count("== sched runs ") == 5  # immediate, flaky, timed out, delayed, cron
    assert "== sched jobs list" in out and "cron '*/2 * * * * *' UTC" in out
