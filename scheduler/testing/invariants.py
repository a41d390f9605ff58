"""The invariant checker: the scheduler's invariants as rules over what the Redis under test holds
(`Observed`, read once by `observe`) and what is known from outside it (`Truth`). The fault
suite judges its runs with it, and `sched verify` judges its canaries on a user's deployment.

`violations()` is pure: the fault suite feeds it hand-made histories, one per rule, and
watches each rule fire. The rules, each named in its message:

  accepted    every job submit returned has its slot; every slot belongs to such a job
  cron        a recurring job has one slot for every occurrence from submit to end_at
  commit      at most one committed success per slot, committed by the attempt holding its
              lease; a succeeded slot has exactly one
  terminal    once settled, every slot is terminal, and in a state its kind may end in
              (or cancelled, if the test cancelled it)
  lost        every lost attempt ran on a worker the test faulted, or was in flight while
              Redis itself was away (truth.redis_away: a restart or failover)
  failed      an attempt fails only if its handler fails by design
  dead        a slot is dead only after max_attempts failed attempts; the DLQ holds exactly
              the dead slots
  at-most-once  never started twice
  exactly-once  one effect; none only when the attempt that recorded it was lost
  effect      an at-least-once success had its effect
  lease       no attempt sat past its lease + grace before it was reclaimed (and the live
              monitor of the fault suite saw no running slot past it); the time the
              test's outages (truth.Outage: Redis refusing writes, a node killed with its
              shards) cover is not counted, as no node could reclaim then
  orphan      the sweeper recovered only slots whose entries the test removed
  history     once settled and the snapshotter caught up (every events entry acked), the
              history store holds every slot and job Redis holds and no other, each as
              Redis holds it: status, attempts (number, outcome, worker, error: the dead
              letter's reason), run logs, result, priority, cancel reason, definition
              (`History`, read through the store's interface; judged where a snapshotter ran)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from scheduler.core import events
from scheduler.core.cron import CronSpec
from scheduler.core.keys import Keys, shard_of
from scheduler.core.models import Slot, slot_from_hash
from scheduler.core.states import TERMINAL, Delivery, Outcome, SlotStatus
from scheduler.history.store import HistoryStore, text_hash
from scheduler.redis import transport
from scheduler.testing.truth import ENDS, FAILS_BY_DESIGN, Truth, worker_pid

# What counts against max_attempts (a Retry the handler raised does too).
FAILURES = frozenset({Outcome.FAILED, Outcome.RETRIED, Outcome.TIMED_OUT, Outcome.LOST})
EFFECT_KINDS = frozenset({"noop", "slow", "flaky", "delayed", "cron"})


@dataclass
class Observed:
    slots: dict[str, Slot] = field(default_factory=dict)
    once_marks: dict[str, int] = field(default_factory=dict)  # slot -> attempt that won once
    successes: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # (attempt, worker)
    events: Counter[str] = field(default_factory=Counter)
    dlq: set[str] = field(default_factory=set)
    orphaned: set[str] = field(default_factory=set)  # slots the sweeper recovered
    live: list[str] = field(default_factory=list)  # what the live monitor saw
    hashes: dict[str, dict[str, str]] = field(default_factory=dict)  # slot -> its hash, as text
    jobs: dict[str, dict[str, str]] = field(default_factory=dict)  # job -> its hash, as text


@dataclass
class History:
    """What the history store holds of a namespace: slot -> state, job -> definition (each
    the hash the snapshotter read, as text)."""
    slots: dict[str, dict[str, str]] = field(default_factory=dict)
    jobs: dict[str, dict[str, str]] = field(default_factory=dict)


def read_history(store: HistoryStore, ns: str, jobs: Collection[str] | None = None) -> History:
    """What `store` holds of namespace `ns` (of `jobs` alone, when given), for the history
    rule."""
    return History(dict(store.slot_states(ns, jobs)), dict(store.job_definitions(ns, jobs)))


@dataclass
class Report:
    observed: Observed
    violations: list[str]
    exempt_once: int = 0  # exactly-once slots whose effect died with a lost attempt
    # per lost attempt: ms from its lease's end to its reclaim, less the outages' share
    reclaim_lags: list[int] = field(default_factory=list)
    history: History | None = None  # what the history rule judged (None: not judged)

    def fail_if_violated(self, label: str = "") -> None:
        v = self.violations
        assert not v, f"{label}{len(v)} violation(s):\n" + "\n".join(v[:30])


def _hashes(client: Any, prefix: str, only: set[str] | None = None
            ) -> list[tuple[str, dict[bytes, bytes]]]:
    """(id, hash) of every key under the prefix (a shard's slots or jobs); with `only`, of
    those ids alone (no SCAN)."""
    found = ([f"{prefix}{i}".encode() for i in sorted(only)] if only is not None else
             list(transport.call_sync(client, "scan_iter", match=f"{prefix}*", count=5000)))
    pipe = transport.pipeline(client)
    for k in found:
        pipe.execute_command("HGETALL", k)
    return [(k.decode()[len(prefix):], _as_dict(raw))
            for k, raw in zip(found, transport.send_sync(pipe), strict=True) if raw]


def _as_dict(raw: Any) -> dict[bytes, bytes]:
    """HGETALL's reply as a dict (a pipeline's raw reply may be the flat list)."""
    if isinstance(raw, dict):
        return raw
    return dict(zip(raw[::2], raw[1::2], strict=True))


def observe(client: Any, ns: str, jobs: set[str] | None = None, *,
            with_events: bool = True) -> Observed:
    """Read what the checker judges from the Redis of namespace `ns` (a blocking client).
    `jobs`: read only these jobs and their slots (their ids known: a run that shares the
    namespace with other work); None reads every slot and job of the namespace.
    `with_events=False` skips the events streams (the slots alone: whether a run settled)."""
    keys = Keys(ns)
    obs = Observed()
    shards = int(transport.call_sync(client, "hget", keys.meta, "shards") or 0)
    slot_ids: dict[int, set[str]] | None = None
    if jobs is not None:
        slot_ids = {}
        for job_id in jobs:
            shard = shard_of(job_id, shards)
            runs = transport.call_sync(client, "zrange", keys.runs(shard, job_id), 0, -1)
            own = transport.call_sync(client, "hget", keys.job(shard, job_id), "fire_ms")
            ids = {m.decode() for m in runs}
            if own is not None and not runs:
                ids.add(f"{job_id}:{own.decode()}")
            slot_ids.setdefault(shard, set()).update(ids)
    for shard in range(shards):
        wanted = None if slot_ids is None else slot_ids.get(shard, set())
        for slot_id, raw in _hashes(client, keys.slot(shard, ""), wanted):
            obs.slots[slot_id] = slot_from_hash(slot_id, raw)
            obs.hashes[slot_id] = text_hash(raw)
            if b"once:effect" in raw:
                obs.once_marks[slot_id] = int(raw[b"once:effect"])
        wanted_jobs = None if jobs is None else {
            j for j in jobs if shard_of(j, shards) == shard}
        for job_id, raw in _hashes(client, keys.job(shard, ""), wanted_jobs):
            obs.jobs[job_id] = text_hash(raw)
        dlq = transport.call_sync(client, "zrange", keys.dlq(shard), 0, -1)
        obs.dlq |= {m.decode() for m in dlq if wanted is None or m.decode() in wanted}
        entries = transport.call_sync(client, "xrange", keys.events(shard)) if with_events else []
        for _, fields in entries:
            kind = fields[b"type"].decode()
            records = events.records(fields)
            obs.events[kind] += len(records)
            if kind == "succeeded":
                worker = fields.get(b"worker", b"").decode()
                for rec in records:
                    obs.successes.setdefault(rec["slot"], []).append((rec["attempt"], worker))
            elif kind == "orphaned":
                obs.orphaned |= {rec["slot"] for rec in records
                                 if wanted is None or rec["slot"] in wanted}
    return obs


def violations(obs: Observed, truth: Truth, *, grace_ms: int, settled: bool = True,
               history: History | None = None) -> Report:
    """`history`: what the store holds once the snapshotter caught up (None: no snapshotter
    ran, or not settled yet: the history rule is not judged)."""
    v: list[str] = list(obs.live)
    if history is not None:
        v += history_violations(obs, history)
    report = Report(obs, v, history=history)
    by_job: dict[str, list[Slot]] = {}
    for slot in obs.slots.values():
        by_job.setdefault(slot.job_id, []).append(slot)
    for slot_id, slot in obs.slots.items():
        if slot.job_id not in truth.jobs:
            v.append(f"accepted: {slot_id}: a slot of a job no submit returned")
    for job_id, job in truth.jobs.items():
        slots = by_job.get(job_id, [])
        if job.cron:
            _cron(v, job_id, job, slots)
        elif not slots:
            v.append(f"accepted: job {job_id} ({job.kind}): submit returned it, it has no slot")
        elif len(slots) > 1:
            v.append(f"accepted: job {job_id}: {len(slots)} slots for one occurrence")
        for slot in slots:
            report.exempt_once += _slot(v, slot, job.kind, job.delivery, job.max_attempts,
                                        obs, truth, grace_ms, settled, report.reclaim_lags)
    dead = {s for s, slot in obs.slots.items() if slot.status is SlotStatus.DEAD}
    for s in sorted(obs.dlq - dead):
        v.append(f"dead: {s}: in the DLQ but {obs.slots[s].status.value if s in obs.slots else 'gone'}")
    for s in sorted(dead - obs.dlq):
        v.append(f"dead: {s}: dead but not in the DLQ")
    for s in sorted(obs.orphaned - truth.planted_orphans):
        v.append(f"orphan: {s}: recovered as an orphan, but the test removed none of its entries")
    return report


def _cron(v: list[str], job_id: str, job: Any, slots: list[Slot]) -> None:
    """Occurrences at or after the end of the submit call are required; those between its
    start and end may exist (the job's first fire time is computed inside the call)."""
    lo, hi = job.submitted_ms
    spec = CronSpec(job.cron, "UTC")
    fires = {s.fire_ms for s in slots}
    allowed = set()
    for t in spec.after(lo - 1):
        if t > job.end_ms:
            break
        allowed.add(t)
    required = {t for t in allowed if t >= hi}
    missing, extra = required - fires, fires - allowed
    if missing or extra:
        v.append(f"cron: job {job_id}: {len(missing)} occurrences without a slot "
                 f"({sorted(missing)[:3]}), {len(extra)} unexpected slots")


def _slot(v: list[str], slot: Slot, kind: str, delivery: str, max_attempts: int,
          obs: Observed, truth: Truth, grace_ms: int, settled: bool, lags: list[int]) -> int:
    """The per-slot rules; returns 1 for an exactly-once slot exempted from its effect."""
    s = slot.slot_id
    attempts = {a.number: a for a in slot.attempts}
    wins = obs.successes.get(s, [])
    if len(wins) > 1:
        v.append(f"commit: {s}: {len(wins)} committed successes")
    if slot.status is SlotStatus.SUCCEEDED and len(wins) != 1:
        v.append(f"commit: {s}: succeeded without exactly one success event ({len(wins)})")
    for number, worker in wins:
        holder = attempts[number].worker if number in attempts else None
        if holder != worker:
            v.append(f"commit: {s}: success committed by {worker} for attempt {number}, "
                     f"which was leased to {holder}")
    if settled and slot.status not in TERMINAL:
        v.append(f"terminal: {s}: not terminal ({slot.status.value}, attempt {slot.attempt})")
    elif slot.status in TERMINAL and slot.status.value not in ENDS[kind] and not (
            slot.status is SlotStatus.CANCELLED and s in truth.cancelled):
        v.append(f"terminal: {s}: ended {slot.status.value}, which a {kind} job never may")
    failures = 0
    for a in slot.attempts:
        if a.outcome in FAILURES:
            failures += 1
        if a.outcome is Outcome.LOST:
            if worker_pid(a.worker) not in truth.faulted_pids and not (
                    truth.in_flight_across_redis_away(a.claimed_ms, a.lease_until_ms)):
                v.append(f"lost: {s}: attempt {a.number} lost on worker {a.worker}, which no "
                         f"fault touched")
            if a.lease_until_ms is not None and a.finished_ms is not None:
                lo, hi = a.lease_until_ms, a.finished_ms
                lags.append(hi - lo - truth.outage_ms(lo, hi))
                if lags[-1] > grace_ms:
                    v.append(f"lease: {s}: attempt {a.number} sat {hi - lo} ms past its lease "
                             f"({truth.outage_ms(lo, hi)} of them in outages: "
                             f"{truth.outages_within(lo, hi)})")
        elif a.outcome in FAILURES and kind not in FAILS_BY_DESIGN:
            v.append(f"failed: {s}: attempt {a.number} {a.outcome.value} ({a.error}), but a "
                     f"{kind} job never fails")
    if slot.status is SlotStatus.DEAD and failures < max_attempts:
        v.append(f"dead: {s}: dead after {failures} failed attempt(s) of {max_attempts}")
    effects, starts = truth.effects.get(s, 0), truth.starts.get(s, 0)
    if delivery == Delivery.AT_MOST_ONCE and (starts > 1 or effects > 1 or slot.attempt > 1):
        v.append(f"at-most-once: {s}: started {starts} times, {effects} effects, "
                 f"{slot.attempt} attempts")
    if delivery == Delivery.EXACTLY_ONCE:
        if effects > 1:
            v.append(f"exactly-once: {s}: the effect happened {effects} times")
        elif slot.status is SlotStatus.SUCCEEDED and effects == 0:
            mark = obs.once_marks.get(s)
            if mark is not None and mark in attempts and attempts[mark].outcome is Outcome.LOST:
                return 1  # ctx.once is at most once: the effect died with that attempt
            v.append(f"exactly-once: {s}: succeeded but its effect never happened "
                     f"(once recorded by attempt {mark}; attempts "
                     f"{[(a.number, a.outcome, a.worker) for a in slot.attempts]}; "
                     f"{starts} starts)")
    elif (kind in EFFECT_KINDS and slot.status is SlotStatus.SUCCEEDED and effects == 0):
        v.append(f"effect: {s}: succeeded but its effect never happened")
    return 0


# --- history -------------------------------------------------------------------------------

# What a differing hash field is, for the history rule's messages (the first that matches).
_FIELD_KINDS = (("a:", "attempts"), ("log:", "run log"), ("result", "result"),
                ("priority", "priority"), ("cancel", "cancel reason"), ("failures", "failures"))


def _field_kind(name: str) -> str:
    return next((kind for prefix, kind in _FIELD_KINDS if name.startswith(prefix)), "field")


def _attempts(slot: Slot) -> list[tuple[int, str | None, str | None]]:
    return [(a.number, a.outcome.value if a.outcome else None, a.worker) for a in slot.attempts]


def _attempt_differs(ours: Slot, theirs: Slot) -> str | None:
    """The first attempt field (error: a dead letter's reason, log, times) that differs."""
    for a, b in zip(ours.attempts, theirs.attempts, strict=True):
        names = [n for n in a.__struct_fields__ if getattr(a, n) != getattr(b, n)]
        if names:
            return (f"attempt {a.number}'s {names[0]} {_shown(str(getattr(a, names[0])))} in "
                    f"Redis, {_shown(str(getattr(b, names[0])))} in history")
    return None


def _differ(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def _shown(value: str | None) -> str:
    return "(none)" if value is None else repr(value if len(value) <= 60 else value[:57] + "...")


def history_violations(obs: Observed, hist: History) -> list[str]:
    """The history rule: the store equals Redis, slot by slot and job by job. One line per
    slot or job that differs, after a line counting them (a bug that drops the end of some
    slots shows as hundreds of lines)."""
    v: list[str] = []
    statuses: Counter[str] = Counter()
    for s in sorted(obs.hashes.keys() | hist.slots.keys()):
        red, kept = obs.hashes.get(s), hist.slots.get(s)
        if kept is None:
            v.append(f"history: {s}: {red and red.get('status')} in Redis, not in history")
            statuses["missing"] += 1
            continue
        if red is None:
            v.append(f"history: {s}: {kept.get('status')} in history, not in Redis")
            statuses["not in Redis"] += 1
            continue
        fields = _differ(red, kept)
        if not fields:
            continue
        status, kept_status = red.get("status"), kept.get("status")
        if status != kept_status:
            statuses[f"{status} in Redis, {kept_status} in history"] += 1
            v.append(f"history: {s}: {status} in Redis, {kept_status} in history (fields "
                     f"differing: {', '.join(fields)})")
            continue
        statuses[f"{status} in both"] += 1
        ours, theirs = (slot_from_hash(s, {k.encode(): x.encode() for k, x in h.items()})
                        for h in (red, kept))
        if _attempts(ours) != _attempts(theirs):
            v.append(f"history: {s}: attempts (number, outcome, worker) {_attempts(ours)} in "
                     f"Redis, {_attempts(theirs)} in history")
            continue
        if differs := _attempt_differs(ours, theirs):
            v.append(f"history: {s}: {differs}")
            continue
        name = fields[0]
        v.append(f"history: {s}: {_field_kind(name)} differs: {name} {_shown(red.get(name))} "
                 f"in Redis, {_shown(kept.get(name))} in history"
                 + (f" (and {', '.join(fields[1:])})" if fields[1:] else ""))
    jobs = 0
    for j in sorted(obs.jobs.keys() | hist.jobs.keys()):
        red, kept = obs.jobs.get(j), hist.jobs.get(j)
        if red is None or kept is None:
            v.append(f"history: job {j}: in {'Redis' if kept is None else 'history'} only")
        elif fields := _differ(red, kept):
            v.append(f"history: job {j}: definition differs: "
                     + "; ".join(f"{k} {_shown(red.get(k))} in Redis, {_shown(kept.get(k))} "
                                 f"in history" for k in fields[:3]))
        else:
            continue
        jobs += 1
    if v:
        v.insert(0, f"history: {sum(statuses.values())} of {len(obs.hashes)} slots and {jobs} "
                    f"of {len(obs.jobs)} jobs differ from Redis: {dict(statuses)}")
    return v
