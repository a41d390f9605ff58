"""What each page shows, read through the SDK (AsyncClient): one function per page that returns
the template and its context. No I/O of its own and no HTML: templates/ renders it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from ..errors import SlotNotFound, StoreUnavailable
from ..models import Job, Slot
from ..states import JobKind, SlotStatus

Page = tuple[str, dict[str, Any]]
JOB_STATES = ("active", "ended", "deleted")


def when(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def link(href: str, text: str) -> dict[str, str]:
    return {"href": href, "text": text}


def _row(key: str, *cells: Any) -> dict[str, Any]:
    return {"key": key, "cells": list(cells)}


def _job_state(job: Job) -> str:
    return "deleted" if job.deleted_ms else ("active" if job.next_fire_ms else "ended")


def queues(status: Any) -> Page:
    rows = [_row(q.queue, q.queue, f"{q.depth:,}", f"{q.pending:,}",
                 f"{q.oldest_ready_age_s:.1f}s", f"{q.succeeded_per_s:,.1f}",
                 f"{q.failed_per_s:,.1f}") for q in status.queues]
    return "table.html", {"title": "Queues", "rows": rows, "header": [
        "queue", "depth", "pending", "lag", "ok/s", "failed/s"]}


async def jobs(client: Any, kind: str | None, task: str | None, state: str | None) -> Page:
    found = [j for j in await client.list_jobs(500)
             if (not kind or j.kind == kind) and (not task or task in j.task)
             and (not state or _job_state(j) == state)]
    rows = [_row(j.job_id, link(f"/jobs/{j.job_id}", j.job_id), j.task, j.queue, j.kind,
                 j.cron or "", when(j.next_fire_ms), _job_state(j)) for j in found]
    return "table.html", {
        "title": "Jobs", "rows": rows, "select": "jobs",
        "header": ["job", "task", "queue", "kind", "cron", "next fire", "state"],
        "filters": [("kind", kind, [k.value for k in JobKind if k != JobKind.IMMEDIATE]),
                    ("task", task, None), ("state", state, list(JOB_STATES))],
        "actions": [("/actions/trigger", "trigger"), ("/actions/delete", "delete"),
                    ("/actions/cancel", "cancel")],
        "note": "Jobs with a schedule (delayed, at, cron); an immediate job is found by its "
                "id (/jobs/ID) or in history."}


async def schedules(client: Any) -> Page:
    rows = []
    for j in await client.list_jobs(500):
        if j.kind != JobKind.CRON:
            continue
        last = [s for s in await client.slots(j.job_id) if s.status != SlotStatus.SCHEDULED]
        rows.append(_row(j.job_id, link(f"/jobs/{j.job_id}", j.job_id), j.task, j.cron,
                         j.tz or "UTC", when(j.next_fire_ms),
                         when(last[-1].fire_ms) if last else "-",
                         last[-1].status.value if last else "-", _job_state(j)))
    return "table.html", {
        "title": "Schedules", "rows": rows, "select": "jobs",
        "header": ["job", "task", "cron", "tz", "next fire", "last fire", "last status",
                   "state"],
        "actions": [("/actions/trigger", "trigger"), ("/actions/delete", "delete")]}


async def job(client: Any, job_id: str) -> Page:
    j = await client.get_job(job_id)
    slots = (await client.slots(job_id))[-50:]
    fires = await client.next_fires(job_id, 10) if not j.deleted_ms else []
    fields: list[tuple[str, Any]] = [
        ("task", j.task), ("queue", j.queue), ("priority", j.priority), ("kind", j.kind.value),
        ("cron", f"{j.cron} ({j.tz})" if j.cron else "-"), ("state", _job_state(j)),
        ("created", when(j.created_ms)), ("delivery", j.delivery.value),
        ("timeout", f"{j.timeout_s:g}s" if j.timeout_s else "none"),
        ("retry", f"max {j.retry.max_attempts} attempts, backoff {j.retry.base_s:g}s.."
                  f"{j.retry.max_s:g}s"),
        ("payload", msgspec.json.encode(j.payload).decode()[:4000])]
    if j.deleted_ms:
        fields.append(("deleted", f"{when(j.deleted_ms)} ({j.deleted})"))
    actions: list[tuple[str, str, str, list[str], str | None]] = [
        ("/actions/trigger", "trigger now", "jobs", [job_id], None)]
    if j.cron and not j.deleted_ms:
        actions.append(("/actions/delete", "delete schedule", "jobs", [job_id],
                        "End this series? Waiting slots are cancelled."))
    waiting = [s.slot_id for s in slots if s.status in (SlotStatus.SCHEDULED, SlotStatus.QUEUED)]
    if waiting:
        actions.append(("/actions/cancel", "cancel waiting slots", "ids", waiting, None))
    return "detail.html", {
        "title": f"Job {job_id}", "fields": fields, "actions": actions, "tables": [
            ("Next fire times", ["fire time"], [[when(f)] for f in fires]),
            ("Slots (the last 50)", ["slot", "status", "attempts", "fire time"],
             [[link(f"/slots/{s.slot_id}", s.slot_id), s.status.value, s.attempt,
               when(s.fire_ms)] for s in reversed(slots)])]}


async def slot(client: Any, slot_id: str) -> Page:
    s: Slot = await client.get_slot(slot_id)
    try:
        payload = msgspec.json.encode((await client.get_job(s.job_id)).payload).decode()
    except Exception:  # the job hash left with retention: the slot still shows
        payload = "(the job's definition is no longer in Redis)"
    fields = [("job", link(f"/jobs/{s.job_id}", s.job_id)), ("status", s.status.value),
              ("task", s.task), ("queue", s.queue), ("priority", s.priority),
              ("fire time", when(s.fire_ms)),
              ("attempts", s.attempt), ("payload", payload[:4000]),
              ("result", "-" if s.result is None else msgspec.json.encode(s.result).decode()[:4000])]
    actions: list[tuple[str, str, str, list[str], str | None]] = []
    if s.status in (SlotStatus.SCHEDULED, SlotStatus.QUEUED, SlotStatus.RUNNING):
        actions.append(("/actions/cancel", "cancel", "ids", [slot_id], None))
    if s.status == SlotStatus.DEAD:
        actions += [("/actions/replay", "replay", "slots", [slot_id], None),
                    ("/actions/purge", "purge", "slots", [slot_id], "Purge it from the DLQ?")]
    return "detail.html", {
        "title": f"Slot {slot_id}", "fields": fields, "actions": actions, "tables": [
            ("Attempts", ["#", "worker", "claimed", "started", "finished", "outcome", "error",
                          "log"],
             [[a.number, a.worker or "-", when(a.claimed_ms), when(a.started_ms),
               when(a.finished_ms), a.outcome.value if a.outcome else "-", a.error or "",
               "\n".join(a.log or ())] for a in s.attempts])],
        "note": "The error is its first line and where it was raised; the worker logs the "
                "whole traceback (logger scheduler.handler)."}


def workers(status: Any) -> Page:
    rows = [_row(w.worker_id, w.worker_id, "alive" if w.alive else "gone",
                 f"{w.heartbeat_age_s:.1f}s ago", w.host, w.pid, f"{w.inflight}/{w.concurrency}",
                 f"{w.succeeded_per_s:,.1f}", f"{w.succeeded:,}", f"{w.failed:,}",
                 ",".join(w.queues)) for w in status.workers]
    return "table.html", {"title": "Workers", "rows": rows, "header": [
        "worker", "state", "heartbeat", "host", "pid", "in flight", "ok/s", "succeeded",
        "failed", "queues"]}


async def dead_letters(client: Any) -> Page:
    rows = [_row(d.slot.slot_id, link(f"/slots/{d.slot.slot_id}", d.slot.slot_id),
                 d.slot.task, when(d.died_ms), d.slot.attempt, (d.error or "")[:120])
            for d in await client.dead_letters(200)]
    return "table.html", {
        "title": "Dead letters", "rows": rows, "select": "slots",
        "header": ["slot", "task", "died", "attempts", "last error"],
        "actions": [("/actions/replay", "replay"), ("/actions/purge", "purge")]}


async def history(client: Any, job_id: str | None, status: str | None) -> Page:
    page: dict[str, Any] = {
        "title": "History", "header": ["slot", "task", "status", "attempts", "fire time",
                                       "last error"],
        "filters": [("job", job_id, None), ("status", status, [s.value for s in SlotStatus])]}
    try:
        found = await client.history(job_id=job_id or None, status=status or None, limit=200)
    except StoreUnavailable as exc:
        return "table.html", {**page, "rows": [], "note": str(exc)}
    page["rows"] = [_row(s.slot_id, link(f"/slots/{s.slot_id}", s.slot_id), s.task,
                         s.status.value, s.attempt, when(s.fire_ms),
                         (s.attempts[-1].error or "")[:100] if s.attempts else "")
                    for s in found]
    return "table.html", page


NOT_FOUND = (SlotNotFound,)
