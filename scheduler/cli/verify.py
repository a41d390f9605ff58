"""`sched verify`: prove the scheduler's guarantees on this deployment with canary jobs
(scheduler.testing.verify does the run; this parses, prints and picks the exit code)."""

from __future__ import annotations

import re
import signal
import sys
from typing import Any

import click
import msgspec

from scheduler.cli.options import Finite, history_source, store_options
from scheduler.core.errors import RedisUnavailable
from scheduler.redis.failures import REDIS_ERRORS
from scheduler.testing import chaos as chaos_mod
from scheduler.testing import restart as restart_mod
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
@click.option("--chaos", is_flag=True,
              help="For a staging deployment: start extra workers and a scheduler node of "
                   "--app, and kill (SIGKILL) and restart them at random through the run.")
@click.option("--app", "app_spec", default=None,
              help="MODULE:ATTRIBUTE of your Registry, for the workers --chaos starts.")
@click.option("--kills", type=click.IntRange(min=chaos_mod.MIN_KILLS, max=chaos_mod.MAX_KILLS),
              default=5, help="With --chaos: how many kills, spread at random over the run.")
@click.option("--chaos-workers", type=click.IntRange(min=chaos_mod.MIN_WORKERS,
                                                     max=chaos_mod.MAX_WORKERS),
              default=2, help="With --chaos: how many workers it starts (and a node).")
@click.option("--seed", type=click.IntRange(min=0, max=chaos_mod.MAX_SEED), default=None,
              help="With --chaos: the seed of the random schedule (printed at the start; "
                   "give it again to repeat a run's kills).")
@click.option("--redis-restart", "restart_cmd", default=None, metavar="CMD",
              help="A command run once mid-run that restarts or fails over Redis (e.g. "
                   "\"redis-cli -p 26379 SENTINEL FAILOVER mymaster\"); split like a shell "
                   "line, run without a shell. The run submits through the outage and "
                   "judges across it.")
@click.option("--redis-restart-at", "restart_at", default=None,
              help="When --redis-restart runs: a share of --duration (50%, the default) or "
                   "seconds from the start of the canaries (12s), within the first 80% of "
                   "the run.")
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def verify(obj: dict[str, str], duration: float, rate: float, queue: str,
           start_timeout: float, settle_timeout: float, history: bool, chaos: bool,
           app_spec: str | None, kills: int, chaos_workers: int, seed: int | None,
           restart_cmd: str | None, restart_at: str | None, postgres_dsn: str | None, history_file: str, as_json: bool) -> None:
    """Prove the guarantees on this deployment: submit canary jobs for --duration, wait for
    them to end, judge them (every accepted one ran, at most one committed success per slot,
    one slot per cron fire time, retries by their policy, start lag against 2 s, and the
    history store equal to Redis when the namespace keeps history) and remove
    every key the run made. Exit 0: every invariant holds; 1: one does not (its evidence
    names the slots); 2: the run could not judge (no worker serves the canary, no scheduler
    node, Redis unreachable). With --chaos (staging only) it also runs workers and a node of
    --app and kills and restarts them at random through the run."""
    from scheduler import Client

    if chaos and app_spec is None:
        raise click.UsageError("--chaos starts workers of your app: give --app "
                               "MODULE:ATTRIBUTE (e.g. --app tasks:registry)")
    if not chaos and (app_spec is not None or seed is not None):
        raise click.UsageError("--app and --seed are for --chaos: add --chaos, or leave "
                               "them out")

    restart = _restart(restart_cmd, restart_at, duration)
    config = run.VerifyConfig(duration_s=duration, rate=rate, queue=queue,
                              start_timeout_s=start_timeout, settle_s=settle_timeout,
                              history=history, hold_ms=run.CHAOS_HOLD_MS if chaos else 0,
                              lease_canaries=not chaos)
    store = history_source(postgres_dsn, history_file, read_only=True)

    def say(line: str) -> None:
        if not as_json:
            click.echo(line, err=True)

    monkey = None
    if chaos and app_spec is not None:
        monkey = chaos_mod.Chaos(obj["redis_url"], obj["namespace"], app_spec, queue,
                                 kills=kills, workers=chaos_workers,
                                 seed=chaos_mod.new_seed() if seed is None else seed, say=say)
        # SIGTERM unwinds like Ctrl-C: the children are stopped and the run's keys removed.
        signal.signal(signal.SIGTERM, _interrupt)
        # Even with --json: the seed repeats a failing run's kills.
        click.echo(f"chaos: {chaos_workers} worker(s) and a scheduler node of {app_spec}, "
                   f"{kills} kill(s), seed {monkey.seed}", err=True)
    try:
        with Client(obj["redis_url"], obj["namespace"], history=store) as client:
            verdict = run.verify(client, config, say, monkey, restart)
    except run.CannotVerify as exc:
        click.echo(f"error: cannot verify: {exc}", err=True)
        sys.exit(2)
    except (RedisUnavailable, *REDIS_ERRORS) as exc:
        click.echo(f"error: cannot verify: Redis is unreachable ({exc}); check --redis-url / "
                   f"SCHED_REDIS_URL", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("error: verify interrupted; its children were stopped and its keys "
                   "removed", err=True)
        sys.exit(130)
    _emit(verdict, as_json, monkey, restart)
    sys.exit(0 if verdict.holds else 1)


def _emit(verdict: run.Verdict, as_json: bool, monkey: chaos_mod.Chaos | None,
          restart: restart_mod.RedisRestart | None) -> None:
    if as_json:
        out = verdict.as_json()
        if monkey is not None:
            out["chaos"] = {"seed": monkey.seed, "killed": monkey.killed,
                            "in_flight": monkey.in_flight}
        if restart is not None:
            out["redis_restart"] = restart.as_json()
        click.echo(msgspec.json.encode(out).decode())
        return
    if monkey is not None:
        workers = sum(1 for k in monkey.killed if k.startswith("worker "))
        click.echo(f"chaos: seed {monkey.seed}, {len(monkey.killed)} kills: "
                   f"{', '.join(monkey.killed) or 'none'}; {monkey.in_flight} of {workers} "
                   f"worker kills found a canary in flight")
    if restart is not None:
        click.echo(restart.report())
    _print(verdict)


def _restart(command: str | None, at: str | None, duration: float
             ) -> restart_mod.RedisRestart | None:
    """The --redis-restart command, checked before anything runs."""
    if command is None:
        if at is not None:
            raise click.UsageError("--redis-restart-at is for --redis-restart: add the "
                                   "command, or leave it out")
        return None
    try:
        argv = restart_mod.split(command)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}: give the command as you would type it, e.g. "
                                 f"\"redis-cli -p 26379 SENTINEL FAILOVER mymaster\"",
                                 param_hint="--redis-restart") from None
    try:
        at_s = restart_mod.at_seconds(at or "50%", duration)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--redis-restart-at") from None
    return restart_mod.RedisRestart(argv, at_s)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


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
