"""Burst: N slots due at the same instant (a minute-boundary spike) and how fast they start.

Real processes: one `sched scheduler` node and `--workers` `sched worker` processes (no-op
handler). All jobs are submitted with `at=` one instant a few seconds ahead; the lag of each
slot is its attempt's claimed_ms - fire_ms (both Redis time). Reports p50 / p99 / max and
the time by which every slot had started, for each size in `--sizes` (default 5,000 and
100,000), the median over `--runs` rounds, and writes the lag curve (share of slots started vs time since the fire instant)
as bench/out/burst.png when matplotlib is installed (`pip install '.[bench]'`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from .common import machine, process_cpu_s, redis_cpu_s
from .delayed import _lags, _now_ms, _stats, fleet


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", default="5000,100000", help="comma-separated burst sizes")
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--runs", type=int, default=3, help="rounds; each figure is their median")
    p.add_argument("--promote-ahead", type=float, default=None,
                   help="the node's --promote-ahead (default: the node's own default)")
    p.add_argument("--compare-ahead", type=float, default=None, metavar="S",
                   help="also run every round with the node's --promote-ahead S, "
                        "interleaved (A/B in one run)")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def _one(args: argparse.Namespace, r: redis.Redis, n: int, ahead: float | None
         ) -> dict[str, Any]:
    node_args = () if ahead is None else ("--promote-ahead", str(ahead))
    pids: list[int] = []
    with fleet(r, args.redis_url, "burst", args.concurrency, args.workers,
               node_args, pids) as (ns, client):
        shards = client.shards
        lead_s = 4 + n / 8_000  # time to submit them all before the instant, on a busy box
        fire_ms = (_now_ms(r) + int(lead_s * 1000)) // 1000 * 1000 + 1000
        at = datetime.fromtimestamp(fire_ms / 1000, UTC)
        ids: list[str] = []
        for i in range(0, n, 10_000):
            ids += client.submit_many([{"task": "bench.noop", "at": at}
                                       for _ in range(min(10_000, n - i))])
        if _now_ms(r) >= fire_ms:
            raise SystemExit("burst: submitting took longer than the lead; lower the size")
        # CPU from the end of the submits to the fire instant (what early promotion does
        # before it), and from the instant to the last start.
        cpu0 = [redis_cpu_s(r), *(process_cpu_s(p) for p in pids)]
        time.sleep(max(0, fire_ms - _now_ms(r)) / 1000)
        cpu1 = [redis_cpu_s(r), *(process_cpu_s(p) for p in pids)]
        lags = sorted(_lags(r, ns, shards, [(j, fire_ms) for j in ids], 120))
        cpu2 = [redis_cpu_s(r), *(process_cpu_s(p) for p in pids)]
    before = [round((b - a) * 1e6 / n, 1) for a, b in zip(cpu0, cpu1, strict=True)]
    at = [round((b - a) * 1e6 / n, 1) for a, b in zip(cpu1, cpu2, strict=True)]
    stats = _stats(lags)
    return {"n": n, "promote_ahead": ahead, **stats,
            "us_per_slot_before": {"redis": before[0], "node": before[1],
                                   "workers": round(sum(before[2:]), 1)},
            "us_per_slot_from_instant": {"redis": at[0], "node": at[1],
                                         "workers": round(sum(at[2:]), 1)}, "all_started_ms": lags[-1],
            "early": sum(1 for lag in lags if lag < 0), "curve_ms": lags[:: max(1, n // 500)]}


def _plot(results: list[dict[str, Any]], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for res in results:
        curve = res["curve_ms"]
        ax.plot(curve, [100 * (i + 1) / len(curve) for i in range(len(curve))],
                label=f"{res['n']:,} due at once"
                + ("" if res["promote_ahead"] is None else f", promote ahead {res['promote_ahead']:g} s"))
    ax.set_xlabel("time since the fire instant (ms)")
    ax.set_ylabel("slots started (%)")
    ax.set_title("Burst: start lag of slots due at the same instant")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def _median(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians of a (config, size)'s rounds; the curve is that of its median round."""
    by_all = sorted(rounds, key=lambda x: x["all_started_ms"])
    mid = by_all[len(by_all) // 2]
    med = {k: statistics.median(x[k] for x in rounds)
           for k in ("p50_ms", "p99_ms", "max_ms", "all_started_ms")}
    return {**mid, **med, "min_ms": min(x["min_ms"] for x in rounds),
            "early": sum(x["early"] for x in rounds), "runs": len(rounds),
            "all_started_each_ms": [x["all_started_ms"] for x in rounds]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    configs = [args.promote_ahead] + ([args.compare_ahead] if args.compare_ahead is not None
                                      else [])
    rounds: dict[tuple[Any, int], list[dict[str, Any]]] = {}
    for _ in range(args.runs):
        for ahead in configs:  # interleaved: the machine's drift falls on both alike
            for n in sizes:
                rounds.setdefault((ahead, n), []).append(_one(args, r, n, ahead))
    results = [_median(v) for v in rounds.values()]
    out = Path(args.out) if args.out else Path(__file__).parent / "out"
    out.mkdir(parents=True, exist_ok=True)
    png = _plot(results, out / "burst.png")

    def name(x: dict[str, Any]) -> str:
        a = x["promote_ahead"]
        return "" if len(configs) == 1 else (
            " [node default]" if a is None else f" [--promote-ahead {a:g}]")

    summary = "burst: " + "; ".join(
        f"{x['n']:,} due at once{name(x)}: start lag p50 {x['p50_ms']:.0f} ms, p99 "
        f"{x['p99_ms']:.0f} ms, all started by {x['all_started_ms']:.0f} ms (each round: "
        f"{', '.join(str(v) for v in x['all_started_each_ms'])}), min {x['min_ms']} ms, "
        f"{x['early']} early; CPU us/slot before the instant {x['us_per_slot_before']}, "
        f"from it {x['us_per_slot_from_instant']}" for x in results) + (
        f" ({args.workers} worker(s), concurrency {args.concurrency}, median of {args.runs})")
    return {"summary": summary, "results": results, "plot": png, "machine": machine(r)}
