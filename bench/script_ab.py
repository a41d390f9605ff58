"""Script A/B: Redis's cost of claim, complete, promote and submit per entry (and of a call
with no entries, of a submit of one job, of a batch of delayed jobs with a payload and
their schedule's fields, and of keyed jobs over 100 concurrency keys: their submit, take and
complete) in two source trees, measured call by call in tight alternation on one private
redis-server, so both variants see the same noise. `INFO commandstats` usec is wall-clock
inside the call and inflates when the CPU is contended; alternation makes the ratio fair.

    python -m bench script_ab --a /tmp/main-copy --b . [--rounds 10] [--batch 64]

Each tree's scripts are read as that tree's scripts/source.py builds them (its own _lib.lua
inlining); both are called with this tree's argument builders (scripts/calls.py), a plain
commit with its entry's lane and id as a worker sends it (the ack fences it), and a keyed
commit as that tree's worker sends it (its queue and key, which fence it, when the tree's
complete.lua reads them: run_member). Figures:
medians of usec per entry (per call for the empty calls) and the median of the per-call
B/A ratios."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from scheduler import Client
from scheduler.core.keys import DISPATCH_GROUP
from scheduler.scripts import calls as scripts

NAMES = ("claim", "complete", "promote", "submit", "take")
KEYS = 100  # the keyed jobs' concurrency keys: a take's turn starts one job of each


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--a", required=True, help="source tree of variant A (a checkout)")
    p.add_argument("--b", default=".", help="source tree of variant B")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--batch", type=int, default=64, help="entries per call")
    p.add_argument("--jobs", type=int, default=2048, help="slots per variant per round")
    p.add_argument("--redis-url", default="private")
    p.add_argument("--out", default=None)


def _texts(root: str) -> dict[str, str]:
    code = ("import json; from scheduler.scripts.source import SOURCES; "
            f"print(json.dumps({{n: SOURCES[n].text for n in {NAMES!r}}}))")
    out = subprocess.check_output([sys.executable, "-c", code], cwd=root,
                                  env={"PYTHONPATH": str(Path(root).resolve())})
    return dict(json.loads(out))


def _jobs(k: int, now: int) -> list[tuple[str, str, str, int, tuple[()]]]:
    """k immediate jobs for submit.lua, with ids of their own."""
    return [(uuid.uuid4().hex, "bench.noop", "default", now, ()) for _ in range(k)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    texts = {v: _texts(root) for v, root in (("A", args.a), ("B", args.b))}
    sha = {v: {n: r.script_load(t) for n, t in texts[v].items()} for v in texts}
    fenced = {v: "run_member" in texts[v]["complete"] for v in texts}
    clients = {v: Client(args.redis_url, f"ab{v}{int(time.time())}", shards=1) for v in sha}
    res: dict[str, dict[str, list[float]]] = {
        k: {"A": [], "B": []} for k in ("claim", "complete", "promote", "claim0", "complete0",
                                        "submit", "submit1", "submit_delayed",
                                        "submit_keyed", "take", "complete_keyed")}

    def usec(v: str, name: str, calls: list[scripts.Call]) -> tuple[float, list[Any]]:
        r.config_resetstat()
        pipe = r.pipeline(transaction=False)
        for call in calls:
            pipe.evalsha(sha[v][name], 1, *call.keys, *call.args)
        out = pipe.execute()
        stat = r.info("commandstats")["cmdstat_evalsha"]
        return stat["usec"] / stat["calls"], out

    def alternate(key: str, name: str, per: int, make: Callable[[str, int], list[scripts.Call]],
                  steps: int, rnd: int) -> None:
        for i in range(steps):
            for v in ("A", "B") if (i + rnd) % 2 == 0 else ("B", "A"):
                u, _ = usec(v, name, make(v, i))
                res[key][v].append(u / per)

    b, n = args.batch, args.jobs

    def one_round(rnd: int) -> None:
        entries, now = {}, int(time.time() * 1000)
        for v, c in clients.items():
            c.submit_many([{"task": "bench.noop", "payload": j} for j in range(n)])
            c.submit_many([{"task": "bench.noop", "payload": j, "delay": 1} for j in range(n)])
            q = c.keys.queue(0, "default")
            if rnd == 0:
                r.xgroup_create(q, DISPATCH_GROUP, id="0", mkstream=True)
            got = r.xreadgroup(DISPATCH_GROUP, "w", {q: ">"}, count=n)
            entries[v] = [("default", m, f[b"s"].decode()) for _, ms in got for m, f in ms]
        pre = {v: c.keys.prefix(0) for v, c in clients.items()}
        alternate("claim", "claim", b, lambda v, i: [scripts.claim(
            pre[v], now, "w", 30_000, entries[v][i * b:(i + 1) * b], trim=False)],
            n // b, rnd)
        # As a worker commits a claimed entry: with its lane and entry id, which the ack fences
        # (the acked path; without them a commit reads each slot).
        alternate("complete", "complete", b, lambda v, i: [scripts.complete(
            pre[v], now, 100_000, "w", [scripts.Succeeded(s, 1, now, now, lane, m)
                                        for lane, m, s in entries[v][i * b:(i + 1) * b]])],
            n // b, rnd)
        alternate("promote", "promote", b, lambda v, i: [scripts.promote(
            pre[v], now + 10_000, 100_000, b)], n // b, rnd)
        alternate("claim0", "claim", 1, lambda v, i: [scripts.claim(
            pre[v], now, "w", 30_000, [], trim=False)] * 50, 20, rnd)
        alternate("complete0", "complete", 1, lambda v, i: [scripts.complete(
            pre[v], now, 100_000, "w", [])] * 50, 20, rnd)
        alternate("submit", "submit", b, lambda v, i: [scripts.submit(
            pre[v], now, 100_000, _jobs(b, now))], n // b, rnd)
        alternate("submit1", "submit", 1, lambda v, i: [scripts.submit(
            pre[v], now, 100_000, _jobs(1, now)) for _ in range(50)], 20, rnd)
        # Delayed jobs as submit_many sends them (fresh ids, a payload, their schedule's fields),
        # firing far beyond what promote above reaches, in later rounds too.
        later = now + 10**9
        alternate("submit_delayed", "submit", b, lambda v, i: [scripts.submit(
            pre[v], now, 100_000, [(f"d{rnd}.{i}.{k}", "bench.noop", "default", later,
                                    ["payload", str(k), "kind", "delayed", "delay_ms", 10**9])
                                   for k in range(b)], fresh=True)], n // b, rnd)
        # Keyed jobs, each variant's own submit (its slots as its take reads them), then taken
        # and completed in batches; every slot is taken by the n // b takes of b.
        keyed = {v: [(uuid.uuid4().hex, "bench.noop", "keyed", now,
                      ["concurrency_key", f"k{k % KEYS}", "payload", str(k)]) for k in range(n)]
                 for v in clients}
        alternate("submit_keyed", "submit", b, lambda v, i: [scripts.submit(
            pre[v], now, 100_000, keyed[v][i * b:(i + 1) * b], fresh=True)], n // b, rnd)
        alternate("take", "take", b, lambda v, i: [scripts.take(
            pre[v], now, "w", 30_000, "keyed", b)], n // b, rnd)
        alternate("complete_keyed", "complete", b, lambda v, i: [scripts.complete(
            pre[v], now, 100_000, "w", [scripts.Succeeded(
                f"{job[0]}:{now}", 1, now, now, *(("keyed", "~" + job[4][1]) if fenced[v]
                                                  else ()))
                for job in keyed[v][i * b:(i + 1) * b]])], n // b, rnd)
        for c in clients.values():  # the group stays; the next round reads only new entries
            r.xtrim(c.keys.queue(0, "default"), maxlen=0)
            r.delete(c.keys.events(0))

    for rnd in range(args.rounds):
        one_round(rnd)
    rows = {}
    for key, d in res.items():
        ratio = statistics.median(y / x for x, y in zip(d["A"], d["B"], strict=True) if x)
        rows[key] = {"A": round(statistics.median(d["A"]), 2),
                     "B": round(statistics.median(d["B"]), 2), "ratio": round(ratio, 3)}
    summary = "script_ab (us per entry; 0: per empty call): " + "; ".join(
        f"{k} {v['A']} -> {v['B']} (x{v['ratio']})" for k, v in rows.items())
    return {"summary": summary, "rows": rows, "batch": b, "rounds": args.rounds}
