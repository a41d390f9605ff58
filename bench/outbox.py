"""Outbox: the relay's throughput into Redis, and the commit latency outbox.submit adds.

Throughput: `--rows` rows committed into a fresh outbox (outbox.submit_many, 1,000 a
transaction), then one in-process OutboxRelay (`--batch` rows a pass) moves them all into a
private Redis; rows/s is rows over the time from its first pass to the empty outbox. Every
job is then checked to be in Redis once (the count of job keys, and a sample by id).
Latency: `--commits` transactions of the application, timed from BEGIN to the commit's
return, alternating two kinds: one INSERT into an `orders` table, and the same INSERT plus
outbox.submit of one job (its validation and one INSERT; the outbox's trigger queues a
NOTIFY). The difference of the medians is what the outbox adds. Median of `--runs` rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import psycopg
import redis

from scheduler import Client, outbox
from scheduler.outbox.relay import OutboxRelay, RelayConfig
from scheduler.outbox.rows import upgrade

from .common import drop_namespace, fresh_namespace, machine
from .history import DEFAULT_DSN


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=1000, help="rows per relay pass")
    p.add_argument("--commits", type=int, default=2000, help="transactions timed per kind")
    p.add_argument("--runs", type=int, default=3, help="repeat and report the median")
    p.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    p.add_argument("--redis-url", default="private",
                   help="'private' (default): a redis-server of the bench's own")
    p.add_argument("--out", default=None)


def _throughput(args: argparse.Namespace, r: redis.Redis, schema: str) -> dict[str, Any]:
    ns = fresh_namespace("outbox")
    try:
        with psycopg.connect(args.postgres_dsn) as conn:
            ids: list[str] = []
            for i in range(0, args.rows, 1000):
                ids += outbox.submit_many(conn, [{"task": "bench.noop", "payload": j}
                                                 for j in range(i, min(args.rows, i + 1000))],
                                          schema=schema)
                conn.commit()
        with Client(args.redis_url, ns) as client:
            client.create_namespace()
            relay = OutboxRelay(client, args.postgres_dsn, schema=schema,
                                config=RelayConfig(batch=args.batch))
            try:
                t0 = time.perf_counter()
                while relay.run_once():
                    pass
                elapsed = time.perf_counter() - t0
            finally:
                relay.close()
            jobs = sum(1 for k in r.scan_iter(match=f"{ns}:*job:*", count=10_000)
                       if b"submitted" not in k)
            pipe = r.pipeline(transaction=False)
            for job_id in ids[:: max(1, len(ids) // 1000)]:
                pipe.exists(client._core.job_key(job_id))
            ok = jobs == args.rows and all(pipe.execute())
    finally:
        drop_namespace(r, ns)
    return {"rows_per_s": args.rows / elapsed, "ok": ok}


def _latency(args: argparse.Namespace, schema: str) -> dict[str, float]:
    plain: list[float] = []
    boxed: list[float] = []
    with psycopg.connect(args.postgres_dsn) as conn:
        for i in range(2 * args.commits):
            t = time.perf_counter()
            conn.execute(f'INSERT INTO "{schema}".orders (note) VALUES (%s)', (str(i),))
            if i % 2:
                outbox.submit(conn, "send_confirmation", {"order": i}, schema=schema)
            conn.commit()
            (boxed if i % 2 else plain).append((time.perf_counter() - t) * 1e6)
        conn.execute(f'DELETE FROM "{schema}".outbox')
        conn.commit()
    plain.sort()
    boxed.sort()
    return {"plain_p50_us": plain[len(plain) // 2], "boxed_p50_us": boxed[len(boxed) // 2],
            "plain_p99_us": plain[int(len(plain) * 0.99)],
            "boxed_p99_us": boxed[int(len(boxed) * 0.99)]}


def run(args: argparse.Namespace) -> dict[str, Any]:
    r = redis.Redis.from_url(args.redis_url)
    schema = f"bench_outbox_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.postgres_dsn, autocommit=True) as admin:
        upgrade(admin, schema)
        admin.execute(f'CREATE TABLE "{schema}".orders (id bigserial PRIMARY KEY, note text)')
        try:
            runs = [{**_throughput(args, r, schema), **_latency(args, schema)}
                    for _ in range(args.runs)]
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')

    def med(key: str) -> float:
        return statistics.median(x[key] for x in runs)

    ok = all(x["ok"] for x in runs)
    added = med("boxed_p50_us") - med("plain_p50_us")
    summary = (f"outbox: relay {med('rows_per_s'):,.0f} rows/s into Redis (median of "
               f"{args.runs}, {args.rows:,} rows, batches of {args.batch:,}); commit p50 "
               f"{med('plain_p50_us'):,.0f} us plain, {med('boxed_p50_us'):,.0f} us with "
               f"outbox.submit (+{added:,.0f} us), p99 {med('plain_p99_us'):,.0f} / "
               f"{med('boxed_p99_us'):,.0f} us" + ("" if ok else "; JOBS MISSING"))
    return {"summary": summary, "ok": ok, "runs": runs, "machine": machine(r)}
