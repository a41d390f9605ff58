"""What every `sched` process pays before its command runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Modules a `sched` start must not load, each for a command or two: looked up in one fresh
# interpreter that imports the CLI, shared by the tests below.
LATER = ("psycopg", "scheduler.testing.harness", "fakeredis", "starlette", "uvicorn")


@pytest.fixture(scope="module")
def loaded() -> set[str]:
    out = subprocess.run([sys.executable, "-c", "import json, sys, scheduler.cli.main; "
                          f"print(json.dumps([m for m in {LATER!r} if m in sys.modules]))"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout))


def test_the_cli_does_not_import_psycopg_until_a_command_uses_postgres(loaded: set[str]) -> None:
    """Every `sched` start paid for psycopg's import (a fifth of a second of CPU), whether
    the command used Postgres or not; its errors are recognised once it is loaded."""
    assert "psycopg" not in loaded


def test_the_cli_loads_neither_the_testing_harness_nor_the_console_until_asked(
        loaded: set[str]) -> None:
    """`sched verify` takes its bounds from the testing package's run modules, and the
    package's harness (and fakeredis under it) loaded with them on every `sched` start."""
    assert not loaded & {"scheduler.testing.harness", "fakeredis", "starlette", "uvicorn"}, \
        loaded
