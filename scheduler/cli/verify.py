"""`sched verify`: prove the scheduler's guarantees on this deployment with canary jobs
(scheduler.testing.verify does the run; this parses, prints and picks the exit code)."""

from __future__ import annotations

import re
import sys
from typing import Any

import click
import msgspec

from scheduler.cli.options import Finite, history_source, store_options
from scheduler.core.errors import RedisUnavailable
from scheduler.redis.failures import REDIS_ERRORS
from scheduler.testing import verify as run

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


class Duration(Finite):
    """Seconds, as a number or with a unit (90, 30s, 5m, 1h), within the range."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        m = _DURATION.match(value.strip()) if isinstance(value, str) else None
        if m:
            value = float(m.group(1)) * _UNIT_S[m.group(2)]
        return super().convert(value, param, ctx)


@click.command()
@click.option("--duration", type=Duration(min=run.MIN_DURATION_S, max=run.MAX_DURATION_S),
              default="60s", help="How long canaries are submitted: 60 (seconds), 30s, 5m.")
@click.option("--rate", type=Finite(min=run.MIN_RATE, max=run.MAX_RATE), default=200.0,
              help="Immediate canaries a second.")
@click.option("--queue", default="default", help="The queue the canaries go to (workers must "
                                                 "read it).")
@click.option("--start-timeout", type=Finite(min=0.5, max=600), default=10.0,
              help="Seconds a first canary may wait for a worker, and a delayed one for a "
                   "scheduler node, before the run gives up (exit 2).")
@click.option("--settle-timeout", type=Finite(min=1, max=3600), default=60.0,
              help="Seconds the run waits for its canaries to end after the last was due.")
@click.option("--history/--no-history", default=True,
              help="Judge the history store against Redis for every canary slot, when the "
                   "namespace keeps history (a snapshotter runs on it).")
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def verify(obj: dict[str, str], duration: float, rate: float, queue: str,
           start_timeout: float, settle_timeout: float, history: bool,
           postgres_dsn: str | None, history_file: str, as_json: bool) -> None:
    """Prove the guarantees on this deployment: submit canary jobs for --duration, wait for
    them to end, judge them (every accepted one ran, at most one committed success per slot,
    one slot per cron fire time, retries by their policy, start lag against 2 s, and the
    history store equal to Redis when the namespace keeps history) and remove
    every key the run made. Exit 0: every invariant holds; 1: one does not (its evidence
    names the slots); 2: the run could not judge (no worker serves the canary, no scheduler
    node, Redis unreachable)."""
    from scheduler import Client

    config = run.VerifyConfig(duration_s=duration, rate=rate, queue=queue,
                              start_timeout_s=start_timeout, settle_s=settle_timeout,
                              history=history)
    store = history_source(postgres_dsn, history_file, read_only=True)

    def say(line: str) -> None:
        if not as_json:
            click.echo(line, err=True)

    try:
        with Client(obj["redis_url"], obj["namespace"], history=store) as client:
            verdict = run.verify(client, config, say)
    except run.CannotVerify as exc:
        click.echo(f"error: cannot verify: {exc}", err=True)
        sys.exit(2)
    except (RedisUnavailable, *REDIS_ERRORS) as exc:
        click.echo(f"error: cannot verify: Redis is unreachable ({exc}); check --redis-url / "
                   f"SCHED_REDIS_URL", err=True)
        sys.exit(2)
    if as_json:
        click.echo(msgspec.json.encode(verdict.as_json()).decode())
    else:
        _print(verdict)
    sys.exit(0 if verdict.holds else 1)


def _print(verdict: run.Verdict) -> None:
    width = max(len(i.name) for i in verdict.invariants)
    click.echo(f"verify run {verdict.run}: {verdict.slots} canary slots "
               f"({', '.join(f'{n} {k}' for k, n in sorted(verdict.canaries.items()))})")
    for i in verdict.invariants:
        click.echo(f"  {'ok  ' if i.holds else 'FAIL'} {i.name:<{width}}  {i.figure}")
    for i in verdict.invariants:
        for line in i.evidence[:20]:
            click.echo(f"    {line}")
        if len(i.evidence) > 20:
            click.echo(f"    ... and {len(i.evidence) - 20} more ({i.name})")
    click.echo(f"removed {verdict.removed_keys} keys the run made"
               + (f"; {verdict.left_jobs} canary jobs still running were left (they end and "
                  f"leave by the namespace's retention)" if verdict.left_jobs else ""))
    click.echo("every invariant holds" if verdict.holds else
               f"FAILED: {', '.join(i.name for i in verdict.invariants if not i.holds)}")
