"""Medians, per-round ratios (ours / theirs), the summary line and a Markdown table."""

from __future__ import annotations

import statistics
from typing import Any

Runs = dict[str, list[dict[str, Any]]]


def _ok(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in runs if "error" not in x]


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [x[key] for x in _ok(runs) if x.get(key) is not None]
    return statistics.median(values) if values else None


def _ratio(runs: Runs, name: str, key: str) -> float | None:
    """Median over rounds of ours[i][key] / name[i][key], rounds where both ran."""
    pairs = [(a, b) for a, b in zip(runs.get("ours", []), runs[name], strict=False)
             if "error" not in a and "error" not in b and b[key]]
    return statistics.median(a[key] / b[key] for a, b in pairs) if pairs else None


def _table(burn: dict[str, dict[str, Any]], delayed: dict[str, dict[str, Any]],
           versions: dict[str, str | None]) -> str:
    def f(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    rows = ["| system | version | jobs | executions/s | ours / theirs | worker CPU us/job | "
            "Redis CPU us/job | delayed p50 / p99 / max ms | p99 ours / theirs |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys([*burn, *delayed]):
        b, d = burn.get(name, {}), delayed.get(name, {})
        lag = ("-" if d.get("p99_ms") is None else
               f"{d['p50_ms']:.0f} / {d['p99_ms']:.0f} / {d['max_ms']:.0f}")
        jobs = b.get("jobs")
        rows.append(f"| {name} | {versions.get(name) or 'this commit'} | "
                    f"{'-' if jobs is None else f'{jobs:,}'} | {f(b.get('per_s'), ',.0f')} | "
                    f"{f(b.get('ratio'), '.2f')} | {f(b.get('worker_us_per_job'), '.1f')} | "
                    f"{f(b.get('redis_us_per_job'), '.1f')} | {lag} | "
                    f"{f(d.get('ratio'), '.2f')} |")
    return "\n".join(rows)


def summarize(burn_runs: Runs, delayed_runs: Runs, unavailable: dict[str, str],
              versions: dict[str, str | None]) -> dict[str, Any]:
    burn: dict[str, dict[str, Any]] = {}
    for name, runs in burn_runs.items():
        ok = _ok(runs)
        burn[name] = {
            "jobs": ok[0]["jobs"] if ok else None, "runs_ok": len(ok),
            "finished": all(x["finished"] for x in ok) if ok else False,
            "errors": [x["error"] for x in runs if "error" in x],
            **{k: _median(runs, k) for k in ("per_s", "worker_us_per_job",
                                              "redis_us_per_job", "enqueue_per_s")},
            "ratio": None if name == "ours" else _ratio(burn_runs, name, "per_s")}
    delayed: dict[str, dict[str, Any]] = {}
    for name, runs in delayed_runs.items():
        delayed[name] = {
            "runs_ok": len(_ok(runs)), "errors": [x["error"] for x in runs if "error" in x],
            **{k: _median(runs, k) for k in ("p50_ms", "p99_ms", "max_ms", "min_ms")},
            "ratio": None if name == "ours" else _ratio(delayed_runs, name, "p99_ms")}

    def rate(name: str, b: dict[str, Any]) -> str:
        if b["per_s"] is None:
            return f"{name} failed ({b['errors'][0][:80] if b['errors'] else '?'})"
        partial = "" if b["finished"] else " (timed out)"
        ratio = "" if b["ratio"] is None else f" ({b['ratio']:.2f}x)"
        return f"{name} {b['per_s']:,.0f}{partial}{ratio}"

    def lag(name: str, d: dict[str, Any]) -> str:
        if d["p99_ms"] is None:
            return f"{name} failed ({d['errors'][0][:80] if d['errors'] else '?'})"
        return f"{name} {d['p99_ms']:,.0f} ms"

    parts = ["peers: burn-down executions/s, median (ours/theirs): "
             + "; ".join(rate(n, b) for n, b in burn.items())]
    if delayed:
        parts.append("delayed start lag p99: " + "; ".join(lag(n, d) for n, d in delayed.items()))
    parts.append("unavailable: " + ("; ".join(f"{n}: {r}" for n, r in unavailable.items())
                                    if unavailable else "none"))
    return {"summary": " | ".join(parts), "burn": burn, "delayed": delayed,
            "unavailable": unavailable, "versions": versions,
            "table": _table(burn, delayed, versions)}
