"""`sched verify`: prove the scheduler's guarantees on a running deployment, with canaries.

A run submits, through the public SDK, a mix of canary jobs (scheduler/core/canary.py: a
no-op every worker serves unless told not to) into the deployment's namespace: immediate ones
at a steady rate, delayed ones spread over the run and a burst due at one instant, a
per-second cron canary, canaries that fail their first attempt, at-most-once canaries and
dedupe pairs. It waits for them to settle, then judges them with the invariant checker the
fault suite uses (scheduler.testing.invariants), against what it knows from outside the slots:
the ids each submit returned and the canaries' own records of every start and end. Last it
removes every key it made: the run's log and its canaries' jobs and slots; and it pushes its
summary onto the namespace's list of the last runs (`record`), the one key it leaves.

It first proves it can run at all: an immediate canary must start (a worker serves the
canary on the queue) and a delayed one must start near its time (a scheduler node promotes
it), each within `start_timeout_s`; otherwise `CannotVerify`, before the workload starts.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from scheduler.core import canary
from scheduler.core.errors import JobNotFound, RedisFailure, ValidationError
from scheduler.core.jobspec import JobSpec, dedupe_job_id, job_ids
from scheduler.core.keys import HISTORY_GROUP, check_name
from scheduler.core.models import RetryPolicy, Slot
from scheduler.core.states import TERMINAL, Delivery, Outcome, SlotStatus
from scheduler.redis import transport
from scheduler.redis.failures import REDIS_ERRORS
from scheduler.sdk.client import Client
from scheduler.testing.chaos import Chaos
from scheduler.testing.invariants import History, Observed, observe, read_history, violations
from scheduler.testing.restart import RedisRestart
from scheduler.testing.truth import JobTruth, Truth, wall_ms, worker_pid

# The bounds of a run's options (the CLI's ranges are these: docs/operating/cli.md).
MIN_DURATION_S, MAX_DURATION_S = 5.0, 3600.0
MIN_RATE, MAX_RATE = 1.0, 2000.0
START_OBJECTIVE_MS = 2000  # the promise: a run starts within 2 s of its fire time
# A canary that fails its first attempt retries after exactly this (no jitter), so the
# retry rule can tell a retry that came early.
RETRY = RetryPolicy(max_attempts=3, base_s=1.0, max_s=1.0, jitter=0.0)
RETRY_EARLY_MS = 50  # clock steps between the worker's and Redis's stamps
# One canary in twenty fails its first four attempts under a policy whose backoff is capped
# at its base: each retry waits the cap (0.5 s), not base * 2^n (4 s before the fifth), and
# the retry rule holds it to the cap and the start objective.
CAPPED = RetryPolicy(max_attempts=5, base_s=0.5, max_s=0.5, jitter=0.0)
# A canary held this long past the workers' lease outlives it unless heartbeats renew it.
LEASE_MARGIN_MS = 1000
TICK_S = 0.1  # the immediate canaries go in a batch per tick
BURST_MAX = 500  # canaries due at one instant
SPREAD_MAX = 2000  # delayed canaries spread over the run
# How long a lost attempt may sit past its lease before it counts against the lease rule:
# the worker's default grace, and a reclaim pass.
GRACE_MS = 15_000
CHAOS_HOLD_MS = 1000  # how long a chaos run's slow canaries hold their worker
# After the snapshotters acked every event: their store's commit of the last batch.
HISTORY_SETTLE_S = 1.0


class CannotVerify(Exception):
    """The run could not judge the deployment (no worker serves the canary, no scheduler
    node, Redis unreachable): its message says which and what to do."""


class VerifyConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One run's settings: how long canaries are submitted (`duration_s`), how many
    immediate ones a second (`rate`), on which queue, how long the probes wait for a start
    (`start_timeout_s`), how long the run waits for its canaries to settle after the last
    was due (`settle_s`), and whether the history store is judged (`history`; only when the
    namespace keeps history: a snapshotter reads its events)."""

    duration_s: float = 60.0
    rate: float = 200.0
    queue: str = "default"
    start_timeout_s: float = 10.0
    settle_s: float = 60.0
    history: bool = True  # judge the history store too, when the namespace keeps history
    # One immediate canary in ten holds its worker this long (a chaos run: a kill finds
    # attempts in flight, so their loss and reclaim are judged).
    hold_ms: int = 0
    # Two canaries (an at-least-once and an at-most-once) hold their worker past the serving
    # workers' lease, when that fits in duration_s: a lease not renewed is reclaimed under
    # them (a chaos run leaves them out: its kills already lose attempts on purpose).
    lease_canaries: bool = True

    def __post_init__(self) -> None:
        if not MIN_DURATION_S <= self.duration_s <= MAX_DURATION_S:
            raise ValidationError("duration", f"{self.duration_s:g} s is not allowed; must be "
                                              f"from {MIN_DURATION_S:g} to {MAX_DURATION_S:g} s")
        if not MIN_RATE <= self.rate <= MAX_RATE:
            raise ValidationError("rate", f"{self.rate:g} is not allowed; must be from "
                                          f"{MIN_RATE:g} to {MAX_RATE:g} canaries a second")
        check_name("queue", self.queue)
        if not 0 <= self.hold_ms <= canary.MAX_HOLD_MS:
            raise ValidationError("hold_ms", f"{self.hold_ms} is not allowed; must be from 0 "
                                             f"to {canary.MAX_HOLD_MS} ms")


@dataclass
class Invariant:
    """One judged invariant: its name, whether it holds, its figure, and the checker's
    evidence when it does not (each line names a slot or a job)."""

    name: str
    holds: bool
    figure: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """A run's outcome: each invariant with its figure, the start lags, what it submitted."""

    run: str
    invariants: list[Invariant]
    lag_ms: dict[str, int]
    canaries: Counter[str]
    slots: int
    removed_keys: int = 0
    left_jobs: int = 0  # canary jobs still running when the run gave up waiting to remove them

    @property
    def holds(self) -> bool:
        return all(i.holds for i in self.invariants)

    def as_json(self) -> dict[str, Any]:
        return {"run": self.run, "holds": self.holds, "slots": self.slots,
                "canaries": dict(self.canaries), "lag_ms": self.lag_ms,
                "removed_keys": self.removed_keys, "left_jobs": self.left_jobs,
                "invariants": [{"name": i.name, "holds": i.holds, "figure": i.figure,
                                "evidence": i.evidence[:50]} for i in self.invariants]}


# The checker's rules, grouped into the invariants a run reports (a violation's message
# starts with its rule's name).
GROUPS = {"ran": ("accepted", "terminal", "lost", "failed", "effect", "orphan", "lease"),
          "commit": ("commit",), "cron": ("cron",), "retry": ("dead", "retry"),
          "at-most-once": ("at-most-once",), "dedupe": ("dedupe",), "history": ("history",)}


def _percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Run:
    """One verify run against the namespace `client` opened (a blocking Client)."""

    def __init__(self, client: Client, config: VerifyConfig,
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.client = client
        self.config = config
        self.say = say
        self.run_id = uuid.uuid4().hex[:12]
        self.truth = Truth()
        self.retried: set[str] = set()  # job ids of the canaries that fail their first attempt
        self.capped: set[str] = set()  # of those, the ones failing three under CAPPED
        self.lease_note = "lease renewal not judged"  # the lease canaries, for the ran figure
        self.dedupe_pairs: list[tuple[str, str, str]] = []  # (key, first id, repeat's id)
        self.kinds: Counter[str] = Counter()
        self.kill_ms: list[int] = []  # when a chaos run killed a child (wall-clock ms)
        # With --redis-restart: submits refused while Redis is away are sent again.
        self.restart: RedisRestart | None = None
        self.group = f"verify:{self.run_id}"  # holds the events streams' entries (hold_events)
        self._read = 0  # lines of the run's log `holding` has read
        self._open: set[tuple[str, int, str]] = set()  # (slot, attempt, worker) started, not ended

    # --- submitting ----------------------------------------------------------------------

    def _payload(self, fail_first: bool = False, hold_ms: int = 0,
                 fail_attempts: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {"run": self.run_id, "fail_first": fail_first}
        if hold_ms:
            out["hold_ms"] = hold_ms
        if fail_attempts:
            out["fail_attempts"] = fail_attempts
        return out

    def _spec(self, kind: str, hold_ms: int | None = None,
              **options: Any) -> tuple[JobSpec, JobTruth]:
        """A canary of `kind`; "capped" fails all but its last attempt under CAPPED (judged
        as a "flaky" one); `hold_ms` overrides how long it holds its worker."""
        fail_first = kind == "flaky"
        policy, fails = (CAPPED, CAPPED.max_attempts - 1) if kind == "capped" else (RETRY, 0)
        delivery = Delivery.AT_MOST_ONCE.value if kind == "at_most_once" else None
        hold = hold_ms if hold_ms is not None else self.config.hold_ms if kind == "slow" else 0
        spec = JobSpec(task=canary.TASK, payload=self._payload(fail_first, hold, fails),
                       queue=self.config.queue, retry=policy, delivery=delivery, **options)
        return spec, JobTruth("flaky" if fails else kind, delivery or "at_least_once",
                              policy.max_attempts)

    def _submit(self, pairs: list[tuple[JobSpec, JobTruth]]) -> list[str]:
        if not pairs:
            return []
        specs = [p[0] for p in pairs]
        ids = (self._submit_through(specs) if self.restart is not None
               else self.client.submit_many(specs))
        self.truth.accept(ids, [p[1] for p in pairs])
        for job_id, (_, job) in zip(ids, pairs, strict=True):
            self.kinds[job.kind] += 1
            if job.kind == "flaky":
                self.retried.add(job_id)
                if job.max_attempts == CAPPED.max_attempts:
                    self.capped.add(job_id)
        return ids

    def _submit_through(self, specs: list[JobSpec]) -> list[str]:
        """Submit under ids of the run's own, sending the batch again while Redis is away
        (a failure may hide which jobs were written; the same ids write each once), for at
        most settle_s; the first submit through after the restart command ended closes its
        outage."""
        ids = [dedupe_job_id(s.dedupe_key) if s.dedupe_key else job_ids.next() for s in specs]
        deadline = time.monotonic() + self.config.settle_s
        failed = False
        while True:
            try:
                got = self.client.submit_many(specs, ids=ids)
            except RedisFailure as exc:
                if time.monotonic() > deadline:
                    raise
                if not failed:
                    self.say(f"redis away ({type(exc).__name__}); sending again")
                failed = True
                time.sleep(0.2)
                continue
            if self.restart is not None:
                self.restart.came_back(wall_ms())
            return got

    def _log(self) -> list[canary.Record]:
        lines = transport.call_sync(self.client.redis, "lrange",
                                    self.client.keys.verify_log(self.run_id), 0, -1)
        return canary.decode_records(lines)

    def holding(self) -> set[int]:
        """The pids of the workers holding a canary now (a start logged without its end or
        failure), read on from where the last call stopped: a chaos kill is aimed at them."""
        lines = transport.call_sync(self.client.redis, "lrange",
                                    self.client.keys.verify_log(self.run_id), self._read, -1)
        self._read += len(lines)
        for r in canary.decode_records(lines):
            if r.event == "start":
                self._open.add((r.slot, r.attempt, r.worker))
            else:
                self._open.discard((r.slot, r.attempt, r.worker))
        return {pid for _, _, worker in self._open if (pid := worker_pid(worker)) is not None}

    def _wait_start(self, job_id: str, within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if any(r.slot.startswith(f"{job_id}:") for r in self._log()):
                return True
            time.sleep(0.1)
        return False

    def hold_events(self) -> None:
        """A consumer group of the run's own on each shard's events stream: the snapshotters
        trim the entries every group has read (trim_history.lua), and this one reads none,
        so the success events of the canaries stay until the run has judged them. `remove`
        drops it. A stream that does not exist yet is made (its first canary would make it
        anyway): a snapshotter starting during the run (`sched dev` just started) makes its
        group there and trims."""
        for shard in range(self.client.shards):
            try:
                transport.call_sync(self.client.redis, "xgroup_create",
                                    self.client.keys.events(shard), self.group, id="$",
                                    mkstream=True)
            except REDIS_ERRORS:
                pass  # a transient failure: the commit rule then names what it missed

    def probe(self) -> None:
        """Prove a worker serves the canary and a node promotes delayed jobs (CannotVerify
        naming what is missing, within start_timeout_s each)."""
        wait = self.config.start_timeout_s
        (now,) = self._submit([self._spec("noop")])
        if not self._wait_start(now, wait):
            raise CannotVerify(
                f"no worker started a canary on queue {self.config.queue!r} within {wait:g} s: "
                f"start a worker that reads it (`sched worker --queues "
                f"{self.config.queue}`), one whose registry was not made with canary=False")
        (later,) = self._submit([self._spec("delayed", delay=0.5)])
        if not self._wait_start(later, wait + 0.5):
            raise CannotVerify(
                f"a delayed canary did not start within {wait:g} s of its time: no scheduler "
                f"node promotes this namespace's due jobs; start one (`sched scheduler`)")

    def submit_workload(self) -> None:
        """The canaries, over duration_s: delayed and burst ones first (each due within the
        run), the cron canary, then the immediate ones at `rate` a second."""
        cfg = self.config
        total = int(cfg.rate * cfg.duration_s)
        spread = min(SPREAD_MAX, max(1, total // 10))
        burst = min(BURST_MAX, max(1, int(cfg.rate)))
        pairs = [self._spec("delayed", delay=1 + cfg.duration_s * (i + 1) / (spread + 1))
                 for i in range(spread)]
        instant = datetime.now(UTC) + timedelta(seconds=cfg.duration_s / 2)
        pairs += [self._spec("delayed", at=instant) for _ in range(burst)]
        for i in range(0, len(pairs), 500):
            self._submit(pairs[i:i + 500])
        end_at = datetime.now(UTC) + timedelta(seconds=cfg.duration_s)
        lo = self.client.now_ms()
        spec, job = self._spec("cron", cron="* * * * * *", end_at=end_at)
        (cron_id,) = self.client.submit_many([spec])
        hi = self.client.now_ms()
        self.truth.accept([cron_id], [JobTruth("cron", cron="* * * * * *",
                                               end_ms=int(end_at.timestamp() * 1000),
                                               submitted_ms=(lo, hi))])
        self.kinds["cron"] += 1
        self._lease_canaries()
        self._immediate(total)

    def _lease_canaries(self) -> None:
        """Two canaries held LEASE_MARGIN_MS past the longest lease of the live workers
        reading the queue (their heartbeats say it), when that fits in the run."""
        if not self.config.lease_canaries:
            self.lease_note = "lease renewal not judged in a chaos run"
            return
        leases = []
        for w in self.client.workers():
            if w.alive and self.config.queue in w.queues:
                raw = transport.call_sync(self.client.redis, "hget",
                                          self.client.keys.worker(w.worker_id), "lease_ms")
                if raw is not None and raw.isdigit():
                    leases.append(int(raw))
        if not leases:
            return
        hold = max(leases) + LEASE_MARGIN_MS
        if hold > min(canary.MAX_HOLD_MS, self.config.duration_s * 1000):
            self.lease_note = (f"lease renewal not judged: the workers' lease "
                               f"({max(leases) / 1000:g} s) and a second is longer than the run")
            return
        self._submit([self._spec("slow", hold_ms=hold),
                      self._spec("at_most_once", hold_ms=hold)])
        self.lease_note = (f"2 canaries held {hold / 1000:g} s, past the workers' "
                           f"{max(leases) / 1000:g} s lease")

    def _immediate(self, total: int) -> None:
        cfg = self.config
        start = time.monotonic()
        sent, tick, n = 0, 0, 0
        while sent < total:
            tick += 1
            due = min(total, int(cfg.rate * TICK_S * tick))
            pairs = []
            for _ in range(due - sent):
                n += 1
                kind = ("flaky" if n % 10 == 3 else "at_most_once" if n % 10 == 7
                        else "slow" if n % 10 == 5 and cfg.hold_ms
                        else "capped" if n % 20 == 9 else "noop")
                pairs.append(self._spec(kind))
            self._submit(pairs)
            if n // 20 > len(self.dedupe_pairs):  # a dedupe pair each 20 canaries
                self._dedupe_pair()
            sent = due
            pause = start + TICK_S * tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    def _dedupe_pair(self) -> None:
        key = f"verify-{self.run_id}-{len(self.dedupe_pairs)}"
        spec, job = self._spec("noop", dedupe_key=key)
        (first,) = self._submit([(spec, job)])
        repeat = (self._submit_through([spec]) if self.restart is not None
                  else self.client.submit_many([spec]))[0]
        self.dedupe_pairs.append((key, first, repeat))

    # --- settling and judging ------------------------------------------------------------

    def settle(self) -> Observed:
        """Wait until every canary slot is terminal and the cron canary's last occurrence
        has its slot (at most settle_s), and read what the checker judges."""
        deadline = time.monotonic() + self.config.settle_s
        jobs = set(self.truth.jobs)
        while True:
            obs = observe(self.client.redis, self.client.namespace, jobs, with_events=False)
            open_ = [s for s in obs.slots.values() if s.status not in TERMINAL]
            if (not open_ and {s.job_id for s in obs.slots.values()} >= jobs
                    and self._cron_done(obs)) or time.monotonic() > deadline:
                return observe(self.client.redis, self.client.namespace, jobs)
            self.say(f"waiting for {len(open_)} canary slot(s) to settle")
            time.sleep(1.0)

    def _cron_done(self, obs: Observed) -> bool:
        for job_id, job in self.truth.jobs.items():
            if job.cron and job.end_ms > 0 and not any(
                    s.fire_ms > job.end_ms - 1000 for s in obs.slots.values()
                    if s.job_id == job_id):
                return self.client.now_ms() > job.end_ms + self.config.settle_s * 1000
        return True

    def judge(self, obs: Observed) -> Verdict:
        # A record the canary sent again after a cut reply is counted once.
        records = list({(r.slot, r.attempt, r.worker, r.event): r for r in self._log()}.values())
        for r in records:
            if r.event == "start":
                self.truth.starts[r.slot] = self.truth.starts.get(r.slot, 0) + 1
            elif r.event == "end":
                self.truth.effects[r.slot] = self.truth.effects.get(r.slot, 0) + 1
        history = self._history(obs)
        report = violations(obs, self.truth, grace_ms=GRACE_MS, settled=True, history=history)
        found = list(report.violations)
        found += self._retry_rule(obs)
        found += [f"dedupe: key {key}: the first submit returned {a}, a repeat {b}"
                  for key, a, b in self.dedupe_pairs if a != b]
        by_group: dict[str, list[str]] = {g: [] for g in GROUPS}
        for line in found:
            rule = line.split(":", 1)[0]
            group = next((g for g, rules in GROUPS.items() if rule in rules), "ran")
            by_group[group].append(line)
        slots = list(obs.slots.values())
        # A chaos run's kills excuse a late start: one due while a killed node's shards
        # waited for a new owner (no node could promote it), or due before a kill and
        # started after it (the killed worker may have held it until its lease ran out).
        excused = {s.slot_id for s in slots
                   if (x := _first_lag(s)) is not None and x > START_OBJECTIVE_MS
                   and (self._in_outage(s.fire_ms)
                        or self.truth.outage_ms(s.fire_ms, s.fire_ms + x) > 0
                        or any(s.fire_ms <= k <= s.fire_ms + x for k in self.kill_ms))}
        lags = [x for s in slots
                if s.slot_id not in excused and (x := _first_lag(s)) is not None]
        lag = ({"p50": _percentile(lags, 0.5), "p99": _percentile(lags, 0.99),
                "max": max(lags), "count": len(lags)} if lags else {"count": 0})
        ran = sum(1 for s in slots if s.status is SlotStatus.SUCCEEDED)
        wins = sum(len(obs.successes.get(s.slot_id, [])) for s in slots)
        doubles = sum(1 for s in slots if len(obs.successes.get(s.slot_id, [])) > 1)
        lost = sum(1 for s in slots for a in s.attempts if a.outcome is Outcome.LOST)
        across = self._lost_across_restart(slots)
        cron_slots = sum(1 for s in slots if self.truth.jobs[s.job_id].cron)
        figures = {
            "ran": f"{ran} of {len(slots)} canary slots succeeded, from {len(self.truth.jobs)} "
                   f"accepted jobs" + (f"; {lost} attempts lost on the workers the chaos "
                                       f"killed" if self.truth.faulted_pids
                                       else "")
                   + (f"; {across} attempts lost in flight across the Redis restart and "
                      f"run again" if self.restart is not None else "")
                   + f"; {self.lease_note}",
            "commit": f"{doubles} slots with more than one committed success "
                      f"({wins} successes committed)",
            "cron": f"{cron_slots} slots of the per-second cron canary",
            "retry": f"{len(self.retried)} canaries failed their first attempt and were retried "
                     f"({len(self.capped)} of them four times, each retry within its cap)",
            "at-most-once": f"{self.kinds['at_most_once']} at-most-once canaries",
            "dedupe": f"{len(self.dedupe_pairs)} dedupe pairs",
            "history": ("not judged: the namespace keeps no history" if history is None
                        else f"{len(history.slots)} canary slots and {len(history.jobs)} jobs "
                             f"in the history store"),
        }
        invariants = [Invariant(g, not by_group[g], figures[g], by_group[g]) for g in GROUPS
                      if g != "history" or history is not None]
        p99 = lag.get("p99")
        invariants.append(Invariant(
            "start-lag", p99 is not None and p99 <= START_OBJECTIVE_MS,
            (f"p50 {lag['p50']} ms, p99 {p99} ms, max {lag['max']} ms over {len(lags)} starts "
             f"(objective: p99 within {START_OBJECTIVE_MS} ms)"
             + (f"; {len(excused)} late across a kill or the Redis restart, not counted"
                if excused else "")) if lags else "no start",
            [f"start-lag: {s.slot_id}: started {x} ms after its fire time"
             for s in slots if s.slot_id not in excused
             and (x := _first_lag(s)) is not None and x > START_OBJECTIVE_MS][:50]))
        return Verdict(self.run_id, invariants, lag, self.kinds, len(slots))

    def _lost_across_restart(self, slots: list[Slot]) -> int:
        """Lost attempts excused by the Redis restart alone (in flight while it was away,
        on a worker no chaos killed)."""
        return sum(1 for s in slots for a in s.attempts if a.outcome is Outcome.LOST
                   and worker_pid(a.worker) not in self.truth.faulted_pids
                   and self.truth.in_flight_across_redis_away(a.claimed_ms, a.lease_until_ms))

    def _in_outage(self, t_ms: int) -> bool:
        return any(o.start_ms <= t_ms <= (o.end_ms if o.end_ms is not None else t_ms)
                   for o in self.truth.outages)

    def _history(self, obs: Observed) -> History | None:
        """What the history store holds of the canaries, once the snapshotters acked every
        event (None: history not judged, or the namespace keeps none). Waits at most
        settle_s for them to catch up; the rule then shows what they had not written."""
        if not self.config.history or keeps_history(self.client) is None:
            return None
        deadline = time.monotonic() + self.config.settle_s
        while not keeps_history(self.client) and time.monotonic() < deadline:
            self.say("waiting for the snapshotter to record the canaries")
            time.sleep(1.0)
        time.sleep(HISTORY_SETTLE_S)
        try:
            # The canaries' rows alone: a deployment's store may hold millions of others.
            return read_history(self.client.store, self.client.namespace, self.truth.jobs)
        except Exception as exc:  # sqlite3's and psycopg's errors alike: a store unreadable
            raise CannotVerify(
                f"the namespace keeps history, but its store could not be read "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); pass "
                f"the snapshotter's --postgres-dsn or --history-file, or --no-history") from None

    def _retry_rule(self, obs: Observed) -> list[str]:
        """A canary failing its first attempt(s) by design: each retry starts no sooner than
        the policy's backoff after the failure (a capped canary's, no later than its cap and
        the start objective either), and it succeeds on the attempt after its planned
        failures."""
        out = []
        for s in obs.slots.values():
            if s.job_id not in self.retried:
                continue
            policy = CAPPED if s.job_id in self.capped else RETRY
            fails = policy.max_attempts - 1 if policy is CAPPED else 1
            att = {a.number: a for a in s.attempts}
            if s.status is not SlotStatus.SUCCEEDED or any(
                    att.get(n) is None for n in range(1, fails + 2)):
                out.append(f"retry: {s.slot_id}: {s.status.value} after {len(att)} attempt(s); "
                           f"a canary failing its first {fails} succeeds on attempt {fails + 1}")
                continue
            for n in range(1, fails + 1):
                failed, retry = att[n], att[n + 1]
                # A lost attempt is retried by its reclaim, not by the policy's backoff.
                if (failed.outcome is not Outcome.FAILED or failed.finished_ms is None
                        or retry.started_ms is None):
                    continue
                gap = retry.started_ms - failed.finished_ms
                wait = min(policy.max_s, policy.base_s * 2 ** (n - 1)) * 1000
                # As for a first start: a retry late across a chaos kill is not held to it.
                late_ok = self._in_outage(retry.started_ms) or any(
                    failed.finished_ms <= k <= retry.started_ms for k in self.kill_ms)
                if gap < wait - RETRY_EARLY_MS or (policy is CAPPED and not late_ok
                                                   and gap > wait + START_OBJECTIVE_MS):
                    out.append(f"retry: {s.slot_id}: attempt {n + 1} started {gap} ms after "
                               f"attempt {n} failed; its policy waits {wait:g} ms (capped at "
                               f"{policy.max_s * 1000:g})")
        return out

    # --- removing what it made -----------------------------------------------------------

    def remove(self) -> tuple[int, int]:
        """Remove the run's log, and its canaries' jobs and slots (cancelling what has not
        started). Returns how many keys went, and how many jobs were left (still running
        after settle_s more)."""
        for shard in range(self.client.shards):
            try:
                transport.call_sync(self.client.redis, "xgroup_destroy",
                                    self.client.keys.events(shard), self.group)
            except REDIS_ERRORS:
                pass  # never made
        cron = {j for j, job in self.truth.jobs.items() if job.cron}
        return _remove(self.client, self.run_id, set(self.truth.jobs), cron,
                       self.config.settle_s)


def keeps_history(client: Client) -> bool | None:
    """None: no shard's events stream has the snapshotters' group (the namespace keeps no
    history); else whether they have read and acked every entry."""
    found, caught_up = False, True
    for shard in range(client.shards):
        try:
            groups = transport.call_sync(client.redis, "xinfo_groups",
                                         client.keys.events(shard))
        except REDIS_ERRORS:
            continue  # no stream yet
        for g in groups:
            name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
            if name == HISTORY_GROUP:
                found = True
                caught_up = caught_up and not g.get("pending") and not g.get("lag")
    return caught_up if found else None


def _first_lag(slot: Slot) -> int | None:
    first = next((a for a in slot.attempts if a.number == 1), None)
    if first is None or first.started_ms is None:
        return None
    return max(0, first.started_ms - slot.fire_ms)


def _remove(client: Client, run_id: str, jobs: set[str], cron: set[str],
            wait_s: float) -> tuple[int, int]:
    """(keys removed, jobs left). The cron canary is deleted first (no occurrence after it).
    A job left whole (a slot not ended: the run did not settle) is deleted too, cancelling
    what has not started; what still runs is waited for, at most `wait_s`, and removed once
    it ends (a running slot is never removed under its worker)."""
    for job_id in cron:
        _delete(client, job_id)
    done = client.forget(sorted(jobs))
    removed = done.keys
    if done.left:
        for job_id in jobs:
            _delete(client, job_id)
        deadline = time.monotonic() + wait_s
        while True:
            done = client.forget(sorted(jobs))
            removed += done.keys
            if not done.left or time.monotonic() > deadline:
                break
            time.sleep(1.0)
    removed += int(transport.call_sync(client.redis, "delete", client.keys.verify_log(run_id)))
    return removed, done.left


def _delete(client: Client, job_id: str) -> None:
    try:
        client.delete_job(job_id, "verify run over")
    except JobNotFound:
        pass  # removed already


def verify(client: Client, config: VerifyConfig,
           say: Callable[[str], None] = lambda line: None,
           chaos: Chaos | None = None, restart: RedisRestart | None = None) -> Verdict:
    """Run the canaries against `client`'s namespace and judge them (CannotVerify when it
    cannot run); every key it made is removed, whatever the outcome. `chaos`: its children
    are started before the probe, killed and restarted through the canaries' submission,
    and stopped before the keys are removed (whatever the outcome). `restart`: its command
    runs once through the submission, which rides over the outage; CannotVerify naming it
    when it fails."""
    run = Run(client, config, say)
    began_ms, began = int(time.time() * 1000), time.monotonic()
    run.restart = restart
    if restart is not None:
        restart.truth, restart.say = run.truth, say
    try:
        if chaos is not None:
            chaos.truth, run.kill_ms, chaos.holding = run.truth, chaos.kill_ms, run.holding
            chaos.start()
        say(f"verify run {run.run_id}: probing for a worker and a scheduler node")
        run.hold_events()
        run.probe()
        say(f"submitting canaries for {config.duration_s:g} s at {config.rate:g}/s")
        if chaos is not None:
            chaos.begin(config.duration_s)
        if restart is not None:
            restart.begin()
        run.submit_workload()
        if chaos is not None:
            chaos.wait()
        if restart is not None:
            _restarted(run, restart)
        obs = run.settle()
        verdict = run.judge(obs)
    except CannotVerify as exc:
        record(client, canary.VerifyRun(
            run=run.run_id, started_ms=began_ms, took_ms=int((time.monotonic() - began) * 1000),
            exit_code=2, chaos=chaos is not None, seed=chaos.seed if chaos else None,
            reason=str(exc)[:canary.MAX_FIGURE]))
        raise
    finally:
        try:
            if restart is not None:
                restart.stop()
            if chaos is not None:
                chaos.stop()
        finally:
            removed, left = run.remove()
    verdict.removed_keys, verdict.left_jobs = removed, left
    record(client, canary.VerifyRun(
        run=run.run_id, started_ms=began_ms, took_ms=int((time.monotonic() - began) * 1000),
        exit_code=0 if verdict.holds else 1, chaos=chaos is not None,
        seed=chaos.seed if chaos else None, slots=verdict.slots,
        checks=tuple(canary.Check(i.name, i.holds, i.figure[:canary.MAX_FIGURE])
                     for i in verdict.invariants)))
    return verdict


def record(client: Client, summary: canary.VerifyRun) -> None:
    """Push a run's summary onto the namespace's list of the last RUNS_KEPT (the one key a
    run leaves: the console lists it). A Redis failure here loses the summary, not the run's
    verdict."""
    key = client.keys.verify_runs()
    try:
        transport.call_sync(client.redis, "lpush", key, canary.encode_run(summary))
        transport.call_sync(client.redis, "ltrim", key, 0, canary.RUNS_KEPT - 1)
    except REDIS_ERRORS:
        pass


def _restarted(run: Run, restart: RedisRestart) -> None:
    """Wait for the restart command to end; CannotVerify naming it when it failed (the run
    could not judge across a restart that did not happen). When no submit went through
    after it ended (it ran late), Redis answering now closes its outage."""
    restart.wait()
    if restart.failed:
        raise CannotVerify(f"the --redis-restart command failed: {restart.report()}; fix the "
                           f"command (run it by hand first) and run again")
    deadline = time.monotonic() + run.config.settle_s
    while True:
        try:
            run.client.now_ms()
            break
        except RedisFailure:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    restart.came_back(wall_ms())
