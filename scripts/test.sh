#!/usr/bin/env bash
# Set up everything the tests need (venv, Redis, PostgreSQL) and run lint, types, the docs
# build and the tests, on the newest Python 3.11+ the machine has (scripts/services.sh,
# find_python), in .venv.
# `scripts/test.sh --python 3.11 [pytest args]` runs the tests alone (no lint, no types) on
# the newest 3.11 instead, in a venv of its own (.venv-3.11); .ci/run does both.
# The tests run in SCHED_TEST_PROCESSES pytest-xdist processes (default 2: most of the slow
# tests wait on real processes and timeouts, so two halve the wall time on two cores without
# starving them; each process starts its own Redis Cluster). `-n 0` in the args runs them in
# this one process (`-s`, pdb).
set -euo pipefail
cd "$(dirname "$0")/.."
# pytest keeps the test modules it rewrote (their asserts) as bytecode in __pycache__; with
# PYTHONDONTWRITEBYTECODE set (as container images often do) each run, and each of its
# processes, rewrote every test module again: most of the time the collection took.
unset PYTHONDONTWRITEBYTECODE
. scripts/services.sh
parallel=(-n "${SCHED_TEST_PROCESSES:-2}" --dist worksteal)
ensure_redis
ensure_postgres
if [ "${1:-}" = "--python" ]; then
  version="$2"
  shift 2
  ensure_venv ".venv-$version" "$version"
  ensure_chromium
  exec ".venv-$version/bin/pytest" "${parallel[@]}" "$@"
fi
ensure_venv
ensure_chromium
.venv/bin/ruff check scheduler tests bench
.venv/bin/bandit -q -c pyproject.toml -r scheduler --severity-level medium
.venv/bin/mypy
# The docs site: --strict fails on a broken link or anchor, a page missing from the nav, and
# an API reference entry that does not resolve (tests/docs runs the pages' code blocks).
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict   # into site/ (git-ignored)
.venv/bin/pytest "${parallel[@]}" "$@"
