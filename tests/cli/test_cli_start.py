"""What every `sched` process pays before its command runs."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_does_not_import_psycopg_until_a_command_uses_postgres() -> None:
    """Every `sched` start paid for psycopg's import (a fifth of a second of CPU), whether
    the command used Postgres or not; its errors are recognised once it is loaded."""
    out = subprocess.run([sys.executable, "-c", "import sys, scheduler.cli.main; "
                          "print('psycopg' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_the_cli_loads_neither_the_testing_harness_nor_the_console_until_asked() -> None:
    """`sched verify` takes its bounds from the testing package's run modules, and the
    package's harness (and fakeredis under it) loaded with them on every `sched` start."""
    later = ("scheduler.testing.harness", "fakeredis", "starlette", "uvicorn")
    out = subprocess.run([sys.executable, "-c", "import sys, scheduler.cli.main; "
                          f"print([m for m in {later!r} if m in sys.modules])"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
