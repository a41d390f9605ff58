"""The package as a user gets it: the sdist and the wheel built from a copy of the checkout,
the wheel installed with its dependencies into a fresh venv outside the checkout, and run
from a directory of its own (`sched --version`, `sched dev`, the testing mode). And the
checkout's own venv seen by mypy started in another directory."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import scheduler

ROOT = Path(__file__).resolve().parents[1]
VERSION = scheduler.__version__
DIST_INFO = f"redis_sched-{VERSION}.dist-info"

# Builds, a venv, real processes: slow, and past the suite's default timeout.
slow = pytest.mark.slow
pytestmark = pytest.mark.timeout(600)

# What the checkout's ignore files leave out: never part of a build.
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info",
                                     "__pycache__", ".*_cache", "out", ".peers")


@dataclass
class Built:
    source: Path  # the copy of the checkout the builds ran in
    sdist: Path
    wheel_from_sdist: Path
    wheel_from_tree: Path


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def _package_files(source: Path) -> set[str]:
    """Every file under scheduler/ in `source`, as a wheel names it."""
    return {p.relative_to(source).as_posix() for p in (source / "scheduler").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """A directory made by `make` once per session: pytest-xdist's processes share it, the
    first to ask makes it and the others wait for it (a build and a venv take a while)."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's, above each process's own
    path = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / ".done").exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            make(path)
            (path / ".done").touch()
    return path


def _build(tmp: Path) -> None:
    source = tmp / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=NOT_SOURCES)
    assert (source / "cli").is_symlink() and (source / "lua").is_symlink()
    _run([sys.executable, "-m", "build", "--outdir", tmp / "release", source], tmp)
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", tmp / "tree", source], tmp)


@pytest.fixture
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`python -m build` as a release would run it: the sdist, the wheel from the sdist, and
    the wheel straight from the tree (where `cli` and `lua` are links), each in an isolated
    build environment. On a copy, so no build/ or egg-info lands in the checkout."""
    tmp = _once(tmp_path_factory, "build", _build)
    [sdist] = (tmp / "release").glob("*.tar.gz")
    [from_sdist] = (tmp / "release").glob("*.whl")
    [from_tree] = (tmp / "tree").glob("*.whl")
    return Built(tmp / "src", sdist, from_sdist, from_tree)


@dataclass
class Installed:
    bin: Path
    env: dict[str, str]


def _user_env(venv: Path) -> dict[str, str]:
    """This environment without the checkout's venv, its paths or the suite's settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("SCHED_")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return env


@pytest.fixture
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh venv with the wheel and the testing extra, dependencies from the index as pip
    is configured here; nothing of the checkout or its venv on its path. Each test runs it
    from a directory of its own (tmp_path), outside the checkout."""
    def make(tmp: Path) -> None:
        _run([sys.executable, "-m", "venv", tmp / "venv"], tmp)
        # The wheel by its path: a project of the same name on an index is never a candidate.
        _run([tmp / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet",
              "--disable-pip-version-check", f"{built.wheel_from_sdist}[testing]"], tmp,
             _user_env(tmp / "venv"))

    venv = _once(tmp_path_factory, "user", make) / "venv"
    return Installed(venv / "bin", _user_env(venv))


def _relative_links(markdown: str) -> list[str]:
    """The link and image targets that are not absolute URLs (PyPI shows them broken)."""
    targets = re.findall(r"\]\(([^)\s]+)[^)]*\)|\bsrc=\"([^\"]+)\"|^\[[^\]]+\]:\s*(\S+)",
                         markdown, re.M)
    return [t for found in targets for t in found if t and not t.startswith("https://")]


def test_the_long_description_has_absolute_links_to_the_projects_urls() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["readme"] == "README.md"
    readme = (ROOT / "README.md").read_text()
    assert _relative_links(readme) == [], "PyPI cannot follow relative links"
    assert _relative_links("[a](docs/a.md) ![b](img/b.png) [c](https://x.org/c)") == \
        ["docs/a.md", "img/b.png"]
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    site = re.search(r"^site_url: (\S+)$", mkdocs, re.M)
    repo = re.search(r"^repo_url: (\S+)$", mkdocs, re.M)
    assert site and repo, "mkdocs.yml names the docs site and the repository"
    urls = project["urls"]
    assert (urls["Documentation"], urls["Repository"]) == (site.group(1), repo.group(1))
    assert f"]({site.group(1)}" in readme


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_the_version_has_one_source() -> None:
    """pyproject.toml reads it from scheduler/__init__.py: no second copy to forget."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "scheduler.__version__"}


@slow
def test_the_wheel_holds_the_package_and_nothing_else(built: Built) -> None:
    expected = _package_files(built.source)
    # Each kind of file a missing package-data glob or subpackage would drop is there to miss.
    assert {"scheduler/py.typed", "scheduler/cli/__init__.py"} <= expected
    for folder, suffix in [("scripts/lua/", ".lua"), ("history/sql/", ".sql"),
                           ("web/templates/", ".html"), ("web/static/", "")]:
        assert any(f.startswith(f"scheduler/{folder}") and f.endswith(suffix)
                   for f in expected), folder
    for wheel in (built.wheel_from_sdist, built.wheel_from_tree):
        names = _wheel_names(wheel)
        assert len(names) == len(set(names)), f"{wheel.name} holds a file twice"
        assert {n.split("/")[0] for n in names} == {"scheduler", DIST_INFO}, wheel.name
        package = {n for n in names if n.startswith("scheduler/")}
        assert package == expected, (f"{wheel.name}: missing {sorted(expected - package)}, "
                                     f"extra {sorted(package - expected)}")
        with zipfile.ZipFile(wheel) as z:
            entry_points = z.read(f"{DIST_INFO}/entry_points.txt").decode()
            metadata = z.read(f"{DIST_INFO}/METADATA").decode()
        assert "sched = scheduler.cli.main:main" in entry_points
        assert f"\nVersion: {VERSION}\n" in metadata
        # What PyPI shows: the README with absolute links, and psycopg only with its extra.
        headers, _, description = metadata.partition("\n\n")
        assert "Project-URL: Documentation, https://" in headers
        assert description.strip() and _relative_links(description) == []
        psycopg = [line for line in headers.splitlines()
                   if line.startswith("Requires-Dist: psycopg")]
        assert psycopg == ['Requires-Dist: psycopg[binary]>=3.2.2; extra == "postgres"'], psycopg


@slow
def test_the_sdist_builds_the_wheel_and_holds_no_links(built: Built) -> None:
    with tarfile.open(built.sdist) as tar:
        members = tar.getmembers()
    top = f"redis_sched-{VERSION}"
    assert not [m.name for m in members if m.issym() or m.islnk()]
    names = {m.name.removeprefix(top + "/") for m in members if m.isfile()}
    assert {n.split("/")[0] for n in names} == {
        "PKG-INFO", "README.md", "pyproject.toml", "MANIFEST.in", "setup.cfg",
        "redis_sched.egg-info", "scheduler"}
    assert {n for n in names if n.startswith("scheduler/")} == _package_files(built.source)


@slow
def test_sched_version(installed: Installed, tmp_path: Path) -> None:
    out = _run([installed.bin / "sched", "--version"], tmp_path, installed.env)
    assert out == f"sched, version {VERSION}\n"


@slow
def test_only_scheduler_is_importable_and_from_the_venv(installed: Installed,
                                                        tmp_path: Path) -> None:
    probe = """
import importlib.metadata, importlib.util, json, scheduler
print(json.dumps({"file": scheduler.__file__, "version": scheduler.__version__,
                  "metadata": importlib.metadata.version("redis-sched"),
                  "others": [n for n in ("cli", "lua", "tests", "bench")
                             if importlib.util.find_spec(n) is not None]}))
"""
    seen = json.loads(_run([installed.bin / "python", "-c", probe], tmp_path,
                           installed.env))
    assert Path(seen["file"]).is_relative_to(installed.bin.parent), seen["file"]
    assert seen["version"] == seen["metadata"] == VERSION
    assert seen["others"] == []


@slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_sched_dev_runs_a_job_and_stops_on_ctrl_c(installed: Installed, tmp_path: Path) -> None:
    from scheduler.dev.embedded import free_port

    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # so dev starts its private redis-server
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [installed.bin / "sched", "--redis-url", nowhere, "--namespace", "wheel", "dev",
         "--no-web", "--metrics-port", "0", "--ready-file", ready,
         "--history-file", tmp_path / "history.sqlite3"],
        cwd=tmp_path, env=installed.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[0].decode()
            assert time.monotonic() < deadline, "sched dev did not get ready"
            time.sleep(0.05)
        url = json.loads(ready.read_text())["redis_url"]
        submit = ("import sys; from scheduler import Client\n"
                  "with Client(sys.argv[1], 'wheel') as c:\n"
                  "    print(c.result(c.submit('demo.hello', {'name': 'wheel'}), 30))")
        out = _run([installed.bin / "python", "-c", submit, url], tmp_path, installed.env)
        assert out == "None\n"
        time.sleep(1)  # a few seconds of running in all
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert any(line.startswith("sched dev: namespace 'wheel' on redis://127.0.0.1:")
               for line in out.splitlines()), out
    assert "hello {'name': 'wheel'}" in out and "sched dev stopped" in out
    assert not ready.exists()


@slow
def test_without_the_postgres_extra_postgres_says_what_to_install(installed: Installed,
                                                                  tmp_path: Path) -> None:
    done = subprocess.run([installed.bin / "python", "-c", "import psycopg"], cwd=tmp_path,
                          env=installed.env, capture_output=True, text=True)
    assert done.returncode == 1 and "No module named 'psycopg'" in done.stderr
    done = subprocess.run([installed.bin / "sched", "db", "upgrade", "--postgres-dsn",
                           "postgresql://app@127.0.0.1:1/app"], cwd=tmp_path, env=installed.env,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (1, "error: history on Postgres needs psycopg: "
                                                 "pip install 'redis-sched[postgres]'\n")


@slow
def test_the_testing_mode(installed: Installed, tmp_path: Path) -> None:
    script = tmp_path / "check_tasks.py"
    script.write_text("""\
from scheduler import Registry
from scheduler.testing import TestScheduler

registry = Registry()


@registry.task("greet")
def greet(ctx, payload):
    return f"hello {payload['name']}"


with TestScheduler(registry) as sched:
    job_id = sched.client.submit("greet", {"name": "Ada"})
    sched.drain()
    assert sched.client.result(job_id) == "hello Ada"
    sched.client.submit("greet", {"name": "cron"}, cron="* * * * *")
    assert [r.fire_time.minute for r in sched.advance(180)] == [0, 1, 2, 3]
print("ok")
""")
    assert _run([installed.bin / "python", script], tmp_path, installed.env) == "ok\n"


@slow
def test_mypy_in_another_directory_sees_the_checkout(tmp_path: Path) -> None:
    """The checkout's venv (scripts/services.sh, ensure_venv) shows `scheduler`, and only
    it, to tools that read sys.path without running import hooks; see link_checkout there."""
    others = _run([sys.executable, "-c", "import importlib.util as u; print([n for n in "
                   "('cli', 'lua', 'tests', 'bench') if u.find_spec(n)])"], tmp_path)
    assert others == "[]\n"
    (tmp_path / "use.py").write_text("import scheduler\nreveal_type(scheduler.Client)\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir",
                           tmp_path / "cache", "use.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and 'Revealed type is "def (redis_url: str' in done.stdout, \
        f"{done.stdout}{done.stderr}\n(a venv not built by scripts/services.sh's ensure_venv?)"
