"""Read-only commands: `sched jobs list`, `sched jobs show`, `sched runs`. Each has `--json`."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from scheduler.cli.options import history_source, store_options
from scheduler.core.models import MAX_COUNT


def status_text(slot: Any) -> str:
    """A slot's status, marked when numbers in its hash could not be read (JSON: the slot's
    `unreadable` names them)."""
    return f"{slot.status.value} (unreadable)" if slot.unreadable else str(slot.status.value)


def when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def progress_text(progress: Any) -> str:
    """A slot's last ctx.progress for people: "40% step 4 of 10 (at ...)", "-" for none."""
    if progress is None:
        return "-"
    return f"{progress.line()} (at {when(progress.at_ms)})"


def echo_json(value: Any) -> None:
    click.echo(msgspec.json.encode(value).decode())


def table(rows: list[list[str]] | list[list[str] | str], header: list[str]) -> None:
    """Columns aligned over every row; a row that is a str is a line of its own (the
    heading of the rows after it). Cells come from Redis, where anyone who can write may
    have put a terminal escape (a worker id, a queue name): a character that does not print
    is shown as U+FFFD."""
    rows = [printable(r) if isinstance(r, str) else [printable(str(c)) for c in r]
            for r in rows]
    cells = [r for r in rows if not isinstance(r, str)]
    widths = [max(len(str(r[i])) for r in [header, *cells]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo(row if isinstance(row, str) else
                   "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def printable(text: str) -> str:
    """`text` with each character that does not print (an escape, a newline) shown as
    U+FFFD: what any human output does with text read from Redis or the history store, which
    may hold what was written before the SDK refused it, or by another writer."""
    return text if text.isprintable() else "".join(
        c if c.isprintable() else "\ufffd" for c in text)


@click.group()
def jobs() -> None:
    """Inspect job definitions."""


def schedule_text(job: Any) -> str:
    """One line for people: how the job fires."""
    if job.kind == "cron":
        text = f"cron {job.cron!r} {job.tz}, catchup {job.catchup}"
        if job.catchup == "all":
            text += f" (max {job.catchup_limit})"
        text += f", overlap {job.overlap}"
        if job.start_ms:
            text += f", from {when(job.start_ms)}"
        if job.end_ms:
            text += f", until {when(job.end_ms)}"
        return text
    if job.kind == "delayed":
        return f"delayed {job.delay_s:g}s"
    if job.kind == "at":
        return f"at {when(job.fire_ms)}"
    return "immediate"


@jobs.command("list")
@click.option("--limit", type=click.IntRange(1, MAX_COUNT), default=100, help="Most jobs shown.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def jobs_list(obj: dict[str, str], limit: int, as_json: bool) -> None:
    """List jobs that have a schedule (delayed, at, cron), newest first, with their next fire
    time. Immediate jobs are not listed."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        found = client.list_jobs(limit)
    if as_json:
        echo_json(found)
        return
    table([[j.job_id, j.task, j.queue, schedule_text(j), when(j.next_fire_ms),
            str(j.missed) if j.missed else ""] for j in found],
          ["job", "task", "queue", "schedule", "next fire", "missed"])


@jobs.command("show")
@click.argument("job_id")
@click.option("--slots", "last", type=click.IntRange(0, MAX_COUNT), default=20, show_default=True,
              help="Show the most recent this many slots (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def jobs_show(obj: dict[str, str], job_id: str, last: int, as_json: bool) -> None:
    """Show one job's definition and its most recent slots."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        job = client.get_job(job_id)
        every = client.slots(job_id)
    slots = every[-last:] if last else every
    if as_json:
        echo_json({"job": job, "slots": slots, "slots_total": len(every)})
        return
    policy = job.retry
    for label, value in [
        ("job", job.job_id), ("task", job.task), ("queue", job.queue),
        ("priority", str(job.priority)), ("kind", job.kind),
        ("schedule", schedule_text(job)), ("fire time", when(job.fire_ms)),
        ("next fire", when(job.next_fire_ms)), ("missed", str(job.missed)),
        *([("on time within", f"{job.on_time_within_s:g}s (sched schedules explain)")]
          if job.on_time_within_s else []),
        ("created", when(job.created_ms)),
        ("delivery", job.delivery.value),
        ("timeout", f"{job.timeout_s:g}s" if job.timeout_s else "none"),
        ("retry", f"max {policy.max_attempts} attempts, backoff {policy.base_s:g}s.."
                  f"{policy.max_s:g}s, jitter {policy.jitter:g}"),
        *job.dedupe_text(when),
        *([("concurrency key", job.concurrency_key)] if job.concurrency_key else []),
        ("payload", msgspec.json.encode(job.payload).decode()[:200]),
        *([("deleted", f"{when(job.deleted_ms)} ({job.deleted})")] if job.deleted_ms else []),
    ]:
        click.echo(f"{label + ':':<11} {printable(value)}")  # a long label keeps a space too
    click.echo("")
    if len(slots) < len(every):
        click.echo(f"the last {len(slots)} of {len(every):,} slots (--slots 0 for all):")
    table([[s.slot_id, status_text(s), str(s.attempt), when(s.fire_ms),
            progress_text(s.progress) if s.progress else ""] for s in slots],
          ["slot", "status", "attempts", "fire time", "progress"])


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_options
@click.pass_obj
def runs(obj: dict[str, str], job_id: str, as_json: bool, postgres_dsn: str | None,
         history_file: str) -> None:
    """Show a job's slots and every attempt of each (from the history store for slots that
    have left Redis)."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"],
                history=history_source(postgres_dsn, history_file, read_only=True)) as client:
        slots = client.runs(job_id)
    if as_json:
        echo_json(slots)
        return
    for line in runs_lines(slots):
        click.echo(line)


RUNS_WIDTH = 100  # `sched runs` fits a terminal this wide: long text wraps under its attempt
_INDENT = "      "  # an attempt's error, log lines and progress sit under its outcome


def _wrapped(text: str, indent: str = _INDENT) -> list[str]:
    return textwrap.wrap(printable(text), RUNS_WIDTH, initial_indent=indent,
                         subsequent_indent=indent + "  ", break_on_hyphens=False) or [indent]


def _fit(line: str) -> str:
    """One line cut to RUNS_WIDTH (a worker id can be as long as its host name)."""
    return line if len(line) <= RUNS_WIDTH else line[:RUNS_WIDTH - 1] + "\u2026"


def outcome_text(attempt: Any) -> str:
    """How an attempt ended, for people."""
    return "-" if attempt.outcome is None else str(attempt.outcome.value)


def runs_lines(slots: list[Any]) -> list[str]:
    """`sched runs` for people: each slot on a line (status, priority), then each attempt
    (how it ended, when it started, how long it took, on which worker) with its error and
    its log lines wrapped under it, the latest progress and the result. Every line fits
    RUNS_WIDTH columns; the whole text is in --json."""
    numbers = [f"#{a.number}" for s in slots for a in s.attempts] + ["#1"]
    outcomes = [outcome_text(a) for s in slots for a in s.attempts] + ["running"]
    took_texts = [f"{a.finished_ms - a.started_ms}ms" if a.finished_ms and a.started_ms
                  else "-" for s in slots for a in s.attempts] + ["-"]
    widths = (max(map(len, numbers)), max(map(len, outcomes)), max(map(len, took_texts)))

    def attempt_line(number: str, outcome: str, started: str, took: str, worker: str) -> str:
        return _fit(f"  {number:<{widths[0]}}  {outcome:<{widths[1]}}  {started:<24}  "
                    f"took {took:>{widths[2]}}  on {printable(worker)}".rstrip())

    lines: list[str] = []
    took = iter(took_texts)
    for s in slots:
        if lines:
            lines.append("")
        lines.append(_fit(f"{printable(s.slot_id)}  {status_text(s)}  priority {s.priority}"))
        for a in s.attempts:
            lines.append(attempt_line(f"#{a.number}", outcome_text(a), when(a.started_ms),
                                      next(took), a.worker or "-"))
            if a.error:
                lines += _wrapped(a.error)
            for logged in a.log or ():
                lines += _wrapped(f"| {logged}")
        if s.status.value == "running":
            lines.append(attempt_line(f"#{s.attempt}", "running", "", "-", s.worker or "-"))
        if s.progress is not None:
            lines += _wrapped(f"progress {progress_text(s.progress)}, attempt "
                              f"#{s.progress.attempt}", "  ")
        if s.result is not None:
            lines += _wrapped("result " + msgspec.json.encode(s.result).decode()[:400], "  ")
    return lines
