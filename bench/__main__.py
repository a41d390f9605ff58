"""Benchmarks as commands with fixed output: `python -m bench burndown [--jobs N]`,
`python -m bench ab --a TREE [--b TREE] [--pairs N] -- COMMAND [ARGS]`,
`python -m bench cpu [--mode threads|pool[:N]|processes[:N],...] [--runs R] [--after-start]`,
`python -m bench delayed [--burst N]`,
`python -m bench fairness [--flood N] [--few M] [--runs R]`,
`python -m bench metrics_cost`,
`python -m bench objectives [--schedules N] [--shards S] [--seconds T] [--cluster]`,
`python -m bench outbox [--rows N] [--batch B] [--commits C]`,
`python -m bench peers [--jobs N] [--runs R] [--only ours,arq,...] [--delayed N]`,
`python -m bench processes [--jobs N] [--processes P]`,
`python -m bench queue_names [--names N] [--busy B] [--before TREE]`,
`python -m bench retention-soak [--rate R] [--seconds S] [--retention T]`,
`python -m bench submit [--jobs N] [--batch B] [--singles M]`,
`python -m bench script_ab --a TREE [--b TREE]`.

Each prints one summary line and writes JSON to bench/out/<name>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from . import (
    ab,
    burndown,
    burst,
    cluster,
    cpu,
    delayed,
    fairness,
    metrics_cost,
    objectives,
    outbox,
    peers,
    processes,
    queue_names,
    retention,
    retention_soak,
    script_ab,
    snapshot,
    submit,
    sustained,
)
from .common import private_redis

COMMANDS = {"ab": ab, "burndown": burndown, "burst": burst, "cluster": cluster, "cpu": cpu,
            "delayed": delayed, "fairness": fairness, "metrics_cost": metrics_cost,
            "objectives": objectives, "outbox": outbox, "peers": peers,
            "processes": processes,
            "queue_names": queue_names,
            "retention": retention, "retention-soak": retention_soak,
            "script_ab": script_ab, "snapshot": snapshot, "submit": submit, "sustained": sustained}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if getattr(args, "redis_url", None) == "private":
            args.redis_url = stack.enter_context(private_redis())
        result = COMMANDS[args.command].run(args)
    out = Path(args.out) if getattr(args, "out", None) else Path(__file__).parent / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.command}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(result["summary"])
    return 0 if result.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
