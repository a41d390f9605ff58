"""Metrics cost: CPU per job of what the worker's hot path adds for metrics (looking up the
cached label children at claim, the start-lag observation, the success count and duration),
measured in isolation because a burndown on a shared machine is noisier than the effect.
Compared with prometheus_client's own Counter.inc and two Histogram.observe per job."""

from __future__ import annotations

import argparse
import timeit
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from scheduler.observe import metrics


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--out", default=None)


class _Run:
    __slots__ = ("task", "fire_ms", "started_ms", "metrics")


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.jobs
    cache = {("bench", "bench.noop"): metrics.RunMetrics("bench", "bench.noop")}
    r = _Run()
    r.task, r.fire_ms, r.started_ms = "bench.noop", 1_000, 1_000

    def ours() -> None:  # the lines Claims.claim and Execution._execute run per job
        m = cache.get(("bench", r.task))
        r.metrics = m
        m.start_lag.observe_ms(1_003 - r.fire_ms)  # type: ignore[union-attr]
        r.metrics.succeeded(1_004 - r.started_ms)  # type: ignore[union-attr]

    reg = CollectorRegistry()
    runs = Counter("x_runs_total", "", ["queue", "task", "outcome"], registry=reg).labels(
        "bench", "bench.noop", "succeeded")
    lag = Histogram("x_lag_seconds", "", ["queue"], registry=reg).labels("bench")
    took = Histogram("x_took_seconds", "", ["queue", "task"], registry=reg).labels(
        "bench", "bench.noop")

    def stock() -> None:  # the same with prometheus_client's locked types, children cached
        m = cache.get(("bench", r.task))
        r.metrics = m
        lag.observe(0.003)
        runs.inc()
        took.observe(0.001)

    def empty() -> None:
        pass

    base = min(timeit.repeat(empty, number=n, repeat=3)) / n * 1e6
    ours_us = min(timeit.repeat(ours, number=n, repeat=3)) / n * 1e6 - base
    stock_us = min(timeit.repeat(stock, number=n, repeat=3)) / n * 1e6 - base
    summary = (f"metrics_cost: {ours_us:.2f} us/job on the worker's hot path "
               f"(prometheus_client's locked Counter/Histogram would be {stock_us:.2f} us/job)")
    return {"summary": summary, "ours_us_per_job": ours_us, "stock_us_per_job": stock_us}
