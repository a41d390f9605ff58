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

# The Python the venvs are built with: the newest CPython 3.11+ this machine has (pyenv's
# versions, python3.N on PATH, then python3), or the newest 3.N when asked for one (`3.11`).
# SCHED_PYTHON=/path/to/python overrides the search. Prints the interpreter's path.
find_python() {
  local want="${1:-}" best="" best_key=-1 py ver key root
  local candidates=()
  if [ -n "${SCHED_PYTHON:-}" ]; then
    candidates=("$SCHED_PYTHON")
  else
    root="$( (command -v pyenv >/dev/null && pyenv root) 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
    for py in "$root"/versions/3.*/bin/python3; do
      # Released CPythons only (not 3.14-dev, 3.13.0t, a virtualenv's name...).
      [[ "$py" =~ /versions/3\.[0-9]+\.[0-9]+/bin/python3$ ]] && candidates+=("$py")
    done
    for minor in $(seq 30 -1 11); do
      py="$(command -v "python3.$minor" 2>/dev/null)" && candidates+=("$py")
    done
    py="$(command -v python3 2>/dev/null)" && candidates+=("$py")
  fi
  for py in "${candidates[@]}"; do
    # A pyenv shim of a version not selected fails here, and so does a Python without venv.
    ver="$("$py" -c 'import sys, venv, ensurepip; print("%d %d %d" % sys.version_info[:3])' \
           2>/dev/null)" || continue
    set -- $ver
    [ "$1" = 3 ] && [ "$2" -ge 11 ] || continue
    [ -z "$want" ] || [ "3.$2" = "$want" ] || continue
    key=$(( $2 * 1000 + $3 ))
    if [ "$key" -gt "$best_key" ]; then best="$py"; best_key="$key"; fi
  done
  if [ -z "$best" ]; then
    echo "no Python ${want:-3.11+} with venv found (pyenv install ${want:-3.13}, or apt-get install python3-venv)" >&2
    return 1
  fi
  echo "$best"
}

# ensure_venv [DIR [3.N]]: DIR (default .venv) holds the project and its extras, installed
# with find_python's interpreter. .installed records that interpreter: the venv is built
# again when it was made with another one, or pyproject.toml changed since.
ensure_venv() {
  local dir="${1:-.venv}" py want
  # A test suite running from DIR (tests/conftest.py names it) that runs these scripts must
  # not rebuild it under itself: the other test processes would lose their packages.
  if [ -n "${SCHED_TEST_VENV:-}" ] && [ -x "$dir/bin/sched" ] \
      && [ "$(realpath "$dir")" = "$(realpath "$SCHED_TEST_VENV")" ]; then
    return 0
  fi
  py="$(find_python "${2:-}")" || return 1
  want="$("$py" -c 'import os, sys; print(os.path.realpath(sys.executable), sys.version.split()[0])')"
  if [ ! -x "$dir/bin/sched" ] || [ pyproject.toml -nt "$dir/.installed" ] \
      || [ "$(cat "$dir/.installed" 2>/dev/null)" != "$want" ]; then
    echo "building $dir with Python $want" >&2
    rm -rf "$dir"
    "$py" -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check -e '.[dev,web,testing,otel,postgres]'
    echo "$want" >"$dir/.installed"
  fi
  link_checkout "$dir"
}

# link_checkout DIR: DIR's Python (and mypy, pyright, an IDE: tools that read sys.path) finds
# `scheduler` in this checkout, from any directory. pip's editable install finds it through
# setuptools' import hook, which those tools never run: mypy started elsewhere sees no
# `scheduler`. So a directory in the venv holds only a link to scheduler/, put on sys.path by
# a .pth file; modules added later show through it (setuptools' editable_mode=strict links
# each file, and misses a new one until the venv is built again). Not editable_mode=compat:
# it puts the checkout's root on sys.path, and with it the `cli` link (the CLI importable a
# second time under another name), `tests`, `bench` and the tests' helper modules.
link_checkout() {
  local dir="$1" site
  site="$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    || return 1
  mkdir -p "$dir/checkout"
  ln -sfn "$(pwd)/scheduler" "$dir/checkout/scheduler"
  realpath "$dir/checkout" >"$site/redis_sched_checkout.pth"
}

# The browser tests drive Debian's chromium (Playwright's own browser download does not work
# everywhere); installed when missing and apt-get is there. apt's lock is often held for a
# while (another install, unattended-upgrades on a fresh machine): apt-get waits up to five
# minutes for it rather than fail at once. When the install fails all the same, apt's own
# error output is shown: it says why (a lock still held, no network, no such package).
ensure_chromium() {
  local out
  if command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    return 0
  fi
  out="$(_apt install -y -qq chromium 2>&1)" \
    || out="$( (_apt update -qq && _apt install -y -qq chromium) 2>&1)" \
    || { echo "could not install chromium: the browser tests (tests/e2e/test_console.py) will" \
              "fail; apt-get said:" >&2
         printf '%s\n' "$out" >&2; }
}

_apt() {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@"
}
