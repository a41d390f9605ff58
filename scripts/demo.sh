#!/usr/bin/env bash
# The demo: installs into .venv, starts `sched dev` (a scheduler node, a worker and the exporter
# in one process; it starts a private redis-server if none answers on 127.0.0.1:6379), submits
# jobs, shows `sched status`, some metrics and `sched runs`, then stops it and removes every
# key of its namespace (demo-<pid>) from the Redis it ran on, and no other key.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_venv
export PATH="$PWD/.venv/bin:$PATH"
export SCHED_NAMESPACE="demo-$$"
workdir=$(mktemp -d)
ready="$workdir/ready.json"
dev_pid=""
cleanup() {
  local rc=$?
  if [ -n "$dev_pid" ]; then kill -TERM "$dev_pid" 2>/dev/null || true; wait "$dev_pid" || true; fi
  # The demo's keys leave the user's Redis with it, and only they: its namespace's (a
  # private redis-server that `sched dev` started is gone already).
  if [ -n "${SCHED_REDIS_URL:-}" ] && [ "${embedded:-True}" = False ]; then
    python - <<'PY' || rc=1
import os
import sys

from scheduler.core.keys import Keys
from scheduler.core.masking import masked
from scheduler.redis.clients import sync_redis
from scheduler.redis.failures import REDIS_ERRORS

url, ns = os.environ["SCHED_REDIS_URL"], os.environ["SCHED_NAMESPACE"]
pattern, n = Keys(ns).pattern(), 0
try:
    r = sync_redis(url)
    keys = list(r.scan_iter(match=pattern, count=5000))
    for start in range(0, len(keys), 5000):
        pipe = r.pipeline(transaction=False)
        for key in keys[start:start + 5000]:
            pipe.unlink(key)
        n += sum(pipe.execute())
    r.close()
except (*REDIS_ERRORS, OSError) as exc:
    sys.exit(f"error: could not remove the demo's keys ({pattern}) from {masked(url)}: {exc}; "
             f"remove them with: redis-cli --scan --pattern '{pattern}' | xargs redis-cli unlink")
print(f"\n== removed the demo's {n:,} keys (namespace {ns})")
PY
  fi
  rm -rf "$workdir"
  exit "$rc"
}
trap cleanup EXIT

echo "== sched dev --ready-file ... &   (namespace $SCHED_NAMESPACE)"
export SCHED_HISTORY_FILE="$workdir/history.sqlite3"
sched dev --metrics-port 0 --ready-file "$ready" --log-level warning >"$workdir/dev.log" 2>&1 &
dev_pid=$!
for _ in $(seq 300); do
  [ -f "$ready" ] && break
  kill -0 "$dev_pid" 2>/dev/null || break
  sleep 0.1
done
if [ ! -f "$ready" ]; then echo "sched dev did not start:" >&2; cat "$workdir/dev.log" >&2; exit 1; fi
field() { python -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$ready" "$1"; }
export SCHED_REDIS_URL="$(field redis_url)"
embedded="$(field embedded_redis)"
metrics_url="$(field metrics_url)"
sed -n '/^sched dev:/,/Ctrl-C/p' "$workdir/dev.log"

echo; echo "== submitting jobs"
hello=$(sched submit demo.hello --payload '{"name": "world"}')
flaky=$(sched submit demo.flaky --payload '{"fail_rate": 0.7}' --max-attempts 5)
slow=$(sched submit demo.sleep --payload '{"seconds": 1}' --timeout 0.3 --max-attempts 2)
later=$(sched submit demo.hello --payload '{"name": "later"}' --delay 3s)
every2s=$(sched submit demo.hello --payload '{"name": "cron"}' --cron "*/2 * * * * *" \
          --end-at "$(date -u -d '+7 seconds' +%Y-%m-%dT%H:%M:%SZ)")
echo "hello=$hello flaky=$flaky slow=$slow later=$later every2s=$every2s"
python - "$hello" "$flaky" "$slow" "$later" <<'PY'
import os, sys, time
from scheduler import Client
with Client(os.environ["SCHED_REDIS_URL"], os.environ["SCHED_NAMESPACE"]) as client:
    t = time.perf_counter()
    ids = client.submit_many([{"task": "demo.noop", "payload": i} for i in range(20_000)])
    print(f"submitted {len(ids)} no-op jobs in {time.perf_counter() - t:.2f}s")
    t = time.perf_counter()
    while client.slots(ids[-1])[0].status.value != "succeeded" or \
            client.slots(ids[0])[0].status.value != "succeeded":
        time.sleep(0.05)
    print(f"... and the worker ran them in about {time.perf_counter() - t:.2f}s")
    deadline = time.monotonic() + 5  # for `sched status`: the worker's next heartbeat
    while time.monotonic() < deadline and sum(w.succeeded for w in client.workers()) < len(ids):
        time.sleep(0.1)
    deadline = time.monotonic() + 20  # the flaky job retries with backoff: 1s, 2s, 4s, ...
    while time.monotonic() < deadline and any(
            client.slots(j)[0].status.value not in ("succeeded", "dead") for j in sys.argv[1:]):
        time.sleep(0.2)
PY

echo; echo "== sched status"
sched status || echo "(sched status exited $?: unhealthy)"
echo; echo "== a few lines of $metrics_url"
python - "$metrics_url" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
for line in text.splitlines():
    if re.match(r'sched_(workers_alive|dead_letter_size\{shard="0"|queue_depth\{queue="default",shard="0"'
                r'|runs_total\{outcome="(succeeded|failed)".*demo\.(noop|flaky))', line):
        print(line)
PY
sleep 2  # the cron job's last occurrences
echo; echo "== sched jobs list"; sched jobs list
for job in "$hello" "$flaky" "$slow" "$later" "$every2s"; do
  echo; echo "== sched runs $job"; sched runs "$job"
done
echo; echo "== sched jobs show $flaky"; sched jobs show "$flaky"
echo; echo "== sched history --status dead   (the snapshotter's copy, in $SCHED_HISTORY_FILE)"
sched history --status dead
