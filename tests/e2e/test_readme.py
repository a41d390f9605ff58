"""The README is a front page that works: its two commands first, at most ~250 lines, its
quickstart ("Your own app in five minutes": a tasks module, a worker importing it from the
current directory, the CLI's submits and the client snippet) run as written against the real
Redis in a namespace of the test's own, and every link it gives is inside the repository.
tests/docs/test_code_blocks.py runs every block of it and of the docs by the same rules."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 250
    first = _blocks(README, "sh")[0].splitlines()
    assert first[0].startswith("bash scripts/demo.sh    # installs into .venv, runs `sched dev`")
    assert first[1].startswith("bash scripts/test.sh    # installs into .venv, starts Redis")
    assert "mkdocs build --strict" in (ROOT / "scripts" / "test.sh").read_text()
    assert not re.search(r"\b(session|issue) \d", README, re.I)


@pytest.mark.slow  # real processes: ~5 s
def test_the_quickstart_runs_as_written(tmp_path: Path, redis_url: str, ns: str) -> None:
    quick = _section("Your own app in five minutes")
    tasks, snippet = _blocks(quick, "python")
    assert tasks.startswith("# tasks.py")
    (tmp_path / "tasks.py").write_text(tasks)
    code = snippet.replace('"redis://127.0.0.1:6379/0"', repr(redis_url)).replace(
        'namespace="myapp"', f"namespace={ns!r}")
    assert code != snippet
    # No PYTHONPATH to the tasks: `--app` imports them from the current directory.
    env = {**os.environ, "SCHED_REDIS_URL": redis_url, "SCHED_NAMESPACE": ns}
    env.pop("PYTHONPATH", None)
    worker_line = next(line for b in _blocks(quick, "sh") for line in b.splitlines()
                       if line.startswith("sched worker"))
    worker_args = [w for w in shlex.split(worker_line, comments=True) if w != "&"][1:]
    assert worker_args[:2] == ["worker", "--app"] and worker_args[2] == "tasks:registry"
    worker = subprocess.Popen([*SCHED, *worker_args, "--log-level", "warning"], env=env,
                              cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        submits = [line for b in _blocks(quick, "sh") for line in b.splitlines()
                   if line.startswith("sched submit")]
        assert len(submits) >= 3
        ids = []
        for line in submits:
            done = subprocess.run([*SCHED, *shlex.split(line, comments=True)[1:]], check=True,
                                  env=env, timeout=60, capture_output=True, text=True)
            ids.append(done.stdout.strip())
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path,
                       timeout=60)
        with Client(redis_url, ns) as client:
            assert client.result(ids[0], timeout=30) == {"sent": "a@example.com"}
            jobs = client.list_jobs()
            assert {j.kind for j in jobs} >= {"delayed", "cron"}  # scheduled, not run
            for job in jobs:  # one run of each now
                slot = client.trigger(job.job_id)
                client.result(slot, timeout=30)
        assert worker.poll() is None
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()[-2000:]


@pytest.mark.slow  # the demo: ~20 s
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_the_demo_leaves_a_running_redis_as_it_found_it(private: Any) -> None:
    """`bash scripts/demo.sh`, the README's first command, against a Redis that is already
    running, as a user's is: nothing on stderr (its clean-up failed with a traceback no one
    read, leaving some 40,000 keys behind), every key of its namespace removed, and no other
    key touched, even one of a namespace whose name starts with the demo's."""
    r = private.client()
    ns_of = re.compile(r"\(namespace (demo-\d+)\)")
    theirs = {b"myapp:meta": b"theirs", b"demo:meta": b"theirs"}
    r.mset(theirs)
    try:
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")],
                              env={**os.environ, "SCHED_REDIS_URL": private.url},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        assert "Traceback" not in proc.stderr and not re.search("error", proc.stderr, re.I), \
            proc.stderr
        found = ns_of.search(proc.stdout)
        assert found is not None, proc.stdout[:2000]
        ns = found.group(1)
        assert "(private redis-server)" not in proc.stdout  # it ran on ours
        removed = re.search(rf"== removed the demo's ([\d,]+) keys \(namespace {ns}\)",
                            proc.stdout)
        assert removed is not None and int(removed.group(1).replace(",", "")) > 20_000, \
            proc.stdout[-2000:]
        assert list(r.scan_iter(match=f"{ns}:*", count=10_000)) == []
        assert r.dbsize() == len(theirs) and r.mget(list(theirs)) == list(theirs.values())
    finally:
        r.delete(*theirs)
        r.close()


@pytest.mark.slow  # the demo: ~20 s
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_demo_that_cannot_remove_its_keys_says_so_in_one_line(private: Any) -> None:
    """The clean-up's failure was swallowed (and its keys left without a word): it is one
    line on stderr naming the keys and how to remove them, and the demo exits 1."""
    r = private.client()
    r.acl_setuser("default", enabled=True, nopass=True, commands=["+@all", "-unlink"],
                  keys=["~*"], channels=["*"], reset=True)
    try:
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")],
                              env={**os.environ, "SCHED_REDIS_URL": private.url},
                              capture_output=True, text=True, timeout=300)
        ns = re.search(r"\(namespace (demo-\d+)\)", proc.stdout)
        assert ns is not None, proc.stdout[:2000] + proc.stderr
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert lines[0].startswith(f"error: could not remove the demo's keys ({ns.group(1)}:*) "
                                   f"from {private.url}: "), lines[0]
        assert lines[0].endswith(f"remove them with: redis-cli --scan --pattern "
                                 f"'{ns.group(1)}:*' | xargs redis-cli unlink"), lines[0]
        assert "== removed the demo's" not in proc.stdout
    finally:
        r.acl_setuser("default", enabled=True, nopass=True, commands=["+@all"], keys=["~*"],
                      channels=["*"], reset=True)
        for key in r.scan_iter(match="demo-*", count=10_000):
            r.delete(key)
        r.close()


def test_every_link_in_the_readme_is_inside_the_repository() -> None:
    for target in re.findall(r"`(\.\./[^`]+)`|\]\((\.\./[^)]+)\)", README):
        raise AssertionError(f"the README points outside the repository: {target}")
    for path in re.findall(r"`((?:tests|scheduler|bench|scripts|deploy|cli|docs)/[\w/.-]+\.\w+)`",
                           README):
        assert (ROOT / path).exists(), f"the README names {path}, which does not exist"
    site = re.search(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert site is not None
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        assert "://" in target, f"the README links to {target}: on PyPI only absolute links work"
        if target.startswith(site.group(1)):  # a page of the docs site: one the docs hold
            page = target.removeprefix(site.group(1)).rstrip("/")
            found = [ROOT / "docs" / name for name in (page, f"{page}.md", f"{page}/index.md")
                     if page or name == "index.md"] or [ROOT / "docs" / "index.md"]
            assert any(p.is_file() for p in found), \
                f"the README links to {target}, which no file in docs/ gives"
