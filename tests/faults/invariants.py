"""The invariant checker: reads every slot, attempt and lifecycle event of a namespace and
reports each violation of DESIGN.md's invariants it finds."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any

import redis

from scheduler.cronspec import CronSpec
from scheduler.keys import Keys, shard_of
from scheduler.models import Slot, slot_from_hash
from scheduler.states import TERMINAL, SlotStatus


@dataclass
class Report:
    slots: dict[str, Slot] = field(default_factory=dict)
    events: Counter[str] = field(default_factory=Counter)
    successes: Counter[str] = field(default_factory=Counter)  # committed, from the events
    violations: list[str] = field(default_factory=list)

    def fail_if_violated(self) -> None:
        assert not self.violations, "\n".join(self.violations[:30]) + (
            f"\n... {len(self.violations)} violations in all" if len(self.violations) > 30 else "")


def read(r: redis.Redis, ns: str) -> Report:
    keys = Keys(ns)
    report = Report()
    shards = int(r.hget(keys.meta, "shards") or 0)
    for shard in range(shards):
        slot_keys = list(r.scan_iter(match=f"{keys.prefix(shard)}slot:*", count=5000))
        pipe = r.pipeline(transaction=False)
        for k in slot_keys:
            pipe.hgetall(k)
        raws: list[Any] = pipe.execute()
        prefix = len(keys.slot(shard, ""))
        for k, raw in zip(slot_keys, raws, strict=True):
            slot_id = k.decode()[prefix:]
            report.slots[slot_id] = slot_from_hash(slot_id, raw)
        for _, fields in r.xrange(keys.events(shard)):
            kind = fields[b"type"].decode()
            records = json.loads(fields[b"data"])
            report.events[kind] += len(records)
            if kind == "succeeded":
                report.successes.update(rec["slot"] for rec in records)
    return report


def check_cron_series(r: redis.Redis, ns: str, report: Report) -> None:
    """Every occurrence of a finished cron job, from its first fire time to its end, has a
    slot (catch-up `all`): a gap is a violation."""
    keys = Keys(ns)
    shards = int(r.hget(keys.meta, "shards") or 0)
    fires: dict[str, set[int]] = {}
    for slot in report.slots.values():
        fires.setdefault(slot.job_id, set()).add(slot.fire_ms)
    pipe = r.pipeline(transaction=False)
    job_ids = sorted(fires)
    for job_id in job_ids:
        pipe.hmget(keys.job(shard_of(job_id, shards), job_id), "kind", "cron", "tz", "fire_ms",
                   "end_ms", "catchup")
    for job_id, (kind, cron, tz, first, end, catchup) in zip(job_ids, pipe.execute(),
                                                             strict=True):
        if kind != b"cron" or not end or (catchup or b"all") != b"all":
            continue
        last = int(end)
        expected = set(takewhile(lambda t, last=last: t <= last, CronSpec(
            cron.decode(), (tz or b"UTC").decode()).after(int(first) - 1)))
        missing, extra = expected - fires[job_id], fires[job_id] - expected
        if missing or extra:
            report.violations.append(f"cron job {job_id}: {len(missing)} occurrences without "
                                     f"a slot, {len(extra)} unexpected slots")


def check(r: redis.Redis, ns: str, *, expected_slots: set[str], now_ms: int, lease_ms: int,
          grace_ms: int = 5000, settled: bool = True, effects_key: str | None = None,
          once_slots: set[str] = frozenset(),  # type: ignore[assignment]
          at_most_once: set[str] = frozenset()) -> Report:  # type: ignore[assignment]
    """Violations of: one committed success per slot; accepted intent reaches a terminal
    state (when `settled`); nothing running past its lease plus grace; at-most-once slots
    never run twice; effects of exactly_once slots happen once; every success had its
    effect; no gap in a finished cron series."""
    report = read(r, ns)
    check_cron_series(r, ns, report)
    v = report.violations
    effects = {k.decode(): int(c) for k, c in r.hgetall(effects_key).items()} if effects_key else {}
    for slot_id in expected_slots - report.slots.keys():
        v.append(f"{slot_id}: submitted but has no slot")
    for slot_id, slot in report.slots.items():
        won = [a for a in slot.attempts if a.outcome == "succeeded"]
        if report.successes[slot_id] > 1 or len(won) > 1:
            v.append(f"{slot_id}: {report.successes[slot_id]} committed successes")
        if slot.status is SlotStatus.SUCCEEDED and report.successes[slot_id] != 1:
            v.append(f"{slot_id}: succeeded without exactly one success event")
        if settled and slot.status not in TERMINAL:
            v.append(f"{slot_id}: not terminal ({slot.status.value}, attempt {slot.attempt})")
        if (slot.status is SlotStatus.RUNNING and slot.lease_until_ms is not None
                and now_ms > slot.lease_until_ms + grace_ms):
            v.append(f"{slot_id}: running {now_ms - slot.lease_until_ms} ms past its lease")
        if slot_id in at_most_once and (slot.attempt > 1 or effects.get(slot_id, 0) > 1):
            v.append(f"{slot_id}: at_most_once but ran {slot.attempt} times")
        if slot_id in once_slots and effects.get(slot_id, 0) > 1:
            v.append(f"{slot_id}: exactly_once effect happened {effects[slot_id]} times")
        if (effects_key and slot.status is SlotStatus.SUCCEEDED and not effects.get(slot_id)
                and slot_id not in once_slots):  # ctx.once is at most once per name
            v.append(f"{slot_id}: succeeded but its effect never happened")
    return report
