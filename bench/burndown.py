"""Burn-down: N pre-submitted no-op jobs run by one worker process (this one).

The worker runs as `sched worker` runs it: uvloop and `WorkerConfig()`'s defaults, which are
the CLI's (concurrency 100, batch 500, 2 claim pipelines, 1 s blocking reads), unless the
flags say otherwise.

Measures submit_many throughput, execution throughput, and CPU per job: this process's own
CPU time and Redis's (INFO cpu) over the run. Checks every handler ran exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio

from scheduler import Client, Context, Registry, UnknownTaskWarning
from scheduler.redis.clients import process_redis
from scheduler.worker.worker import Worker, WorkerConfig

from .common import drop_namespace, fresh_namespace, machine, redis_cpu_s

_DEFAULTS = WorkerConfig()  # sched worker's flags default to these


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3, help="repeat and report the median")
    p.add_argument("--concurrency", type=int, default=_DEFAULTS.concurrency,
                   help="default: sched worker's")
    p.add_argument("--batch", type=int, default=_DEFAULTS.batch)
    p.add_argument("--pipelines", type=int, default=_DEFAULTS.pipelines,
                   help="claim round trips in flight")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own, so other "
                        "users of a shared Redis neither slow it nor blur its CPU figures")
    p.add_argument("--trace", action="store_true",
                   help="tracing on (scheduler/observe/tracing.py): spans go to an SDK TracerProvider "
                        "with a BatchSpanProcessor whose exporter drops them, so the figures "
                        "are the spans' cost without an exporter's")
    p.add_argument("--limit", type=int, default=None,
                   help="set a queue-wide concurrency limit of N on the queue first (the cost "
                        "of limits: N >= --concurrency never binds)")
    p.add_argument("--keys", type=int, default=0,
                   help="submit each job with one of N concurrency keys, in turn (0: none): "
                        "the keyed path, lua/take.lua")
    p.add_argument("--per-key", type=int, default=None,
                   help="set a per-key concurrency limit of N on the queue first (with --keys; "
                        "binding when keys x N < --concurrency)")
    p.add_argument("--sleep-ms", type=float, default=0,
                   help="each handler awaits this long (0: returns at once)")
    p.add_argument("--no-eager", dest="eager", action="store_false",
                   help="WorkerConfig(eager_start=False), as `sched worker --no-eager-start`: "
                        "handlers' tasks are scheduled, not started eagerly (the default on "
                        "Python 3.12+; 3.11 has no eager start)")
    p.add_argument("--commandstats", action="store_true",
                   help="count the Redis commands the worker sends, per job (INFO "
                        "commandstats, reset after the submit; commands run by a script "
                        "count as commands; each command's count in the JSON's "
                        "runs[].commands): exact where the rates are noisy")
    p.add_argument("--out", default=None)


async def _burn(url: str, ns: str, n: int, concurrency: int, batch: int,
                pipelines: int = 2, client: Any = None,
                cpu: Callable[[], float] | None = None, provider: Any = None,
                sleep_ms: float = 0, eager: bool = True) -> dict[str, float]:
    """`client` (default: a plain client of `url`) is what the worker uses; `cpu` reads
    Redis's CPU seconds (default: INFO cpu of `url`)."""
    registry = Registry()
    seen: set[str] = set()
    dupes = 0
    first: list[float] = []  # wall and CPU time of the first execution (the peers' window)
    finished = asyncio.Event()

    @registry.task("bench.noop")
    async def noop(ctx: Context, payload: Any) -> None:
        # The harness's own work per job, as light as BullMQ's (bullmq_peer.cjs: a count):
        # a set, not a Counter (whose missing-key path is a visible share of the worker's CPU).
        nonlocal dupes
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)
        if ctx.slot_id in seen:
            dupes += 1
            return
        if not seen:
            first.extend((time.perf_counter(), time.process_time()))
        seen.add(ctx.slot_id)
        if len(seen) == n:
            finished.set()

    # The client `sched worker` makes (cli/run.py): its timeouts, its pool, its packing.
    client = client or process_redis(url, WorkerConfig().lease_s)
    sync = redis.Redis.from_url(url) if cpu is None else None
    cpu = cpu or (lambda: redis_cpu_s(sync))
    worker = Worker(client, registry, namespace=ns,
                    config=WorkerConfig(concurrency=concurrency, batch=batch,
                                        pipelines=pipelines, tracing=provider or False,
                                        eager_start=eager))
    await worker.setup()
    cpu0, rcpu0, t0 = time.process_time(), cpu(), time.perf_counter()
    task = asyncio.create_task(worker.run())
    await finished.wait()
    last = time.perf_counter()
    elapsed = last - t0
    if provider is not None:
        provider.force_flush()  # the exporter thread's work is the process's too
    used, rcpu = time.process_time() - cpu0, cpu() - rcpu0
    window_cpu = time.process_time() - first[1]
    worker.stop()
    await task
    await client.aclose()
    if sync is not None:
        sync.close()
    # From the first execution to the last, as bench peers measures every other system
    # (peers/runner.py): (n - 1) / (last - first), the worker's CPU over that window.
    window = {"window_per_s": (n - 1) / (last - first[0]) if last > first[0] else 0.0,
              "window_worker_us_per_job": window_cpu / n * 1e6}
    return {"seconds": elapsed, "per_s": n / elapsed, "worker_us_per_job": used / n * 1e6,
            "redis_us_per_job": rcpu / n * 1e6, "duplicates": dupes,
            "committed": worker.committer.committed, **window}


def submit(url: str, ns: str, n: int, provider: Any = None, keys: int = 0) -> float:
    """Pre-submit `n` no-op jobs with `submit_many` (with `keys`, each with one of that many
    concurrency keys, in turn); returns the seconds it took."""
    with Client(url, ns, tracing=provider or False) as client, warnings.catch_warnings():
        # The backlog is filled before any worker starts, by design: no catalog knows the
        # task yet, and the client's warning says so (UnknownTaskWarning) to no purpose here.
        warnings.simplefilter("ignore", UnknownTaskWarning)
        t = time.perf_counter()
        for i in range(0, n, 10_000):
            client.submit_many([{"task": "bench.noop", "payload": j,
                                 **({"concurrency_key": f"k{j % keys}"} if keys else {})}
                                for j in range(i, min(n, i + 10_000))])
        return time.perf_counter() - t


def run(args: argparse.Namespace) -> dict[str, Any]:
    import uvloop

    r = redis.Redis.from_url(args.redis_url)
    runs = []
    spans = _SpanSink.provider() if args.trace else None
    for _ in range(args.runs):
        ns = fresh_namespace("burn")
        try:
            submit_s = submit(args.redis_url, ns, args.jobs, spans, args.keys)
            if args.limit or args.per_key:
                with Client(args.redis_url, ns) as client:
                    client.set_queue_limit("default", concurrency=args.limit,
                                           per_key_concurrency=args.per_key)
            if args.commandstats:
                r.config_resetstat()
            result = uvloop.run(_burn(args.redis_url, ns, args.jobs, args.concurrency,
                                      args.batch, args.pipelines, provider=spans,
                                      sleep_ms=args.sleep_ms, eager=args.eager))
            result["submit_per_s"] = args.jobs / submit_s
            if args.commandstats:
                stats = r.info("commandstats")
                result["commands_per_job"] = sum(v["calls"] for v in stats.values()) / args.jobs
                result["scripts_per_job"] = stats.get("cmdstat_evalsha", {}).get("calls", 0) \
                    / args.jobs
                # each command's count a job (the JSON's runs[].commands), by name
                result["commands"] = {name.removeprefix("cmdstat_"): v["calls"] / args.jobs
                                      for name, v in stats.items()}
                # and its Redis time a job in microseconds (a script's own commands count
                # both in their rows and in evalsha's)
                result["commands_us"] = {name.removeprefix("cmdstat_"): v["usec"] / args.jobs
                                         for name, v in stats.items()}
            runs.append(result)
        finally:
            drop_namespace(r, ns)

    def med(key: str) -> float:
        return statistics.median(x[key] for x in runs)

    ok = all(x["duplicates"] == 0 and x["committed"] == args.jobs for x in runs)
    flags = ((" --trace" if args.trace else "") + ("" if args.eager else " --no-eager")
             + (f" --keys {args.keys}" if args.keys else "")
             + (f" --per-key {args.per_key}" if args.per_key else "")
             + (f" --limit {args.limit}" if args.limit else ""))
    summary = (f"burndown{flags} (concurrency {args.concurrency}, "
               f"batch {args.batch}, {args.pipelines} pipelines): {args.jobs} jobs "
               f"x{args.runs}: {med('per_s'):,.0f} executions/s "
               f"(median), worker {med('worker_us_per_job'):.1f} us/job + redis "
               f"{med('redis_us_per_job'):.1f} us/job CPU; submit_many {med('submit_per_s'):,.0f}"
               f" jobs/s; exactly once: {'yes' if ok else 'NO'}"
               + (f"; {med('commands_per_job'):.3f} Redis commands a job "
                  f"({med('scripts_per_job'):.4f} script calls)" if args.commandstats else ""))
    return {"summary": summary, "ok": ok, "jobs": args.jobs, "runs": runs,
            "median_per_s": med("per_s"), "median_submit_per_s": med("submit_per_s"),
            "machine": machine(r)}


class _SpanSink:
    """An SDK exporter that drops what it is given (and counts it)."""

    exported = 0

    @classmethod
    def provider(cls) -> Any:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Drop(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                cls.exported += len(spans)
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        # A queue that holds a whole run: the default (2,048) drops spans past it, which
        # would make tracing look cheaper than it is.
        provider.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=1 << 20))
        return provider
