# Sourced by the other scripts: start the local Redis and PostgreSQL if they are not up.
# (On this kind of machine both are installed and usually already running.)

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return 0; fi
  if ! command -v redis-server >/dev/null; then
    echo "redis-server is not installed: apt-get install -y redis-server" >&2; return 1
  fi
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 50); do redis-cli ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis-server did not start; see /var/log/redis/ci.log" >&2; return 1
}

ensure_postgres() {
  if pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then return 0; fi
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 50); do pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1 && return 0; sleep 0.2; done
  fi
  echo "warning: PostgreSQL is not running on 127.0.0.1:5432 (history tests need it)" >&2
}

ensure_venv() {
  if [ ! -x .venv/bin/sched ] || [ pyproject.toml -nt .venv/.installed ]; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev,web,testing,otel]'
    touch .venv/.installed
  fi
}

# The browser tests drive Debian's chromium (Playwright's own browser download does not work
# everywhere); installed when missing and apt-get is there.
ensure_chromium() {
  if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
      || (apt-get update -qq >/dev/null 2>&1 && \
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1) \
      || echo "could not install chromium: the browser tests (tests/e2e/test_console.py) will fail" >&2
  fi
}
