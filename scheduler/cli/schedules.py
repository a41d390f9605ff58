"""`sched schedules explain`: did a schedule fire, and if not, why (Client.fires)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from scheduler.cli.inspect import echo_json, printable, schedule_text, when
from scheduler.cli.options import duration_s, history_source, store_options
from scheduler.core.errors import ValidationError
from scheduler.core.ledger import (
    MAX_FIRES_PAGE,
    REASON_WORDS,
    Fire,
    FiresSummary,
    FireState,
    Objective,
)
from scheduler.core.models import MAX_SECONDS


@click.group()
def schedules() -> None:
    """Recurring jobs' timelines: did each occurrence fire, and if not, why."""


@schedules.command("explain")
@click.argument("name_or_job_id")
@click.option("--since", default="1h", show_default=True,
              help="How far back: 90 (seconds), 30s, 5m, 1h, 2d.")
@click.option("--limit", type=click.IntRange(1, MAX_FIRES_PAGE), default=1000,
              show_default=True, help="Most occurrences shown (the oldest of the window).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_options
@click.pass_obj
def explain(obj: dict[str, str], name_or_job_id: str, since: str, limit: int,
            as_json: bool, postgres_dsn: str | None, history_file: str) -> None:
    """One line per fire time of a schedule (a name given to `schedule()`, or a cron job's
    id) over the window: whether it ran and how late, or why not; then the summary. What
    has left Redis is read from the history store (--postgres-dsn, else the history file)."""
    from scheduler import Client

    seconds = duration_s("since", since) or 0.0
    if not 0 < seconds <= MAX_SECONDS:
        raise ValidationError("since", f"{since!r} is not allowed; give a duration from 1ms "
                                       f"to {MAX_SECONDS:,}s, e.g. 30m or 1h")
    with Client(obj["redis_url"], obj["namespace"],
                history=history_source(postgres_dsn, history_file, read_only=True)) as client:
        page = client.fires(name_or_job_id, since=timedelta(seconds=seconds), limit=limit)
        job = client.get_job(page.job_id)
    if as_json:
        echo_json(page)
        return
    click.echo(printable(f"{page.job_id}: {schedule_text(job)}"))
    for fire in page.fires:
        click.echo(printable(line(fire)))
    if not page.fires:
        click.echo("(no fire time in the window)")
    for text in summary_lines(page.summary):
        click.echo(text)
    for text in objective_lines(page.objective) if page.objective else []:
        click.echo(text)
    if page.cursor is not None:
        click.echo(f"(more after {when(page.cursor)}: --limit shows more, or --since less)")


def line(fire: Fire) -> str:
    """One occurrence on one line (at most 100 columns): fire time, state, lag, then the
    outcome or the reason."""
    lag = "" if fire.start_lag_ms is None else f"+{fire.start_lag_ms / 1000:.3f}s"
    if fire.reason is not None:
        why = REASON_WORDS.get(fire.reason, str(fire.reason))
        if fire.yielded_to:
            why = f"overlap: yielded to the {_fire_of(fire.yielded_to)} run"
    else:
        why = fire.outcome or ("waiting, within its objective"
                               if fire.state is FireState.PENDING else "")
    return f"{when(fire.fire_ms)}  {fire.state.value:<8} {lag:>10}  {why}"[:100].rstrip()


def _fire_of(slot_id: str) -> str:
    fire = slot_id.rpartition(":")[2]
    return when(int(fire)) if fire.isdigit() else slot_id


def summary_lines(s: FiresSummary) -> list[str]:
    """The summary for people."""
    def secs(ms: Any) -> str:
        return "-" if ms is None else f"{ms / 1000:.3f}s"

    share = "-" if s.on_time_share is None else f"{s.on_time_share * 100:.1f}%"
    not_started = ", ".join(f"{k} {v}" for k, v in s.not_started.items()) or "none"
    out = [f"due {s.due}, started {s.started} (on time {s.on_time}, late {s.late}); "
           f"not started: {not_started}",
           f"on time (within {s.on_time_within_ms / 1000:g}s): {share}; start lag p50 "
           f"{secs(s.lag_p50_ms)}, p99 {secs(s.lag_p99_ms)}, max {secs(s.lag_max_ms)}"]
    if s.missed_unlisted:
        out.append(f"{s.missed_unlisted} more occurrence(s) dropped by catch-up, counted "
                   f"but not listed")
    if not s.complete and s.through_ms is not None:
        out.append(f"(the summary stops at {when(s.through_ms)}: the window holds more "
                   f"occurrences than one summary reads; --since less)")
    return out


def objective_lines(o: Objective) -> list[str]:
    """The schedule against its objective over the node's window, for people."""
    share = "-" if o.on_time_share is None else f"{o.on_time_share * 100:.1f}%"
    if o.on_time_share is None:
        state = "nothing decided"
    elif o.on_time_share >= o.target:
        state = "met"
    else:  # listed once the node's next look at it, a sweep at most
        state = "behind" + (f" since {when(int(o.behind_since.timestamp() * 1000))}"
                            if o.behind_since else "")
    return [f"objective: {share} on time over the last {o.window_s:g}s (target "
            f"{o.target * 100:g}%): {state}",
            f"  of {o.on_time + o.late + o.catchup} decided: on time {o.on_time}, late "
            f"{o.late}, catchup {o.catchup}"]
