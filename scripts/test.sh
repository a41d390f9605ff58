#!/usr/bin/env bash
# Set up everything the tests need (venv, Redis, PostgreSQL) and run lint, types and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_redis
ensure_postgres
ensure_venv
ensure_chromium
.venv/bin/ruff check scheduler cli tests bench
.venv/bin/mypy
.venv/bin/pytest "$@"
