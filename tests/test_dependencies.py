"""The dependencies in pyproject.toml: the floors past the published security fixes of what the
console parses and renders, so no install resolves to a release with a known hole in it; and
psycopg an extra (`redis-sched[postgres]`): without it the package, the worker, the node and
the CLI run, and what needs Postgres says in one line what to install."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# The release with the last published fix each floor must reach (pyproject.toml says which).
FIXED = {
    "starlette": "1.3.1",  # form() limits for urlencoded bodies; 0.40.0: multipart DoS
    "python-multipart": "0.0.31",  # querystring and Content-Length DoS; 0.0.18: boundary DoS
    "jinja2": "3.1.6",  # sandbox escapes (3.1.5, 3.1.6)
    "h11": "0.16",  # uvicorn's HTTP/1.1 parser: chunked-encoding request smuggling
}


def _floors() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for text in [*project["dependencies"], *project["optional-dependencies"]["web"]]:
        req = Requirement(text)
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
        found[req.name.lower()] = max(lows) if lows else Version("0")
    return found


def test_the_console_dependencies_are_past_their_published_fixes() -> None:
    floors = _floors()
    late = {name: str(floors.get(name, "none")) for name, fixed in FIXED.items()
            if floors.get(name, Version("0")) < Version(fixed)}
    assert not late, f"floors below a published fix ({FIXED}): {late}"


# As if the `postgres` extra were not installed: psycopg (and its binary part) cannot be found.
_WITHOUT_PSYCOPG = '''
import sys


class NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("psycopg", "psycopg_binary", "psycopg_c"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoPsycopg())
'''
# Imports every module of the package; prints {module: the error} for those that failed.
_IMPORT_ALL = '''
import importlib, json, pkgutil
import scheduler

failed = {}
for info in pkgutil.walk_packages(scheduler.__path__, "scheduler."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed[info.name] = f"{type(exc).__name__}: {exc}"
assert "psycopg" not in sys.modules
print(json.dumps(failed))
'''
NEEDS_PSYCOPG = {
    "scheduler.history.store.postgres": "history on Postgres",
    "scheduler.outbox.relay": "the outbox's relay and schema",
}


def _without_psycopg(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", _WITHOUT_PSYCOPG + code, *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_psycopg_is_the_postgres_extra_and_the_dev_venv_installs_every_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {Requirement(r).name for r in project["dependencies"]}
    assert "psycopg" not in names, "psycopg is an extra: `import scheduler` runs without it"
    extras = project["optional-dependencies"]
    assert [Requirement(r).name for r in extras["postgres"]] == ["psycopg"]
    installs = re.search(r"install .*-e '\.\[([\w,]+)\]'", (ROOT / "scripts" /
                                                             "services.sh").read_text())
    assert installs is not None
    assert set(installs.group(1).split(",")) == set(extras) - {"bench"}


def test_without_psycopg_only_the_postgres_modules_fail_and_they_say_what_to_install() -> None:
    done = _without_psycopg(_IMPORT_ALL)
    assert done.returncode == 0, done.stderr
    failed = json.loads(done.stdout)
    assert failed == {module: f"MissingExtra: {feature} needs psycopg: pip install "
                              f"'redis-sched[postgres]'"
                      for module, feature in NEEDS_PSYCOPG.items()}


@pytest.mark.parametrize(("args", "feature"), [
    (["db", "upgrade"], "history on Postgres"),
    (["db", "upgrade", "--outbox"], "the outbox's relay and schema"),
    (["outbox", "status"], "the outbox's relay and schema"),
    (["outbox", "relay"], "the outbox's relay and schema"),
])
def test_without_psycopg_the_cli_says_in_one_line_what_to_install(args: list[str],
                                                                   feature: str) -> None:
    done = _without_psycopg("from scheduler.cli.main import main\nmain(sys.argv[1:])",
                            *args, "--postgres-dsn", "postgresql://app@127.0.0.1:1/app")
    assert done.returncode == 1, done.stderr
    assert done.stderr == f"error: {feature} needs psycopg: pip install " \
                          f"'redis-sched[postgres]'\n"
    assert done.stdout == ""


# Runs each command line of argv[1] (JSON) in turn in this one interpreter: (args, exit code,
# what it printed) per line, as JSON.
_EACH_COMMAND = '''
import contextlib, io, json
from scheduler.cli.main import main

said = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code
    said.append([args, code, out.getvalue()])
print(json.dumps(said))
'''


def test_without_psycopg_the_cli_runs_what_needs_no_postgres() -> None:
    asked = [["--help"], ["worker", "--help"], ["scheduler", "--help"], ["dev", "--help"]]
    done = _without_psycopg(_EACH_COMMAND, json.dumps(asked))
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert [args for args, _, _ in said] == asked
    for args, code, out in said:
        assert code in (0, None) and out.startswith("Usage: "), (args, code, out, done.stderr)


def test_without_psycopg_a_postgres_history_store_is_unavailable_saying_why() -> None:
    done = _without_psycopg(
        "from scheduler import Client\n"
        "from scheduler.core.errors import StoreUnavailable\n"
        "try:\n"
        "    Client(history='postgresql://app@127.0.0.1:1/app').history()\n"
        "except StoreUnavailable as exc:\n"
        "    print(exc)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "history on Postgres needs psycopg: pip install " \
                          "'redis-sched[postgres]'\n"
