"""The README runs: its SDK quickstart (the tasks module and the client snippet) and its CLI
quickstart's submit lines, against the real Redis in a namespace of the test's own, with a
real `sched worker` on the README's tasks. Every job they submit must succeed, and every
link it gives must be inside the repository."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SCHED, TESTS
from scheduler import Client

ROOT = TESTS.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


@pytest.mark.slow  # real processes: ~5 s
def test_the_quickstarts_run_as_written(tmp_path: Path, redis_url: str, ns: str) -> None:
    tasks, snippet = _blocks(_section("Quickstart: the SDK"), "python")[:2]
    assert tasks.startswith("# myapp/tasks.py")
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(tasks)
    code = snippet.replace('"redis://127.0.0.1:6379/0"', repr(redis_url)).replace(
        'namespace="sched"', f"namespace={ns!r}")
    assert code != snippet
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "SCHED_REDIS_URL": redis_url, "SCHED_NAMESPACE": ns}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
    submits = [line.split("#")[0].strip() for line in _blocks(
        _section("Quickstart: the CLI"), "sh")[0].splitlines() if line.startswith("sched submit")]
    assert len(submits) >= 3
    for line in submits:
        args = shlex.split(line)[1:]
        subprocess.run([*SCHED, *args], check=True, env=env, timeout=60,
                       stdout=subprocess.DEVNULL)
    worker = subprocess.Popen([*SCHED, "worker", "--app", "myapp.tasks:registry", "--queues",
                               "default,mail", "--log-level", "warning"], env=env,
                              stderr=subprocess.PIPE)
    try:
        with Client(redis_url, ns) as client:
            for job in client.list_jobs():  # the delayed and cron ones: one run of each now
                client.trigger(job.job_id)
            deadline = time.monotonic() + 30
            while True:
                jobs = [j for j in client.list_jobs()]
                immediate = [s for s in _immediate_slots(client, ns)]
                if immediate and all(s.status.value == "succeeded" for s in immediate):
                    break
                assert time.monotonic() < deadline, [(s.slot_id, s.status, s.attempts)
                                                     for s in immediate]
                time.sleep(0.2)
            assert {j.kind for j in jobs} >= {"delayed", "cron"}  # scheduled ones, not run
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()[-2000:]


def _immediate_slots(client: Client, ns: str) -> list:  # type: ignore[type-arg]
    """Every slot of the namespace that is due now (the immediate jobs the README submits, and the runs triggered)."""
    keys = client.redis.scan_iter(match=f"{ns}:*:slot:*", count=1000)
    out = []
    for key in keys:
        slot = key.decode().split(":slot:", 1)[1]
        s = client.get_slot(slot)
        if s.fire_ms <= client.now_ms() and s.task in ("emails.send", "reports.build"):
            out.append(s)
    return out


def test_every_link_in_the_readme_is_inside_the_repository() -> None:
    for target in re.findall(r"`(\.\./[^`]+)`|\]\((\.\./[^)]+)\)", README):
        raise AssertionError(f"the README points outside the repository: {target}")
    for path in re.findall(r"`((?:tests|scheduler|bench|scripts|deploy|cli)/[\w/.-]+\.\w+)`",
                           README):
        assert (ROOT / path).exists(), f"the README names {path}, which does not exist"


# Given to the README's testing example: any connection its process tries fails the run.
_NO_NETWORK = '''
import socket

tried = []


def refuse(self, address):
    tried.append(address)
    raise ConnectionRefusedError(address)


socket.socket.connect = socket.socket.connect_ex = refuse


def pytest_sessionfinish(session, exitstatus):
    if tried:
        raise SystemExit(f"the testing example tried to connect: {tried}")
'''


@pytest.mark.slow  # a pytest subprocess: ~2 s
def test_the_testing_example_runs_with_no_redis(tmp_path: Path) -> None:
    [example] = _blocks(_section("Testing your handlers"), "python")
    assert example.startswith("# test_tasks.py")
    (tmp_path / "test_tasks.py").write_text(example)
    (tmp_path / "conftest.py").write_text(_NO_NETWORK)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SCHED_REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "error", str(tmp_path)], cwd=tmp_path, env=env, timeout=120,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout
