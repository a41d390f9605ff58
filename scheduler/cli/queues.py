"""`sched queues`: every queue with its depth, lag, rates and limits, `sched queues limit
QUEUE` to set or clear one (`Client.queues`, `Client.set_queue_limit`), `sched queues weight
QUEUE KEY [W]` to show or set a concurrency key's weight in the queue's turns
(`Client.key_weight`, `Client.set_key_weight`), and `sched queues keys QUEUE`: its busiest
concurrency keys (`Client.queue_keys`)."""

from __future__ import annotations

import click

from scheduler.cli.inspect import echo_json, table
from scheduler.cli.observe import _age, _rate
from scheduler.core.limits import MAX_CONCURRENCY


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def queues(ctx: click.Context, as_json: bool) -> None:
    """List queues: DEPTH (not read by any worker yet, keyed slots included), PENDING (read,
    not finished), LAG (how long the oldest ready entry has waited), rates, the limit (the
    per-key one too) with the permits held, and KEYS (concurrency keys with a queued slot:
    `sched queues keys QUEUE` lists the busiest)."""
    if ctx.invoked_subcommand is not None:
        return
    from scheduler import Client

    with Client(ctx.obj["redis_url"], ctx.obj["namespace"]) as client:
        rows = client.queues()
    if as_json:
        echo_json(rows)
        return
    table([[q.queue, f"{q.depth:,}", f"{q.pending:,}", _age(q.oldest_ready_age_s),
            _rate(q.succeeded_per_s), _rate(q.failed_per_s),
            q.limit.text() if q.limit else "-",
            "-" if q.permits_held is None else f"{q.permits_held:,}",
            f"{q.keys_waiting:,}" if q.keys_waiting else "-"] for q in rows],
          ["QUEUE", "DEPTH", "PENDING", "LAG", "OK/S", "FAILED/S", "LIMIT", "RUNNING", "KEYS"])


@queues.command("limit")
@click.argument("queue")
@click.option("--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=None,
              help="Most runs of the queue at once, across all workers.")
@click.option("--rate", default=None,
              help="Most starts per second across all workers: 20, 20/s, 300/m, 1000/h.")
@click.option("--per-key-concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=None,
              help="Most runs at once of any one concurrency key of the queue (jobs "
                   "submitted with --concurrency-key), across all workers.")
@click.option("--per-key-rate", default=None,
              help="Most starts per second of any one concurrency key: 5, 5/s, 60/m, 1000/h.")
@click.option("--clear", is_flag=True, help="Remove the queue's limit.")
@click.pass_obj
def queues_limit(obj: dict[str, str], queue: str, concurrency: int | None, rate: str | None,
                 per_key_concurrency: int | None, per_key_rate: str | None,
                 clear: bool) -> None:
    """Set (or --clear) a queue's limit: every claim after this command returns is held to
    it, by every worker; slots over it stay queued. Each option left out is unlimited."""
    from scheduler import Client
    from scheduler.core.limits import parse_rate

    if clear == (concurrency is not None or rate is not None
                 or per_key_concurrency is not None or per_key_rate is not None):
        raise click.UsageError("give --concurrency, --rate, --per-key-concurrency and/or "
                               "--per-key-rate, or --clear")
    per_s = parse_rate(rate) if rate is not None else None
    key_per_s = parse_rate(per_key_rate) if per_key_rate is not None else None
    with Client(obj["redis_url"], obj["namespace"]) as client:
        limit = client.set_queue_limit(queue, concurrency=concurrency, rate=per_s,
                                       per_key_concurrency=per_key_concurrency,
                                       per_key_rate=key_per_s)
    click.echo(f"queue {queue}: limit {limit.text() if limit else 'cleared'}")


@queues.command("weight")
@click.argument("queue")
@click.argument("key")
@click.argument("weight", type=click.IntRange(1, 1000), required=False)
@click.pass_obj
def queues_weight(obj: dict[str, str], queue: str, key: str, weight: int | None) -> None:
    """Show, or set to WEIGHT (1-1000), how many turns concurrency key KEY gets in each round
    of QUEUE's turns between keys; 1, the default, resets it."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        if weight is None:
            now = client.key_weight(queue, key)
        else:
            now = client.set_key_weight(queue, key, weight)
    click.echo(f"queue {queue}, key {key}: weight {now}" + (" (the default)" if now == 1 else ""))


@queues.command("keys")
@click.argument("queue")
@click.option("--top", type=click.IntRange(min=1, max=1000), default=10, show_default=True,
              help="How many of the busiest keys to list.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def queues_keys(obj: dict[str, str], queue: str, top: int, as_json: bool) -> None:
    """The queue's busiest concurrency keys (by RUNNING + WAITING): WAITING (queued slots,
    waiting for the key's turn or a permit), RUNNING (its runs now), WEIGHT (its turns per
    round), and the queue's per-key limit."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        found = client.queue_keys(queue, top=top)
    if as_json:
        echo_json(found)
        return
    click.echo(f"queue {queue}: {found.limit_text()}; "
               f"{found.keys:,} key(s) with {'at least ' if found.truncated else ''}"
               f"{found.waiting:,} slot(s) waiting")
    if found.busiest:
        table([[k.key, f"{k.waiting:,}", f"{k.running:,}", f"{k.weight:,}"]
               for k in found.busiest], ["KEY", "WAITING", "RUNNING", "WEIGHT"])
