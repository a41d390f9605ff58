"""Ours in the peers' workloads, through the same code as `bench burndown` and `bench delayed`.

Burn-down: burndown.py's `submit` and `_burn` (the worker runs in this process as `sched
worker` runs it: uvloop, its default concurrency (100), batch 500, 2 pipelines), measured as
every other peer is (runner.py): executions/s from the first execution to the last, the
worker's CPU over that window. Delayed: delayed.py's real processes (one `sched scheduler`
node, one `sched worker`), every job due at the same whole second; lag = claimed_ms - fire_ms.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import redis

from scheduler import Client

from .. import burndown
from .. import delayed as delayed_bench
from ..common import drop_namespace, fresh_namespace, stop_processes
from .runner import lag_stats


def burn(url: str, jobs: int, concurrency: int = burndown._DEFAULTS.concurrency,
         batch: int = burndown._DEFAULTS.batch) -> dict[str, Any]:
    import uvloop

    r = redis.Redis.from_url(url)
    ns = fresh_namespace("peers")
    try:
        submit_s = burndown.submit(url, ns, jobs)
        result = uvloop.run(burndown._burn(url, ns, jobs, concurrency, batch))
    finally:
        drop_namespace(r, ns)
        r.close()
    return {"jobs": jobs, "done": result["committed"], "finished": True,
            "seconds": result["seconds"], "per_s": result["window_per_s"],
            "worker_us_per_job": result["window_worker_us_per_job"],
            "redis_us_per_job": result["redis_us_per_job"], "enqueue_per_s": jobs / submit_s,
            "duplicates": result["duplicates"]}


def delayed(url: str, jobs: int, lead_s: float, timeout_s: float) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    ns = fresh_namespace("peers-delayed")
    os.environ.setdefault("PYTHONPATH", str(delayed_bench.ROOT))
    procs: list[Any] = []
    try:
        with Client(url, ns) as client:
            client.create_namespace()  # the processes wait for it
            procs = delayed_bench._procs(url, ns, burndown._DEFAULTS.concurrency)
            delayed_bench.wait_ready(client, procs, 1)
            due_ms = math.ceil(time.time() + lead_s) * 1000
            ids: list[str] = []
            for i in range(0, jobs, 5000):
                now = delayed_bench._now_ms(r)
                ids += client.submit_many([{"task": "bench.noop", "delay": (due_ms - now) / 1000}
                                           for _ in range(min(5000, jobs - i))])
            late = time.time() * 1000 > due_ms
            fires = delayed_bench._fire_times(r, ns, client.shards, ids)
            lags = delayed_bench._lags(r, ns, client.shards, list(zip(ids, fires, strict=True)),
                                       timeout_s + lead_s)
        return {**lag_stats([float(x) for x in lags]), "jobs": jobs, "done": len(lags),
                "enqueue_finished_after_due": late}
    finally:
        stop_processes(procs)
        drop_namespace(r, ns)
        r.close()
