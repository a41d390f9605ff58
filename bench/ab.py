"""A/B: any bench command in two source trees, as interleaved pairs, with the median of the
per-pair ratios B/A of every figure it reports.

    python -m bench ab --a /tmp/before --pairs 8 -- burndown --jobs 100000 --runs 1

A busy machine swings by more between minutes than most changes move a figure, so a change
is judged by pairs run back to back (A B, then B A, alternating which goes first: the
first run of a pair may find the machine in another state than the second), never against
a figure from another hour. Each tree runs with its own interpreter: `TREE/.venv/bin/python`
when there is one (a tree whose dependencies differ), else this one with the tree first on
its path. The figures compared are the numbers of each run's JSON (`bench/out/NAME.json`,
nested fields by dotted name, a one-run list as that run); `--keys` picks those the summary
line shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# What the summary shows when --keys is not given: burn-down's figures.
DEFAULT_KEYS = ("median_per_s", "runs.worker_us_per_job", "runs.redis_us_per_job")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--a", required=True, help="source tree of variant A (a checkout)")
    p.add_argument("--b", default=".", help="source tree of variant B")
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--keys", default=",".join(DEFAULT_KEYS),
                   help="comma-separated figures the summary line shows (dotted names)")
    p.add_argument("--out", default=None)
    p.add_argument("bench", nargs=argparse.REMAINDER,
                   help="after --: the bench command and its arguments, as for python -m bench")


def flat(value: Any, prefix: str = "") -> dict[str, float]:
    """The numbers of a bench's JSON by dotted name (booleans are not figures)."""
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flat(v, f"{prefix}{k}."))
    elif isinstance(value, list) and len(value) == 1:
        out.update(flat(value[0], prefix))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix.rstrip(".")] = float(value)
    return out


def _python(tree: Path) -> tuple[str, dict[str, str]]:
    venv = tree / ".venv" / "bin" / "python"
    if venv.exists():
        return str(venv), dict(os.environ)
    path = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])
    return sys.executable, {**os.environ, "PYTHONPATH": path}


def _run(tree: Path, command: list[str]) -> tuple[str, dict[str, float]]:
    python, env = _python(tree)
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as out:
        done = subprocess.run([python, "-m", "bench", *command, "--out", out], cwd=tree,
                              env=env, capture_output=True, text=True)
        if done.returncode not in (0, 1):  # 1: the bench ran and reported a failed check
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SystemExit(f"ab: `python -m bench {' '.join(command)}` failed in {tree}: "
                             f"{tail}")
        summary = (done.stdout.strip().splitlines() or [""])[-1]
        return summary, flat(json.loads((Path(out) / f"{command[0]}.json").read_text()))


def _command(args: argparse.Namespace) -> list[str]:
    """The compared command, without the `--` before it and without an `--out` (each run
    writes where ab reads it; an `--out` given after the `--` is ab's own)."""
    command, rest = [], [a for a in args.bench or [] if a != "--"]
    while rest:
        arg = rest.pop(0)
        if arg == "--out" and rest:
            args.out = args.out or rest.pop(0)
        elif arg.startswith("--out="):
            args.out = args.out or arg.partition("=")[2]
        else:
            command.append(arg)
    return command


def run(args: argparse.Namespace) -> dict[str, Any]:
    command = _command(args)
    if not command or command[0] == "ab":
        raise SystemExit("ab: give the bench command to compare after --, e.g. "
                         "python -m bench ab --a /tmp/before -- burndown --jobs 100000")
    trees = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    for name, tree in trees.items():
        if not (tree / "bench" / "__main__.py").exists():
            raise SystemExit(f"ab: --{name.lower()} {tree} is not a source tree of this "
                             f"project (no bench/__main__.py)")
    ratios: dict[str, list[float]] = {}
    pairs = []
    for i in range(args.pairs):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        got = {v: _run(trees[v], command) for v in order}
        print(f"pair {i + 1} ({' then '.join(order)}): A {got['A'][0]} | B {got['B'][0]}",
              file=sys.stderr)
        pairs.append({v: got[v][1] for v in "AB"})
        a, b = got["A"][1], got["B"][1]
        for key in a.keys() & b.keys():
            if a[key]:
                ratios.setdefault(key, []).append(b[key] / a[key])
    medians = {k: statistics.median(v) for k, v in sorted(ratios.items())}
    shown = [k for k in args.keys.split(",") if k in medians] or list(medians)[:3]
    summary = (f"ab ({args.pairs} pairs of `{' '.join(command)}`), B/A median of the pair "
               "ratios: " + "; ".join(
                   f"{k} {medians[k]:.3f} ({min(ratios[k]):.2f}-{max(ratios[k]):.2f})"
                   for k in shown))
    return {"summary": summary, "command": command, "a": str(trees["A"]),
            "b": str(trees["B"]), "pairs": pairs, "ratios": ratios, "medians": medians}
