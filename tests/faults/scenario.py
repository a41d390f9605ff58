"""One namespace of a fault test: submit through the SDK (recording what it returned),
wait for every slot to settle, and check the invariants against the ground truth (and, where
a snapshotter ran, the history store against Redis once it caught up)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from typing import Any

from scheduler import Client, JobSpec, SchedulerError
from scheduler.core.keys import DEFAULT_PRIORITY, lane
from scheduler.core.states import TERMINAL
from scheduler.history.store import open_store

from .harness import GRACE_MS, LEASE_S, SWEEP_INTERVAL_S, Processes
from .invariants import History, Report, observe, read_history, violations
from .monitor import Monitor
from .truth import JobTruth, Truth, TruthStore
from .workload import FAST

ORPHAN_GRACE_MS = int((LEASE_S + SWEEP_INTERVAL_S) * 1000) + 4000


class Scenario:
    def __init__(self, url: str, truth_url: str, ns: str) -> None:
        self.url = url
        self.truth_url = truth_url
        self.ns = ns
        self.client = Client(url, ns)
        self.truth = Truth()
        self.store = TruthStore(truth_url, f"{ns}:truth")
        self.effects = self.store.key  # what handlers are told to record into
        self.monitor: Monitor | None = None
        self.grace_ms = GRACE_MS  # how long past its lease a slot may sit (a test's faults)
        self.history_wait_s = 0.0  # how long the check waited for history to catch up

    def submit(self, specs: list[JobSpec], jobs: list[JobTruth] | None = None) -> list[str]:
        jobs = jobs or [JobTruth(kind=_kind(s), delivery=s.delivery,
                                 max_attempts=(s.retry.max_attempts if s.retry else 3))
                        for s in specs]
        lo = self.client.now_ms()
        ids = self.client.submit_many(specs)
        hi = self.client.now_ms()
        self.truth.accept(ids, [dataclasses.replace(j, submitted_ms=(lo, hi)) for j in jobs])
        return ids

    def watch(self) -> Monitor:
        self.monitor = Monitor(self.url, self.ns, grace_ms=self.grace_ms,
                               orphan_grace_ms=ORPHAN_GRACE_MS, truth=self.truth)
        self.monitor.start()
        return self.monitor

    # --- settling -------------------------------------------------------------------------

    def slot_ids(self) -> list[str]:
        """The slot of every accepted job that is not recurring (a job whose hash is gone
        has none here; the checker reports it)."""
        once = [j for j, t in self.truth.jobs.items() if not t.cron]
        pipe = self.client.redis.pipeline(transaction=False)
        for j in once:
            pipe.hget(self.client._core.job_key(j), "fire_ms")
        return [f"{j}:{int(f)}" for j, f in zip(once, pipe.execute(), strict=True) if f]

    def statuses(self, slots: list[str]) -> list[str | None]:
        pipe = self.client.redis.pipeline(transaction=False)
        for s in slots:
            pipe.hget(self.client._core.slot_key(s), "status")
        return [v.decode() if v else None for v in pipe.execute()]

    def _wait(self, slots: list[str], deadline: float, what: str, procs: Processes) -> None:
        while True:
            states = self.statuses(slots)
            if all(s in TERMINAL for s in states if s is not None):
                return
            if time.monotonic() > deadline:
                stuck = [s for s, st in zip(slots, states, strict=True)
                         if st is not None and st not in TERMINAL]
                raise AssertionError(f"{what} not settled: {dict(Counter(states))}\n"
                                     + self.describe(stuck[:5]) + "\n"
                                     + self.report(procs, settled=False).summary()
                                     + f"\n{procs.output()}")
            time.sleep(0.2)

    def describe(self, slots: list[str]) -> str:
        """What Redis holds of these slots: hash, and their entries' state."""
        r, out = self.client.redis, []
        now = self.client.now_ms()
        for s in slots:
            key = self.client._core.slot_key(s)
            raw = {k.decode(): v.decode(errors="replace")[:200] for k, v in r.hgetall(key).items()}
            stream = key[:key.index("slot:")] + "q:" + lane(
                raw.get("queue", "default"), int(raw.get("priority", DEFAULT_PRIORITY)))
            msg = raw.get("msg") or "0-0"
            pending = r.xpending_range(stream, "workers", min=msg, max=msg, count=1)
            out.append(f"{s} (now {now}): {raw}; entry {r.xrange(stream, msg, msg)}; "
                       f"pending {pending}")
        return "\n".join(out)

    def settle(self, procs: Processes, timeout: float = 120, label: str = "") -> None:
        deadline = time.monotonic() + timeout
        self._wait(self.slot_ids(), deadline, f"{label} slots", procs)
        crons = [j for j, t in self.truth.jobs.items() if t.cron]
        while crons and any(self.client.get_job(j).next_fire_ms for j in crons):
            if time.monotonic() > deadline:
                raise AssertionError(f"{label} cron jobs did not reach their end\n"
                                     f"{procs.output()}")
            time.sleep(0.3)
        self._wait([s.slot_id for j in crons for s in self.client.slots(j)], deadline,
                   f"{label} cron slots", procs)

    def first_starts(self) -> dict[str, float]:
        """slot -> wall time (s) its handler first started, from the handlers' own records."""
        out: dict[str, float] = {}
        for line in self.store.log():
            if line["event"] == "start":
                out.setdefault(line["slot"], line["t"])
        return out

    def starts_after(self, slot: str, t0: float) -> float:
        """Seconds from t0 to the first start of the slot's handler after t0 (inf: none)."""
        ts = [line["t"] for line in self.store.log() if line["slot"] == slot
              and line["event"] == "start" and line["t"] > t0]
        return min(ts) - t0 if ts else float("inf")

    # --- checking -------------------------------------------------------------------------

    def caught_up(self, procs: Processes, timeout: float = 60) -> None:
        """Wait until the snapshotters acked every events entry of every shard (each
        shard's `snapshot_backlog_events` is 0: nothing undelivered, nothing pending). A
        batch is acked only once the store committed it."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            backlog = [d.snapshot_backlog_events for d in self.client.status().shard_details]
            if backlog and all(b == 0 for b in backlog):
                self.history_wait_s = time.monotonic() - started
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"history did not catch up in {timeout:.0f}s: events "
                                     f"behind per shard {backlog} (None: no snapshotter ever "
                                     f"read the shard)\n{procs.output()}")
            time.sleep(0.2)

    def history(self, procs: Processes) -> History:
        assert procs.history_dsn is not None
        store = open_store(procs.history_dsn)
        try:
            return read_history(store, self.ns)
        finally:
            store.close()

    def report(self, procs: Processes, *, settled: bool = True) -> _Summary:
        live = self.monitor.stop() if self.monitor is not None else []
        self.monitor = None
        judged = settled and procs.history_dsn is not None
        if judged:
            self.caught_up(procs)
        self.store.read_into(self.truth)
        obs = observe(self.client.redis, self.ns)
        obs.live += live
        rep = violations(obs, self.truth, grace_ms=self.grace_ms, settled=settled,
                         history=self.history(procs) if judged else None)
        rep.violations += procs.died()
        return _Summary(rep)

    def check(self, procs: Processes, label: str = "") -> Report:
        summary = self.report(procs)
        summary.report.fail_if_violated(f"{label}: " if label else "")
        return summary.report

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        self.store.close()
        self.client.close()


class _Summary:
    def __init__(self, report: Report) -> None:
        self.report = report

    def summary(self) -> str:
        v = self.report.violations
        return f"{len(v)} violation(s) so far:\n" + "\n".join(v[:20])


def _kind(spec: JobSpec) -> str:
    return {"chaos.noop": "noop", "chaos.slow": "slow", "chaos.flaky": "flaky",
            "chaos.once": "once", "chaos.hang": "hang", "chaos.poison": "poison"}.get(
        spec.task, "noop") if spec.delivery != "at_most_once" else "at_most_once"


def slow(n: int, effects: str, seconds: float, **kw: Any) -> list[JobSpec]:
    from .workload import FAST
    return [JobSpec(task="chaos.slow", payload={"seconds": seconds, "effects": effects},
                    retry=FAST, **kw) for _ in range(n)]


def produce_acknowledged(client: Client, sc: Scenario, stop: Any, stats: dict[str, Any], *,
                         rate: float, batch: int, seconds: float) -> None:
    """Submit `rate` no-op jobs/s for `seconds` in batches, recording in the truth only what
    submit_many acknowledged. A batch that failed (the primary gone, the replicas not
    confirming in time) is sent again with the same dedupe keys until it is acknowledged, as
    a producer should: the keys make the repeat safe. Refusals are counted in
    stats["refused"]; stats["submitted"] is the number acknowledged."""
    n, t0 = 0, time.monotonic()
    while not stop.is_set() and time.monotonic() - t0 < seconds:
        specs = [JobSpec(task="chaos.noop", payload={"effects": sc.effects}, retry=FAST,
                         dedupe_key=f"p-{n + i}") for i in range(batch)]
        lo, given_up = client._core.clock.now_ms(), time.monotonic() + 30
        while True:
            try:
                ids = client.submit_many(specs)
                break
            except SchedulerError as exc:  # not acknowledged: send the same batch again
                stats["refused"].append(type(exc).__name__)
                if time.monotonic() > given_up:
                    raise
                time.sleep(0.05)
        hi = client._core.clock.now_ms()
        sc.truth.accept(ids, [JobTruth(kind="noop", max_attempts=FAST.max_attempts,
                                       submitted_ms=(lo, hi)) for _ in specs])
        n += batch
        ahead = t0 + n / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    stats["submitted"] = n
    stats["seconds"] = time.monotonic() - t0


class Producer:
    """produce_acknowledged in a thread, started at once; `finish()` waits for it (it must
    have had every batch acknowledged), then settles the scenario and checks it, as every
    test of a fault under load ends."""

    def __init__(self, client: Client, sc: Scenario, **kw: Any) -> None:
        self.sc = sc
        self.stop = threading.Event()
        self.stats: dict[str, Any] = {"refused": []}
        self.thread = threading.Thread(target=self._run, args=(client, kw))
        self.timeout = kw["seconds"] + 60
        self.thread.start()

    def _run(self, client: Client, kw: dict[str, Any]) -> None:
        try:
            produce_acknowledged(client, self.sc, self.stop, self.stats, **kw)
        except Exception as exc:  # the test says it, not a thread warning
            self.stats["error"] = f"the producer failed: {type(exc).__name__}: {exc}"

    def join(self) -> None:
        self.thread.join(self.timeout)
        self.stop.set()

    def finish(self, procs: Processes) -> _Summary:
        self.join()
        assert not self.thread.is_alive(), "the producer never got its batches acknowledged"
        assert "error" not in self.stats, self.stats["error"]
        self.sc.settle(procs, 120)
        summary = self.sc.report(procs)
        summary.report.fail_if_violated()
        assert procs.died() == [], procs.output()
        return summary
