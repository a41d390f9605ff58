"""Rebuild what a lost Redis held from the history store (`sched recover`).

Restores the namespace's settings (its shard count and payload limit, as the snapshotter
recorded them), every job that recurs or still has an unfinished slot
(its hash, verbatim), each recurring job's watermark in the shard's `cron` set (the last fire
time the store knows + 1 ms, or the job's creation time), and every slot whose last known
status is not terminal, re-dispatched by `restore.lua`. Nothing that exists in Redis is
overwritten, so running it twice, or against a Redis that lost only part of its data, is safe.

What it cannot restore is what never reached the store: transitions in the snapshotter's lag
at the moment of the loss. A slot whose success was not yet snapshotted runs again
(at-least-once); an at_most_once slot known as running ends `lost`, never re-run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import msgspec
import redis

import scheduler.core.namespace as namespace_policy
import scheduler.redis.transport as transport
import scheduler.scripts.calls as scripts
from scheduler.core.errors import NamespaceError
from scheduler.core.keys import DISPATCH_GROUP, PRIORITIES, Keys, shard_of
from scheduler.core.models import DEFAULT_MAX_PAYLOAD_BYTES
from scheduler.core.namespace import EVENTS_MAXLEN, Meta
from scheduler.core.states import Delivery, JobKind, SlotStatus
from scheduler.history.store import HistoryStore
from scheduler.redis.clock import Clock, RedisClock, resync_sync
from scheduler.scripts.replies import Restored

T = TypeVar("T")


# A job row without any slot row is a job whose slot had not reached the store when Redis
# was lost (the snapshotter writes the job at once and may hold its slot back): its first
# slot is made again from the job. Only for jobs this recent: an old one without slots is one
# whose slot rows retention dropped with their day (an `at` instant long past).
UNWRITTEN_WINDOW_MS = 3_600_000


class RecoveryReport(msgspec.Struct, kw_only=True):
    shards: int
    max_payload_bytes: int | None = None  # the namespace's limit, as Redis holds it now
    jobs_restored: int = 0
    cron_watermarks_restored: int = 0
    slots_scheduled: int = 0
    slots_dispatched: int = 0
    slots_ended: int = 0
    slots_from_jobs: int = 0  # first slots made again from a job whose slot row was missing
    at_most_once_unknown: int = 0  # at_most_once jobs without a slot row: may have run; not re-run
    newest_known_ms: int | None = None  # the newest job creation the store knew: after it, blind


def _pairs(h: dict[str, str]) -> list[str]:
    return [x for kv in h.items() for x in kv]


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def recover(client: redis.Redis, store: HistoryStore, namespace: str, *,
            clock: Clock | None = None, events_maxlen: int = EVENTS_MAXLEN,
            chunk: int = 200) -> RecoveryReport:
    keys = Keys(namespace)
    meta = _open_namespace(client, store, keys)
    shards = meta.shards
    now = resync_sync(clock or RedisClock(), client)
    jobs, slots, queues, report = _read_history(store, namespace, shards, now)
    report.max_payload_bytes = meta.max_payload_bytes
    if queues:
        pipe = transport.pipeline(client)
        namespace_policy.create_groups(pipe, (keys.queue(shard, queue, p)
                                              for shard, queue in sorted(queues)
                                              for p in PRIORITIES), DISPATCH_GROUP)
        namespace_policy.check_groups(transport.send_sync(pipe, raise_on_error=False))

    calls = []
    for shard in sorted(set(jobs) | set(slots)):
        prefix = keys.prefix(shard)
        for part in _chunks(jobs.get(shard, []), chunk):
            calls.append(scripts.restore(prefix, now, events_maxlen, part, []))
        for slot_part in _chunks(slots.get(shard, []), chunk):
            calls.append(scripts.restore(prefix, now, events_maxlen, [], slot_part))
    for group in _chunks(calls, 50):
        for reply in map(Restored.decode, scripts.run_sync(client, group)):
            report.jobs_restored += reply.jobs
            report.cron_watermarks_restored += reply.cron_watermarks
            report.slots_scheduled += reply.slots_scheduled
            report.slots_dispatched += reply.slots_dispatched
            report.slots_ended += reply.slots_ended
    return report


def _open_namespace(client: redis.Redis, store: HistoryStore, keys: Keys) -> Meta:
    """A writer (namespace.py): creates the namespace with the history's shard count and
    payload limit (the default when the history has none: recorded before it kept limits),
    or finds it with the same count; returns what Redis holds."""
    known = store.get_namespace(keys.ns)
    if known is None:
        raise NamespaceError(f"the history store knows no namespace {keys.ns!r} (check "
                             f"--namespace, and that a snapshotter ran for it)")
    shards = known.shards
    pipe = transport.pipeline(client)
    namespace_policy.create(pipe, keys, shards,
                            known.max_payload_bytes or DEFAULT_MAX_PAYLOAD_BYTES)
    stored = namespace_policy.parse(keys.ns, transport.send_sync(pipe)[-1])
    if stored.shards != shards:
        raise NamespaceError(f"namespace {keys.ns!r} has {stored.shards} shards in Redis but "
                             f"{shards} in the history store; refusing to mix them")
    pipe = transport.pipeline(client)
    namespace_policy.write_config(pipe, keys, stored)
    transport.send_sync(pipe)
    return stored


def _read_history(store: HistoryStore, namespace: str, shards: int, now: int) -> tuple[
        dict[int, list[tuple[str, int, list[str]]]], dict[int, list[tuple[str, list[str]]]],
        set[tuple[int, str]], RecoveryReport]:
    """What to restore, by shard: jobs (with their cron watermark), slots, and the
    (shard, queue) streams they need; and the report, with what was made from jobs."""
    report = RecoveryReport(shards=shards)
    jobs: dict[int, list[tuple[str, int, list[str]]]] = {}
    slots: dict[int, list[tuple[str, list[str]]]] = {}
    queues: set[tuple[int, str]] = set()
    for job in store.recovery_jobs(namespace):
        shard = shard_of(job.job_id, shards)
        report.newest_known_ms = max(report.newest_known_ms or 0, job.created_ms)
        cron_ms = -1
        if job.kind == JobKind.CRON and job.definition.get("deleted_ms"):
            pass  # its series was ended (delete_job): restored as it is, never to fire
        elif job.kind == JobKind.CRON:
            cron_ms = job.last_fire_ms + 1 if job.last_fire_ms is not None else job.created_ms
        elif job.last_fire_ms is None:  # no slot row at all
            if now - job.created_ms > UNWRITTEN_WINDOW_MS:
                continue
            first = _first_slot(job.job_id, job.definition)
            if first is None:
                report.at_most_once_unknown += 1
            else:
                slots.setdefault(shard, []).append(first)
                report.slots_from_jobs += 1
        jobs.setdefault(shard, []).append((job.job_id, cron_ms, _pairs(job.definition)))
        queues.add((shard, job.definition.get("queue", "default")))
    for slot, state in store.recovery_slots(namespace):
        shard = shard_of(slot.rpartition(":")[0], shards)
        slots.setdefault(shard, []).append((slot, _pairs(state)))
        queues.add((shard, state.get("queue", "default")))
    return jobs, slots, queues, report


def _first_slot(job_id: str, definition: dict[str, str]) -> tuple[str, list[str]] | None:
    """The slot submit.lua made for a job, as `scheduled` at its fire time (the promoter
    dispatches it, at once if that is past). None for at_most_once: it may have run."""
    if definition.get("delivery") == Delivery.AT_MOST_ONCE:
        return None
    fire = definition.get("fire_ms", "0")
    state = {"job_id": job_id, "fire_ms": fire, "status": SlotStatus.SCHEDULED,
             "queue": definition.get("queue", "default"), "task": definition.get("task", ""),
             "msg": ""}
    return f"{job_id}:{fire}", _pairs(state)
