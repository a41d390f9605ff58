"""Burst: N slots due at the same instant (a minute-boundary spike) and how fast they start.

Real processes: one `sched scheduler` node and `--workers` `sched worker` processes (no-op
handler). All jobs are submitted with `at=` one instant a few seconds ahead; the lag of each
slot is its attempt's claimed_ms - fire_ms (both Redis time). Reports p50 / p99 / max and
the time by which every slot had started, for each size in `--sizes` (default 5,000 and
100,000), and writes the lag curve (share of slots started vs time since the fire instant)
as bench/out/burst.png when matplotlib is installed (`pip install '.[bench]'`).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from .common import machine
from .delayed import _lags, _now_ms, _stats, fleet


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", default="5000,100000", help="comma-separated burst sizes")
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--workers", type=int, default=1, help="worker processes")
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def _one(args: argparse.Namespace, r: redis.Redis, n: int) -> dict[str, Any]:
    with fleet(r, args.redis_url, "burst", args.concurrency, args.workers) as (ns, client):
        shards = client.shards
        lead_s = 3 + n / 40_000  # time to submit them all before the instant
        fire_ms = (_now_ms(r) + int(lead_s * 1000)) // 1000 * 1000 + 1000
        at = datetime.fromtimestamp(fire_ms / 1000, UTC)
        ids: list[str] = []
        for i in range(0, n, 10_000):
            ids += client.submit_many([{"task": "bench.noop", "at": at}
                                       for _ in range(min(10_000, n - i))])
        if _now_ms(r) >= fire_ms:
            raise SystemExit("burst: submitting took longer than the lead; lower the size")
        lags = sorted(_lags(r, ns, shards, [(j, fire_ms) for j in ids], 120))
    stats = _stats(lags)
    return {"n": n, **stats, "all_started_ms": lags[-1], "curve_ms": lags[:: max(1, n // 500)]}


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
                label=f"{res['n']:,} due at once")
    ax.set_xlabel("time since the fire instant (ms)")
    ax.set_ylabel("slots started (%)")
    ax.set_title("Burst: start lag of slots due at the same instant")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = [_one(args, r, n) for n in sizes]
    out = Path(args.out) if args.out else Path(__file__).parent / "out"
    out.mkdir(parents=True, exist_ok=True)
    png = _plot(results, out / "burst.png")
    summary = "burst: " + "; ".join(
        f"{x['n']:,} due at once: start lag p50 {x['p50_ms']} ms, p99 {x['p99_ms']} ms, "
        f"all started by {x['all_started_ms']} ms" for x in results) + (
        f" ({args.workers} worker(s), concurrency {args.concurrency})")
    return {"summary": summary, "results": results, "plot": png, "machine": machine(r)}
