"""The loss window of a Redis without persistence or replica: a producer submits 1,000 jobs/s,
a worker lags far behind (10 at a time, half a second each), the snapshotter copies history
into Postgres with its defaults; Redis is SIGKILLed and comes back empty; `sched recover`
rebuilds it from Postgres. Every job acknowledged more than 1 s before the kill must be back
(its job hash, and a slot that will run), and nothing is printed as healthy that is not.

Ground truth: the ids submit_many returned and the wall time each batch was acknowledged."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
import redis
from faults.harness import RedisServer, wait_for

from conftest import SCHED
from scheduler import Client
from scheduler.core.keys import Keys, shard_of

pytestmark = pytest.mark.slow

RATE, BATCH, SECONDS = 1000, 20, 4.0


def _produce(client: Client, acked: list[tuple[float, list[str]]], stop: threading.Event,
             effects: str) -> None:
    n, t0 = 0, time.monotonic()
    while not stop.is_set() and time.monotonic() - t0 < SECONDS + 10:
        try:
            ids = client.submit_many([{"task": "test.sleep_then_effect",
                                       "payload": {"seconds": 0.5, "effects": effects}}
                                      for _ in range(BATCH)])
        except Exception:
            return  # Redis is gone: what was acknowledged is in `acked`
        acked.append((time.time(), ids))
        n += BATCH
        ahead = t0 + n / RATE - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def test_recover_restores_every_job_acknowledged_a_second_before_the_loss(
        pg_dsn: str, ns: str, app_env: dict[str, str], redis_url: str) -> None:
    server = RedisServer().start()
    env = {**app_env, "SCHED_TEST_REDIS_URL_APP": redis_url}
    base = [*SCHED, "--redis-url", server.url, "--namespace", ns]
    procs: list[subprocess.Popen[bytes]] = []
    acked: list[tuple[float, list[str]]] = []
    stop = threading.Event()
    try:
        subprocess.run([*base, "db", "upgrade", "--postgres-dsn", pg_dsn], check=True,
                       capture_output=True, timeout=60)
        client = Client(server.url, ns)
        client.create_namespace()
        for args in (("scheduler",), ("worker", "--app", "app_tasks:registry",
                                      "--concurrency", "10"),
                     ("snapshotter", "--postgres-dsn", pg_dsn)):
            procs.append(subprocess.Popen([*base, *args, "--log-level", "warning"], env=env,
                                          stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        wait_for(lambda: len(client.workers()) == 1, 30, "the worker")
        effects = f"{ns}:effects"  # in the shared test Redis: what the handlers ran
        thread = threading.Thread(target=_produce, args=(client, acked, stop, effects))
        thread.start()
        time.sleep(SECONDS)
        server.kill()
        killed = time.time()
        stop.set()
        thread.join(30)
        client.close()
        server.start()  # the same port, empty: no persistence
        out = subprocess.run([*base, "recover", "--postgres-dsn", pg_dsn], capture_output=True,
                             text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        r = server.client()
        keys = Keys(ns)
        shards = int(r.hget(keys.meta, "shards") or 0)
        assert shards > 0

        ran = {slot.decode().rpartition(":")[0]
               for slot in redis.Redis.from_url(redis_url).hkeys(effects)}

        def present(job_id: str) -> bool:
            """Back in Redis, or it had run (a finished one-shot job is not restored)."""
            return job_id in ran or bool(r.exists(keys.job(shard_of(job_id, shards), job_id)))
        early = [j for t, ids in acked if t < killed - 1.0 for j in ids]
        late = [(t, j) for t, ids in acked if t >= killed - 1.0 for j in ids]
        lost_early = [j for j in early if not present(j)]
        lost_late = [killed - t for t, j in late if not present(j)]
        total = sum(len(ids) for _, ids in acked)
        print(f"{total} jobs acknowledged in {SECONDS:.0f}s; {len(early)} more than 1 s before "
              f"the kill, {len(lost_early)} of them lost; of the last second's {len(late)}, "
              f"{len(lost_late)} lost (acknowledged "
              f"{min(lost_late, default=0):.2f}-{max(lost_late, default=0):.2f}s before it)\n"
              f"{out.stdout}")
        assert total >= 0.8 * RATE * SECONDS, "the producer fell far behind its rate"
        assert lost_early == [], f"{len(lost_early)} jobs acknowledged >1 s before the loss lost"
        # Restored jobs have a slot that will run: every restored job's slot is in Redis.
        for job_id in [j for j in early if j not in ran][:50]:
            shard = shard_of(job_id, shards)
            slots = [k for k in r.scan_iter(match=f"{keys.prefix(shard)}slot:{job_id}:*", count=10_000)]
            assert slots, f"job {job_id} restored without a slot"
    finally:
        stop.set()
        for p in procs:
            p.kill()
            p.wait()
        server.stop()
