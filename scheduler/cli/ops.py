"""Operator commands: `sched cancel` and `sched dlq list|show|replay|purge`."""

from __future__ import annotations

from datetime import datetime

import click

from scheduler.cli.inspect import echo_json, jobs, printable, table, when
from scheduler.core.models import MAX_COUNT
from scheduler.core.timing import ms_of_utc


@click.command()
@click.argument("ids", nargs=-1, required=True)
@click.option("--reason", default="cancelled by operator", help="Recorded on each slot.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def cancel(obj: dict[str, str], ids: tuple[str, ...], reason: str, as_json: bool) -> None:
    """Cancel slots (SLOT_ID) or every slot of a job (JOB_ID).

    A scheduled or queued slot ends `cancelled` at once; a running one is stopped by its
    worker at the next heartbeat (about a third of the lease)."""
    from scheduler import Client, ValidationError

    with Client(obj["redis_url"], obj["namespace"]) as client:
        for job_id in (i for i in ids if ":" not in i):
            job = client.get_job(job_id)
            if job.cron and not job.deleted_ms:  # its slots would go, the series would not
                raise ValidationError("JOB_ID", f"{job_id} is a recurring job: cancelling its "
                                      f"slots would not stop it; `sched jobs delete {job_id}` "
                                      f"ends the series (a running slot finishes); nothing "
                                      f"was cancelled")
        result = client.cancel(ids, reason)
    if as_json:
        echo_json(result)
        return
    for slot, what in result.items():
        click.echo(f"{slot}  {what}")
    if any(what == "not found" for what in result.values()):
        raise click.exceptions.Exit(1)


@jobs.command("delete")
@click.argument("job_id")
@click.option("--reason", default="deleted by operator", help="Recorded on the job.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def jobs_delete(obj: dict[str, str], job_id: str, reason: str, as_json: bool) -> None:
    """End a job's series: no occurrence fires after this, slots that have not started are
    cancelled, a running one finishes. The definition stays, marked deleted."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        done = client.delete_job(job_id, reason)
    if as_json:
        echo_json(done)
    elif done.before:
        click.echo(f"{job_id} was deleted before; nothing changed")
    else:
        click.echo(f"{job_id} deleted: {done.cancelled} slot(s) cancelled, {done.running} "
                   f"running slot(s) left to finish")


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@jobs.command("next")
@click.argument("job_id")
@click.option("-n", "count", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="How many fire times.")
@click.option("--json", "as_json", is_flag=True,
              help='Print JSON: a list of {"fire_time": ISO 8601 UTC, "fire_ms": epoch ms}.')
@click.pass_obj
def jobs_next(obj: dict[str, str], job_id: str, count: int, as_json: bool) -> None:
    """The job's next fire times (UTC, ISO 8601), from now."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        fires = client.next_fires(job_id, count)
    if as_json:
        echo_json([{"fire_time": _iso(f), "fire_ms": ms_of_utc(f)} for f in fires])
    elif not fires:
        click.echo(f"{job_id} fires no more (it ran, ended or was deleted)")
    for fire in [] if as_json else fires:
        click.echo(_iso(fire))


@jobs.command("trigger")
@click.argument("job_id")
@click.pass_obj
def jobs_trigger(obj: dict[str, str], job_id: str) -> None:
    """Run a job once more now, beside its schedule; prints the new slot's id."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        click.echo(client.trigger(job_id))


@click.group()
def dlq() -> None:
    """The dead-letter queue: slots whose attempts ran out."""


@dlq.command("list")
@click.option("--limit", type=click.IntRange(1, MAX_COUNT), default=50)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def dlq_list(obj: dict[str, str], limit: int, as_json: bool) -> None:
    """The most recent dead slots, newest first."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        dead = client.dead_letters(limit)
    if as_json:
        echo_json([{"slot": d.slot, "died_ms": d.died_ms, "error": d.error} for d in dead])
        return
    table([[d.slot.slot_id, d.slot.task, str(d.slot.attempt), when(d.died_ms),
            (d.error or "")[:80]] for d in dead], ["slot", "task", "attempts", "died", "error"])


@dlq.command("show")
@click.argument("slot_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def dlq_show(obj: dict[str, str], slot_id: str, as_json: bool) -> None:
    """One dead slot with its job and every attempt."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        slot = client.get_slot(slot_id)
        job = client.get_job(slot.job_id)
    if as_json:
        echo_json({"slot": slot, "job": job})
        return
    click.echo(printable(f"slot {slot.slot_id}: {slot.status.value}, task {job.task}, "
                         f"queue {job.queue}"))
    table([[f"#{a.number}", a.outcome.value if a.outcome else "-", a.worker or "-",
            when(a.finished_ms), a.error or ""] for a in slot.attempts],
          ["attempt", "outcome", "worker", "finished", "error"])


def _targets(slot_ids: tuple[str, ...], all_: bool) -> list[str] | None:
    if bool(slot_ids) == all_:
        raise click.UsageError("give SLOT_IDs or --all (not both)")
    return None if all_ else list(slot_ids)


def _all_there(done: int, slot_ids: tuple[str, ...], what: str) -> None:
    """Named slots that were not in the dead-letter queue: say so, exit 1."""
    if slot_ids and done < len(set(slot_ids)):
        click.echo(f"error: {len(set(slot_ids)) - done} of {len(set(slot_ids))} slot(s) were "
                   f"not in the dead-letter queue, so not {what} (see `sched dlq list`)",
                   err=True)
        raise click.exceptions.Exit(1)


@dlq.command("replay")
@click.argument("slot_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every dead slot.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def dlq_replay(obj: dict[str, str], slot_ids: tuple[str, ...], all_: bool, as_json: bool) -> None:
    """Run dead slots again: a new attempt of the same slot, with a fresh retry budget."""
    from scheduler import Client

    with Client(obj["redis_url"], obj["namespace"]) as client:
        count = client.replay(_targets(slot_ids, all_))
    echo_json({"replayed": count}) if as_json else click.echo(f"replayed {count} slot(s)")
    _all_there(count, slot_ids, "replayed")


@dlq.command("purge")
@click.argument("slot_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every dead slot (asks first).")
@click.option("--yes", is_flag=True, help="Do not ask before --all.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def dlq_purge(obj: dict[str, str], slot_ids: tuple[str, ...], all_: bool, yes: bool,
              as_json: bool) -> None:
    """Remove slots from the dead-letter queue; they stay `dead` with their history."""
    from scheduler import Client

    targets = _targets(slot_ids, all_)
    with Client(obj["redis_url"], obj["namespace"]) as client:
        if targets is None and not yes:
            size = client.status().dead_letter_size
            if not click.confirm(f"purge all {size:,} dead slot(s) of namespace "
                                 f"{obj['namespace']!r}?", default=False, err=True):
                click.echo("error: nothing purged (pass --yes to purge without asking)",
                           err=True)
                raise click.exceptions.Exit(1)
        count = client.purge(targets)
    echo_json({"purged": count}) if as_json else click.echo(f"purged {count} slot(s)")
    _all_there(count, slot_ids, "purged")
