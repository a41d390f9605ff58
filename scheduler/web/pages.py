"""What each page shows, read through the SDK (AsyncClient): one function per page that returns
the template and its context. No I/O of its own and no HTML: templates/ renders it.

Pages read Redis when they are viewed (the status pages one `status()` each, as `sched
status` does); the chart sampler (series.py) feeds the charts alone. Every list is bounded:
a page of a paged SDK list (browse.py) or a capped read. A query parameter a page does not
know is ignored; a value it does not allow is a ValidationError, which the console answers
with a 400 page naming the values it allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import msgspec

from scheduler.core.canary import RUNS_KEPT, VerifyRun
from scheduler.core.cron import CronSpec
from scheduler.core.errors import JobNotFound, StoreUnavailable, ValidationError
from scheduler.core.keys import check_job_id, split_slot_id
from scheduler.core.ledger import REASON_WORDS, Fire, FireState, Reason
from scheduler.core.models import Job, Slot
from scheduler.core.states import JobKind, SlotStatus
from scheduler.core.timing import ms_of_utc, utc_of_ms
from scheduler.observe.records import group_supervisors

Page = tuple[str, dict[str, Any]]
Params = Mapping[str, str]
JOB_STATES = ("active", "ended", "deleted")
JOB_KINDS = tuple(k.value for k in JobKind)
SLOT_LISTS = ("queued", "scheduled", "retrying", "running")
MAX_TEXT = 200  # the longest free-text filter (a task name is at most 200 characters)
LISTED_JOBS = 500  # jobs and schedules pages: the newest this many
NEXT_FIRES = 10
TIMELINE = 60  # a recurring job's page: its latest this many occurrences
START_WORKER = "start one with `sched worker --app MODULE:REGISTRY`"


def when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def link(href: str, text: Any) -> dict[str, str]:
    return {"href": href, "text": str(text)}


def _row(key: str, *cells: Any) -> dict[str, Any]:
    return {"key": key, "cells": list(cells)}


def _job_state(job: Job) -> str:
    return "deleted" if job.deleted_ms else ("active" if job.next_fire_ms else "ended")


# --- query parameters -----------------------------------------------------------------------

def choice(params: Params, name: str, allowed: tuple[str, ...]) -> str | None:
    """A parameter with a closed set of values; empty or absent is None (any)."""
    value = params.get(name) or None
    if value is not None and value not in allowed:
        raise ValidationError(name, f"{value[:MAX_TEXT]!r} is not allowed; use one of "
                                    f"{', '.join(allowed)} (or leave it empty for any)")
    return value


def text(params: Params, name: str) -> str | None:
    value = params.get(name) or None
    if value is not None and len(value) > MAX_TEXT:
        raise ValidationError(name, f"at most {MAX_TEXT} characters")
    return value


def _after(params: Params) -> str | None:
    value = params.get("after") or None
    if value is not None and len(value) > 100:  # browse.py's cursors are shorter
        raise ValidationError("after", "not a page cursor: follow the page's own `next` link")
    return value


def _pager(path: str, params: Params, cursor: str | None) -> str | None:
    """The link to the next page: this page's own filters, and the cursor."""
    if cursor is None:
        return None
    kept = {k: v for k, v in params.items() if k != "after" and v}
    return f"{path}?{urlencode({**kept, 'after': cursor})}"


# --- the namespace at a glance --------------------------------------------------------------

def _rate(per_s: float) -> str:
    return f"{per_s:,.1f}"


def queue_rows(status: Any, infos: list[Any]) -> list[dict[str, Any]]:
    """One row per queue: each count links to its list."""
    running = {q.queue: q.inflight for q in status.queues}
    rows = []
    for q in infos:
        base = f"/queues/{q.queue}"
        limit = "-"
        if q.limit is not None:
            limit = q.limit.text() + ("" if q.permits_held is None
                                      else f" ({q.permits_held:,} held)")
        runs = f"{base}/running"
        rows.append(_row(q.queue, link(base, q.queue), link(base, f"{q.depth:,}"),
                         link(runs, f"{q.pending:,}"), link(runs, f"{running.get(q.queue, 0):,}"),
                         f"{q.oldest_ready_age_s:.1f}s", _rate(q.succeeded_per_s),
                         _rate(q.failed_per_s), limit,
                         link(base, f"{q.keys_waiting:,}") if q.keys_waiting else "-"))
    return rows


QUEUE_HEADER = ["queue", "depth", "pending", "running", "lag", "ok/s", "failed/s", "limit",
                "keys"]
NO_QUEUE = ("no queue yet: a queue appears with its first job (`client.submit(task, "
            "queue=...)`) or its first limit (`sched queues limit`)")


def health(status: Any, infos: list[Any]) -> dict[str, Any]:
    """The overview's panel (and its htmx refresh): the verdict as `sched status` gives it,
    the counts, each a link to its list, and the queue table."""
    return {"title": "Overview", "status": status, "problems": status.problems(max_lag_s=60.0),
            "warnings": status.warnings(), "queue_header": QUEUE_HEADER,
            "queue_rows": queue_rows(status, infos), "queue_empty": NO_QUEUE,
            "running": sum(q.inflight for q in status.queues)}


def queues(status: Any, infos: list[Any]) -> Page:
    return "table.html", {
        "title": "Queues", "rows": queue_rows(status, infos), "header": QUEUE_HEADER,
        "empty": NO_QUEUE,
        "note": "depth: ready, not read by a worker yet; pending: read and not finished; "
                "running: in flight on live workers (their heartbeats); lag: how long the "
                "oldest ready job has waited; rates over each worker's last heartbeat "
                "interval; limit: the queue's limits (`sched queues limit`) and the "
                "permits its runs hold; keys: concurrency keys with a queued slot (their "
                "slots count in depth; the queue's page lists the busiest)."}


def _worker(w: Any) -> dict[str, Any]:
    return _row(w.worker_id, w.worker_id,
                ("waiting for its namespace" if w.waiting else "alive") if w.alive else "gone",
                f"{w.heartbeat_age_s:.1f}s ago", w.host, w.pid,
                link("/running", f"{w.inflight}/{w.concurrency}"),
                _rate(w.succeeded_per_s), f"{w.succeeded:,}", f"{w.failed:,}",
                ",".join(w.queues))


def workers(status: Any) -> Page:
    """Workers started on their own first; then each supervisor (`sched worker --processes
    N`) as a heading row, its children under it, as `sched workers` prints them."""
    rows = [_worker(w) for w in status.workers if w.supervisor is None]
    for s in group_supervisors(status.workers):
        rows.append({"key": s.supervisor_id, "cells": [], "heading": s.summary()})
        rows += [{**_worker(w), "child": True} for w in s.children]
    return "table.html", {
        "title": "Workers", "rows": rows, "header": [
            "worker", "state", "heartbeat", "host", "pid", "in flight", "ok/s", "succeeded",
            "failed", "queues"],
        "empty": f"no worker has reported to this namespace: {START_WORKER} (it shows here "
                 f"within its first heartbeat)",
        "note": f"{status.workers_alive} alive of {status.workers_known} known."}


SHOWN_WORKERS = 5  # worker ids a task's row names; past that, how many more


def _some(workers: list[str]) -> str:
    if not workers:
        return "none"
    more = len(workers) - SHOWN_WORKERS
    return ", ".join(workers[:SHOWN_WORKERS]) + (f" and {more} more" if more > 0 else "")


async def tasks(client: Any) -> Page:
    """The task catalog, as `sched tasks` lists it: each task's defaults, the live workers
    serving it (and how many versions of its defaults they run) and its runs per second."""
    found = await client.tasks()
    now = await client.now_ms()

    def opt(value: object) -> str:
        return "-" if value is None else str(value)

    rows = [_row(t.task, link(f"/jobs?{urlencode({'task': t.task})}", t.task),
                 opt(t.queue), opt(t.timeout), opt(t.retry and t.retry.max_attempts),
                 opt(t.priority), opt(t.delivery), opt(t.payload_type), t.pool,
                 f"{max(0, now - t.seen_ms) / 1000:.0f}s ago",
                 _some(t.workers), t.versions, _rate(t.succeeded_per_s),
                 _rate(t.failed_per_s)) for t in found]
    mixed = [t.task for t in found if t.versions > 1]
    note = ("A submit by name takes a task's defaults for the options it leaves out; while "
            "workers of two versions run, the latest worker start's.")
    if mixed:
        note += f" Workers run more than one version of: {', '.join(mixed)}."
    return "table.html", {
        "title": "Tasks", "rows": rows, "header": [
            "task", "queue", "timeout", "attempts", "priority", "delivery", "payload", "pool",
            "last start", "workers", "versions", "ok/s", "failed/s"],
        "empty": f"no worker has started with a task in this namespace: {START_WORKER} (its "
                 f"tasks show here when it starts)",
        "note": note}


# --- lists of slots -------------------------------------------------------------------------

SLOT_LIST_EMPTY = {
    "queued": "nothing is waiting in this queue: a slot waits here from its submit (or its "
              "time) until a worker reads it",
    "scheduled": "no slot is waiting for its time: delayed and `at` jobs, the occurrences "
                 "of a cron job (made a few seconds ahead by `sched scheduler`) and retries "
                 "wait here",
    "retrying": "no slot is waiting to be retried: a failed attempt with attempts left waits "
                "here out its backoff",
    "running": f"nothing is running now: a run shows here while a worker holds it ({START_WORKER})",
}


def _status(s: Slot) -> str:
    """A slot's status, marked when numbers in its hash could not be read (its times then
    show as "-": the slot page names the fields)."""
    return f"{s.status.value} (unreadable)" if s.unreadable else s.status.value


def _slot_cells(s: Slot, what: str, now_ms: int) -> list[Any]:
    cells: list[Any] = [link(f"/slots/{s.slot_id}", s.slot_id), s.task,
                        link(f"/queues/{s.queue}", s.queue), s.priority]
    if what == "running":
        current = s.attempts[-1] if s.attempts else None
        lease = "-"
        if s.lease_until_ms:
            left = (s.lease_until_ms - now_ms) / 1000
            lease = f"{left:.1f}s left" if left >= 0 else f"expired {-left:.1f}s ago"
        return [*cells, _status(s), s.worker or "-",
                when(current.claimed_ms if current else None), lease]
    if what == "queued":
        return [*cells, _status(s), when(s.available_ms), s.attempt]
    return [*cells, "(unreadable)" if s.unreadable else when(s.available_ms), s.attempt,
            (s.attempts[-1].error or "")[:120] if s.attempts else ""]


def _slot_header(what: str) -> list[str]:
    head = ["slot", "task", "queue", "priority"]
    if what == "running":
        return [*head, "status", "worker", "started", "lease"]
    if what == "queued":
        return [*head, "status", "ready since", "attempts"]
    return [*head, "due", "attempts", "last error"]


async def slot_list(client: Any, what: str, queue: str | None, params: Params) -> Page:
    """One page of a list of slots: a queue's (queued, scheduled, retrying, running), or, with
    no queue, the namespace's (all but queued, which is per queue)."""
    after = _after(params)
    if what == "queued":
        assert queue is not None
        page = await client.queued(queue, after=after)
    elif what == "running":
        page = await client.running(queue, after=after)
    else:
        page = await client.scheduled(queue, retrying=what == "retrying", after=after)
    now = await client.now_ms()
    path = f"/queues/{queue}/{what}" if queue else f"/{what}"
    if queue:
        tabs = [(f"/queues/{queue}/{w}", w, w == what) for w in SLOT_LISTS]
    else:
        tabs = [(f"/{w}", w, w == what) for w in SLOT_LISTS if w != "queued"]
    title = f"{what.capitalize()}: queue {queue}" if queue else what.capitalize()
    tables, keyed = await _key_tables(client, queue) if queue and what == "queued" else ([], 0)
    empty = SLOT_LIST_EMPTY[what] if after is None else "no more"
    if keyed and not page.slots:
        empty = (f"no slot waits in this queue's streams: its {keyed:,} slot(s) of concurrency "
                 f"keys wait in their keys' queues (below)")
    return "table.html", {"tables": tables,
        "title": title, "tabs": tabs, "header": _slot_header(what),
        "rows": [_row(s.slot_id, *_slot_cells(s, what, now)) for s in page.slots],
        "select": "ids", "actions": [("/actions/cancel", "cancel")],
        "empty": empty, "pager": _pager(path, params, page.next),
        "note": _LIST_NOTES[what]}


async def _key_tables(client: Any, queue: str
                      ) -> tuple[list[tuple[str, str, list[str], list[dict[str, Any]]]], int]:
    """A queue page's concurrency keys, when it has a per-key limit or keys: the limit and
    its busiest keys; and how many of its slots wait in their keys' queues."""
    found = await client.queue_keys(queue)
    limited = found.per_key_concurrency is not None or found.per_key_rate is not None
    if not limited and not found.keys and not found.busiest:
        return [], 0
    title = (f"Concurrency keys: {found.limit_text()}; {found.keys:,} key(s) with {'at least ' if found.truncated else ''}"
             f"{found.waiting:,} slot(s) waiting; the busiest")
    return [(title, "keys", ["key", "waiting", "running", "weight"],
             [_row(k.key, k.key, f"{k.waiting:,}", f"{k.running:,}", f"{k.weight:,}")
              for k in found.busiest])], found.waiting


_LIST_NOTES = {
    "queued": "Oldest first, over the queue's priorities and shards; 50 a page. A slot of a "
              "concurrency key waits in its key's queue and is not listed: the keys' table "
              "counts them.",
    "scheduled": "Soonest first; 50 a page (with a queue, a page looks at 200 entries per "
                 "shard and may show fewer).",
    "retrying": "Slots that ran before and wait for their next attempt, soonest first; a page "
                "looks at 200 entries per shard and may show fewer than 50.",
    "running": "Slots a worker holds now, in order of dispatch; 50 a page.",
}


# --- jobs, schedules, slots -----------------------------------------------------------------

async def jobs(client: Any, params: Params) -> Page:
    kind = choice(params, "kind", JOB_KINDS)
    task, state = text(params, "task"), choice(params, "state", JOB_STATES)
    if kind == JobKind.IMMEDIATE:  # not indexed: the recent submissions have them
        return await recent(client, params, JobKind.IMMEDIATE)
    found = [j for j in await client.list_jobs(LISTED_JOBS)
             if (not kind or j.kind == kind) and (not task or task in j.task)
             and (not state or _job_state(j) == state)]
    rows = [_row(j.job_id, link(f"/jobs/{j.job_id}", j.job_id), j.task, j.queue, j.kind,
                 j.cron or "", when(j.next_fire_ms), _job_state(j)) for j in found]
    return "table.html", {
        "title": "Jobs", "rows": rows, "select": "jobs",
        "header": ["job", "task", "queue", "kind", "cron", "next fire", "state"],
        "filters": [("kind", kind, [k for k in JOB_KINDS if k != JobKind.IMMEDIATE]),
                    ("task", task, None), ("state", state, list(JOB_STATES))],
        "actions": [("/actions/trigger", "trigger"), ("/actions/delete", "delete"),
                    ("/actions/cancel", "cancel")],
        "empty": "no job with a schedule matches: jobs submitted with `delay=`, `at=` or "
                 "`cron=` show here (immediate ones under Recent)",
        "links": [("/recent", "Recently submitted jobs, immediate ones included")],
        "note": f"Jobs with a schedule (delayed, at, cron), the newest {LISTED_JOBS}. An "
                f"immediate job is not indexed: it shows under Recent, in its queue's lists "
                f"while it waits or runs, and in History."}


async def recent(client: Any, params: Params, only: JobKind | None = None) -> Page:
    """Recently submitted jobs; `only`: of that kind (/jobs?kind=immediate), so a page may
    show fewer than 50."""
    after = _after(params)
    page = await client.recent_jobs(after=after)
    rows = [_row(s.job_id, link(f"/jobs/{s.job_id}", s.job_id), s.task or "-", s.kind.value,
                 link(f"/queues/{s.queue}", s.queue) if s.queue else "-",
                 when(s.submitted_ms),
                 link(f"/slots/{s.slot_id}", s.status.value if s.status else "(gone)")
                 if s.slot_id else "-") for s in page.jobs if only is None or s.kind == only]
    return "table.html", {
        "title": f"Recently submitted {only.value} jobs" if only else "Recently submitted",
        "rows": rows, "header": ["job", "task", "kind", "queue", "submitted", "slot"],
        "empty": ("nothing submitted recently: `client.submit(task, payload)` adds a job"
                  if after is None else "no more in the events Redis keeps"),
        "pager": _pager("/jobs" if only else "/recent", params, page.next),
        "note": "Every kind, newest first, from the events each shard keeps (the most recent "
                "`events_maxlen`); a page looks at the last 200 events per shard and may show "
                "fewer than 50. Older jobs are in History."}


async def schedules(client: Any, params: Params) -> Page:
    crons = [j for j in await client.list_jobs(LISTED_JOBS) if j.kind == JobKind.CRON]
    latest = await client.latest_slots([j.job_id for j in crons], 10)
    now = await client.now_ms()
    rows = []
    for j in crons:
        fired = [s for s in latest.get(j.job_id, []) if s.fire_ms <= now]
        rows.append(_row(j.job_id, link(f"/jobs/{j.job_id}", j.job_id), j.task, j.cron,
                         j.tz or "UTC", when(j.next_fire_ms),
                         when(fired[-1].fire_ms) if fired else "-",
                         fired[-1].status.value if fired else "-", _job_state(j)))
    return "table.html", {
        "title": "Schedules", "rows": rows, "select": "jobs",
        "header": ["job", "task", "cron", "tz", "next fire", "last fire", "last status",
                   "state"],
        "actions": [("/actions/trigger", "trigger"), ("/actions/delete", "delete")],
        "empty": "no cron job: `client.schedule(name, task, payload, cron=...)` makes one, "
                 "and a `sched scheduler` runs it"}


async def job(client: Any, job_id: str) -> Page:
    j = await client.get_job(job_id)
    slots = await client.slots(job_id, 50)
    made = {s.fire_ms for s in slots}
    # Occurrences already made into slots (a few seconds ahead) are listed with the slots.
    asked = NEXT_FIRES + len(made)
    coming = ([ms_of_utc(f) for f in await client.next_fires(job_id, asked)]
              if j.cron and not j.deleted_ms else [])
    fires = [f for f in coming if f not in made][:NEXT_FIRES]
    fields: list[tuple[str, Any]] = [
        ("task", j.task), ("queue", link(f"/queues/{j.queue}", j.queue)),
        ("priority", j.priority), ("kind", j.kind.value),
        ("cron", f"{j.cron} ({j.tz})" if j.cron else "-"), ("state", _job_state(j)),
        ("created", when(j.created_ms)), ("delivery", j.delivery.value),
        ("timeout", f"{j.timeout_s:g}s" if j.timeout_s else "none"),
        ("retry", f"max {j.retry.max_attempts} attempts, backoff {j.retry.base_s:g}s.."
                  f"{j.retry.max_s:g}s"),
        *(j.dedupe_text(when) if j.dedupe_key else []),
        *([("concurrency key", j.concurrency_key)] if j.concurrency_key else []),
        ("payload", msgspec.json.encode(j.payload).decode()[:4000]),
        *([("unreadable", j.unreadable)] if j.unreadable else [])]
    if j.deleted_ms:
        fields.append(("deleted", f"{when(j.deleted_ms)} ({j.deleted})"))
    elif j.cron and len(coming) < asked:  # the series runs out within the listing
        fields.append(("series ends", f"at its end_at, {when(j.end_ms)}" if j.end_ms else
                       "no further fire before the end of year 9999"))
    actions: list[tuple[str, str, str, list[str], str | None]] = [
        ("/actions/trigger", "trigger now", "jobs", [job_id], None)]
    if j.cron and not j.deleted_ms:
        actions.append(("/actions/delete", "delete schedule", "jobs", [job_id],
                        "End this series? Waiting slots are cancelled."))
    waiting = [s.slot_id for s in slots if s.status in (SlotStatus.SCHEDULED, SlotStatus.QUEUED)]
    if waiting:
        actions.append(("/actions/cancel", "cancel waiting slots", "ids", waiting, None))
    tables = [("Slots (the last 50)", ["slot", "status", "attempts", "fire time"],
               [[link(f"/slots/{s.slot_id}", s.slot_id), _status(s), s.attempt,
                 when(s.fire_ms)] for s in reversed(slots)])]
    if j.cron:
        tables.insert(0, ("Next fire times (no slot yet)", ["fire time"],
                          [[when(f)] for f in fires]))
        try:
            field, timeline, marks = await _timeline(client, j)
            fields.append(field)
            tables.insert(0, timeline)
        except ValidationError as exc:  # a stored cron or zone this version cannot read
            fields.append(("on time", f"- (no timeline: {exc})"))
            marks = []
    else:
        marks = []
    return "detail.html", {"title": f"Job {job_id}", "fields": fields, "actions": actions,
                           "tables": tables, "marks": marks, "mark_legend": MARK_LEGEND}


# A timeline mark's class (console.css colours it) and its legend, in the order shown.
MARK_LEGEND = [("ran", "ran on time"), ("late", "ran late"), ("failed", "ran, did not succeed"),
               ("running", "running"), ("retrying", "waiting to retry"),
               ("pending", "pending"), ("skipped", "skipped (overlap)"),
               ("not_run", "not run")]


def _mark(f: Fire, on_time_ms: int) -> dict[str, Any]:
    """One occurrence as a timeline mark: its class, its title (shown on hover: the fire
    time, state, start lag and outcome or reason in words), and its slot's page."""
    if f.state is FireState.RAN:
        kind = ("failed" if f.outcome != "succeeded" else
                "late" if (f.start_lag_ms or 0) > on_time_ms else "ran")
    elif f.reason is Reason.OVERLAP:
        kind = "skipped"
    else:
        kind = f.state.value
    lag = "" if f.start_lag_ms is None else f", start lag {f.start_lag_ms / 1000:.3f}s"
    why = REASON_WORDS.get(f.reason, str(f.reason)) if f.reason else (f.outcome or "")
    title = f"{when(f.fire_ms)}: {f.state.value}{lag}" + (f", {why}" if why else "")
    return {"kind": kind, "title": title,
            "href": f"/slots/{f.slot_id}" if f.slot_id else None}


async def _timeline(client: Any, j: Job) -> tuple[tuple[str, str], tuple[str, list[str],
                                                                       list[list[Any]]],
                                                  list[dict[str, Any]]]:
    """The job's latest TIMELINE occurrences (Client.fires), newest first: whether each ran
    and how late, or why not; their on-time line; and their marks, oldest first."""
    now = await client.now_ms()
    back = [t for _, t in zip(range(TIMELINE), CronSpec(j.cron or "", j.tz or "UTC").before(
        now + 1), strict=False)]
    since = utc_of_ms(min(back) if back else now)
    page = await client.fires(j.job_id, since=since, limit=TIMELINE)
    s = page.summary

    def secs(ms: int | None) -> str:
        return "-" if ms is None else f"{ms / 1000:.3f}s"

    share = "-" if s.on_time_share is None else f"{s.on_time_share * 100:.1f}%"
    line = (f"{share} of {s.due} started within {s.on_time_within_ms / 1000:g}s ({s.late} "
            f"late); start lag p50 {secs(s.lag_p50_ms)}, p99 {secs(s.lag_p99_ms)}, max "
            f"{secs(s.lag_max_ms)}")
    rows = [[when(f.fire_ms),
             link(f"/slots/{f.slot_id}", f.state.value) if f.slot_id else f.state.value,
             secs(f.start_lag_ms) if f.start_lag_ms is not None else "-",
             REASON_WORDS.get(f.reason, str(f.reason)) if f.reason else (f.outcome or "")]
            for f in reversed(page.fires)]
    return (("on time", line),
            (f"Did it fire? (the last {len(rows)} occurrences)",
             ["fire time", "state", "start lag", "outcome or why not"], rows),
            [_mark(f, s.on_time_within_ms) for f in page.fires])


async def slot(client: Any, slot_id: str) -> Page:
    s: Slot = await client.get_slot(slot_id)
    try:
        payload = msgspec.json.encode((await client.get_job(s.job_id)).payload).decode()
    except (JobNotFound, ValidationError):  # the job hash left with retention: the slot shows
        payload = "(the job's definition is no longer in Redis)"
    fields = [("job", link(f"/jobs/{s.job_id}", s.job_id)), ("status", _status(s)),
              *([("unreadable", s.unreadable)] if s.unreadable else []),
              ("task", s.task), ("queue", link(f"/queues/{s.queue}", s.queue)),
              ("priority", s.priority),
              *([("concurrency key", s.concurrency_key)] if s.concurrency_key else []),
              ("fire time", when(s.fire_ms)), ("attempts", s.attempt), ("payload", payload[:4000]),
              ("result", "-" if s.result is None else msgspec.json.encode(s.result).decode()[:4000])]
    if s.status is SlotStatus.RUNNING:
        fields += [("worker", s.worker or "-"), ("lease until", when(s.lease_until_ms))]
    if s.progress is not None:
        fields.append(("progress", f"{s.progress.line()} (attempt {s.progress.attempt}, "
                                   f"reported {when(s.progress.at_ms)})"))
    actions: list[tuple[str, str, str, list[str], str | None]] = []
    if s.status in (SlotStatus.SCHEDULED, SlotStatus.QUEUED, SlotStatus.RUNNING):
        actions.append(("/actions/cancel", "cancel", "ids", [slot_id], None))
    if s.status == SlotStatus.DEAD:
        actions += [("/actions/replay", "replay", "slots", [slot_id], None),
                    ("/actions/purge", "purge", "slots", [slot_id], "Purge it from the DLQ?")]
    return "detail.html", {
        # A running slot's fields refresh themselves (its lease, its progress) until it ends.
        "live": f"/slots/{slot_id}" if s.status is SlotStatus.RUNNING else None,
        "title": f"Slot {slot_id}", "fields": fields, "actions": actions, "tables": [
            ("Attempts", ["#", "worker", "claimed", "started", "finished", "outcome", "error",
                          "log"],
             [[a.number, a.worker or "-", when(a.claimed_ms), when(a.started_ms),
               when(a.finished_ms), a.outcome.value if a.outcome else "-", a.error or "",
               "\n".join(a.log or ())] for a in s.attempts])],
        "note": "The error is its first line and where it was raised; the worker logs the "
                "whole stack (logger scheduler.handler)."}


async def find(client: Any, params: Params) -> str:
    """The page of the job or slot an id names (the nav's search box); JobNotFound or
    SlotNotFound when Redis has neither, ValidationError when it names neither."""
    given = (params.get("id") or "").strip()
    if not given:
        raise ValidationError("id", "give a job id, or a slot id (JOB_ID:FIRE_MS)")
    if len(given) > MAX_TEXT:
        raise ValidationError("id", f"at most {MAX_TEXT} characters")
    try:
        if ":" in given:
            split_slot_id(given)
        else:
            check_job_id(given)
    except ValidationError:
        raise ValidationError("id", f"{given!r} is neither a job id nor a slot id "
                                    f"(JOB_ID:FIRE_MS)") from None
    if ":" in given:
        await client.get_slot(given)
        return f"/slots/{given}"
    await client.get_job(given)
    return f"/jobs/{given}"


# --- dead letters, history ------------------------------------------------------------------

async def dead_letters(client: Any, params: Params) -> Page:
    rows = [_row(d.slot.slot_id, link(f"/slots/{d.slot.slot_id}", d.slot.slot_id),
                 d.slot.task, link(f"/queues/{d.slot.queue}", d.slot.queue), when(d.died_ms),
                 d.slot.attempt, (d.error or "")[:120])
            for d in await client.dead_letters(200)]
    return "table.html", {
        "title": "Dead letters", "rows": rows, "select": "slots",
        "header": ["slot", "task", "queue", "died", "attempts", "last error"],
        "actions": [("/actions/replay", "replay"), ("/actions/purge", "purge")],
        "empty": "no dead letter: a slot lands here when its last attempt fails (its retry "
                 "policy's `max_attempts`)",
        "note": "The 200 most recent; `sched dlq` lists and replays more."}


HISTORY_EMPTY = ("nothing in the history store yet: history is written by a snapshotter: "
                 "start `sched snapshotter` with the same store as this console "
                 "(`--postgres-dsn` or `--history-file`)")


async def history(client: Any, params: Params) -> Page:
    job_id = text(params, "job")
    status = choice(params, "status", tuple(s.value for s in SlotStatus))
    if job_id is not None:
        check_job_id(job_id)
    page: dict[str, Any] = {
        "title": "History", "header": ["slot", "task", "status", "attempts", "fire time",
                                       "last error"],
        "filters": [("job", job_id, None), ("status", status, [s.value for s in SlotStatus])],
        "empty": "no slot in the history store matches" if job_id or status
        else HISTORY_EMPTY}
    try:
        found = await client.history(job_id=job_id, status=status, limit=200)
    except StoreUnavailable as exc:
        return "table.html", {**page, "rows": [], "note": str(exc)}
    page["rows"] = [_row(s.slot_id, link(f"/slots/{s.slot_id}", s.slot_id), s.task,
                         _status(s), s.attempt, when(s.fire_ms),
                         (s.attempts[-1].error or "")[:100] if s.attempts else "")
                    for s in found]
    return "table.html", page


# --- verify runs ----------------------------------------------------------------------------

VERIFY_EMPTY = ("no verify run yet: `sched verify --duration 30s` against this namespace "
                "submits canary jobs, judges the guarantees on them and lists its verdict here "
                "(docs: Verify your deployment)")
VERDICTS = {0: "every invariant holds", 1: "FAILED", 2: "could not run"}


def _verdict(run: VerifyRun) -> str:
    word = VERDICTS.get(run.exit_code, "unknown")
    if run.exit_code == 1:
        word += ": " + ", ".join(c.name for c in run.checks if not c.holds)
    chaos = f", --chaos seed {run.seed}" if run.chaos else ""
    return (f"{when(run.started_ms)} \u00b7 run {run.run} \u00b7 {run.took_ms / 1000:.1f} s"
            f"{chaos} \u00b7 {run.slots:,} canary slots \u00b7 exit {run.exit_code}: {word}")


async def verify_runs(client: Any) -> Page:
    """The last verify runs, newest first: a heading row per run (when, how long, chaos and
    seed, its exit code and verdict), each invariant under it with its figure."""
    rows: list[dict[str, Any]] = []
    for run in await client.verify_runs():
        rows.append({"key": run.run, "cells": [], "heading": _verdict(run)})
        rows += [_row(f"{run.run}:{c.name}", "ok" if c.holds else "FAIL", c.name, c.figure)
                 | {"child": True} for c in run.checks]
        if run.reason:
            rows.append(_row(f"{run.run}:reason", "-", "could not run", run.reason)
                        | {"child": True})
    return "table.html", {
        "title": "Verify runs", "rows": rows, "header": ["verdict", "invariant", "figure"],
        "empty": VERIFY_EMPTY,
        "note": f"The last {RUNS_KEPT} runs of `sched verify` on this namespace, newest first."}
