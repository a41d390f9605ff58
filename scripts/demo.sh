#!/usr/bin/env bash
# The demo: installs, starts a worker and a scheduler node, submits jobs, shows them run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_redis
ensure_venv
export SCHED_NAMESPACE="demo-$$"
export PATH="$PWD/.venv/bin:$PATH"
pids=()
cleanup() { kill -TERM "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT

echo "== starting a worker and a scheduler node (namespace $SCHED_NAMESPACE)"
sched worker --app scheduler.examples.tasks:registry --concurrency 200 --log-level warning &
pids+=($!)
sched scheduler --log-level warning &
pids+=($!)

echo "== submitting jobs"
hello=$(sched submit demo.hello --payload '{"name": "world"}')
flaky=$(sched submit demo.flaky --payload '{"fail_rate": 0.7}' --max-attempts 5)
slow=$(sched submit demo.sleep --payload '{"seconds": 1}' --timeout 0.3 --max-attempts 2)
echo "hello=$hello flaky=$flaky slow=$slow"
python - <<'PY'
import time
from scheduler import Client
with Client(namespace=__import__("os").environ["SCHED_NAMESPACE"]) as client:
    t = time.perf_counter()
    ids = client.submit_many([{"task": "demo.noop", "payload": i} for i in range(20_000)])
    print(f"submitted {len(ids)} no-op jobs in {time.perf_counter() - t:.2f}s")
    t = time.perf_counter()
    while client.slots(ids[-1])[0].status.value != "succeeded" or \
            client.slots(ids[0])[0].status.value != "succeeded":
        time.sleep(0.05)
    print(f"... and the worker ran them in about {time.perf_counter() - t:.2f}s")
PY
sleep 3
for job in "$hello" "$flaky" "$slow"; do
  echo; echo "== sched runs $job"; sched runs "$job"
done
echo; echo "== sched jobs show $flaky"; sched jobs show "$flaky"
