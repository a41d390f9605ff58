"""The checker's rules, each fed a hand-made history where it must fire, and one where
nothing is wrong (tests/faults/invariants.py). A rule never seen to fail is not trusted."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from scheduler.core.models import Attempt, Slot
from scheduler.core.states import Outcome, SlotStatus

from .invariants import History as Stored
from .invariants import Observed, observe, violations
from .truth import JobTruth, Outage, Truth

BASE = 1_800_000_000_000
A, B = "host-100-aaaaaa", "host-200-bbbbbb"  # workers with pids 100 and 200


def attempt(n: int, outcome: str, worker: str = A, **kw: Any) -> Attempt:
    fields: dict[str, Any] = {"claimed_ms": BASE, "lease_until_ms": BASE + 2000,
                              "finished_ms": BASE + 1000, **kw}
    return Attempt(number=n, worker=worker, outcome=Outcome(outcome), **fields)


def slot(job: str, status: str, attempts: list[Attempt], fire: int = BASE) -> Slot:
    return Slot(slot_id=f"{job}:{fire}", job_id=job, fire_ms=fire, status=SlotStatus(status),
                attempt=len(attempts), attempts=attempts)


def as_hash(s: Slot) -> dict[str, str]:
    """The slot hash the Lua transitions would leave for this slot: earlier attempts archived
    as JSON in `a:<n>`, the last in the slot's own fields."""
    h = {"job_id": s.job_id, "fire_ms": str(s.fire_ms), "status": s.status.value,
         "attempt": str(s.attempt), "task": "chaos.noop", "queue": "default"}
    for a in s.attempts[:-1]:
        h[f"a:{a.number}"] = msgspec.json.encode(a).decode()
    if s.attempts:
        last = s.attempts[-1]
        h |= {"worker": last.worker or "", "claimed_ms": str(last.claimed_ms),
              "lease_until": str(last.lease_until_ms), "finished_ms": str(last.finished_ms),
              "outcome": last.outcome.value if last.outcome else ""}
    return h


class History:
    """A namespace as the checker sees it, built by hand: a good one by default."""

    def __init__(self) -> None:
        self.obs = Observed()
        self.truth = Truth()

    def job(self, job: str, kind: str, status: str, attempts: list[Attempt], *,
            delivery: str = "at_least_once", max_attempts: int = 3, effects: int = 1,
            commits: list[tuple[int, str]] | None = None, fire: int = BASE) -> str:
        s = slot(job, status, attempts, fire)
        self.obs.slots[s.slot_id] = s
        self.obs.hashes[s.slot_id] = as_hash(s)
        self.obs.jobs.setdefault(job, {"task": "chaos.noop", "queue": "default",
                                       "fire_ms": str(fire), "created_ms": str(BASE)})
        self.truth.jobs.setdefault(job, JobTruth(kind=kind, delivery=delivery,
                                                 max_attempts=max_attempts))
        self.truth.effects[s.slot_id] = effects
        self.truth.starts[s.slot_id] = len(attempts)
        if status == "succeeded":
            self.obs.successes[s.slot_id] = commits or [(len(attempts), attempts[-1].worker
                                                         or "")]
        if status == "dead":
            self.obs.dlq.add(s.slot_id)
        return s.slot_id

    def check(self, **kw: Any) -> list[str]:
        return violations(self.obs, self.truth, grace_ms=5000, **kw).violations

    def stored(self) -> Stored:
        """What a snapshotter that copied everything would have put in the store."""
        return Stored(copy.deepcopy(self.obs.hashes), copy.deepcopy(self.obs.jobs))


def good() -> History:
    h = History()
    h.job("ok", "noop", "succeeded", [attempt(1, "succeeded")])
    h.job("retried", "flaky", "succeeded", [attempt(1, "failed"), attempt(2, "succeeded")])
    h.job("gone", "flaky", "dead", [attempt(n, "failed") for n in (1, 2, 3)], effects=0)
    h.job("amo", "at_most_once", "succeeded", [attempt(1, "succeeded")],
          delivery="at_most_once")
    h.job("eo", "once", "succeeded", [attempt(1, "succeeded")], delivery="exactly_once")
    return h


def test_a_good_history_has_no_violation() -> None:
    assert good().check() == []


def rule(messages: list[str]) -> set[str]:
    return {m.split(":", 1)[0] for m in messages}


CASES = {
    "accepted: a submitted job without its slot": (
        lambda h: h.truth.jobs.__setitem__("vanished", JobTruth(kind="noop")), "accepted"),
    "accepted: a slot of a job nobody submitted": (
        lambda h: h.obs.slots.__setitem__("ghost:1", slot("ghost", "succeeded", [])),
        "accepted"),
    "accepted: two slots for one immediate job": (
        lambda h: h.job("ok", "noop", "succeeded", [attempt(1, "succeeded")], fire=BASE + 1),
        "accepted"),
    "commit: two committed successes": (
        lambda h: h.obs.successes.__setitem__(f"ok:{BASE}", [(1, A), (1, A)]), "commit"),
    "commit: committed by a worker that did not hold the lease": (
        lambda h: h.job("fenced", "noop", "succeeded",
                        [attempt(1, "lost"), attempt(2, "succeeded", B)],
                        commits=[(2, A)]), "commit"),
    "terminal: a slot still running": (
        lambda h: h.job("stuck", "noop", "running", [attempt(1, "succeeded")]), "terminal"),
    "terminal: an at-least-once slot ended lost": (
        lambda h: h.job("dropped", "noop", "lost", [attempt(1, "lost")]), "terminal"),
    "lost: a lease lost on a worker no fault touched": (
        lambda h: h.job("healthy", "noop", "succeeded",
                        [attempt(1, "lost"), attempt(2, "succeeded")]), "lost"),
    "failed: an attempt of a job that never fails failed": (
        lambda h: h.job("odd", "noop", "succeeded",
                        [attempt(1, "failed"), attempt(2, "succeeded")]), "failed"),
    "dead: dead before its attempts ran out": (
        lambda h: h.job("early", "flaky", "dead", [attempt(1, "failed")], effects=0), "dead"),
    "dead: dead but not in the DLQ": (
        lambda h: h.obs.dlq.discard(f"gone:{BASE}"), "dead"),
    "dead: in the DLQ but not dead": (
        lambda h: h.obs.dlq.add(f"ok:{BASE}"), "dead"),
    "at-most-once: started twice": (
        lambda h: h.truth.starts.__setitem__(f"amo:{BASE}", 2), "at-most-once"),
    "exactly-once: the effect happened twice": (
        lambda h: h.truth.effects.__setitem__(f"eo:{BASE}", 2), "exactly-once"),
    "exactly-once: succeeded with no effect": (
        lambda h: h.truth.effects.__setitem__(f"eo:{BASE}", 0), "exactly-once"),
    "effect: an at-least-once success without its effect": (
        lambda h: h.truth.effects.__setitem__(f"ok:{BASE}", 0), "effect"),
    "lease: reclaimed long after its lease ran out": (
        lambda h: h.job("late", "noop", "succeeded",
                        [attempt(1, "lost", finished_ms=BASE + 9000),
                         attempt(2, "succeeded")]), "lease"),
    "orphan: recovered as an orphan though nothing removed its entry": (
        lambda h: h.obs.orphaned.add(f"ok:{BASE}"), "orphan"),
    "terminal: cancelled, though the test cancelled nothing": (
        lambda h: h.job("stopped", "noop", "cancelled", [], effects=0), "terminal"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_rule_fires(case: str) -> None:
    h = good()
    if case.startswith("lease"):
        h.truth.faulted_pids.add(100)  # a fault explains the lost attempt, not its lateness
    plant, expected = CASES[case]
    plant(h)
    found = h.check()
    assert expected in rule(found), found


def test_only_outages_excuse_a_late_reclaim() -> None:
    """Time in which the test kept every node from reclaiming is not held against the lease
    rule; overlapping outages count once, and time outside them still does."""
    h = good()
    h.truth.faulted_pids.add(100)
    lease_end = BASE + 2000
    h.job("late", "noop", "succeeded", [attempt(1, "lost", finished_ms=lease_end + 9000),
                                         attempt(2, "succeeded")])
    h.truth.outages += [Outage("oom", lease_end + 1000, lease_end + 4000),
                        Outage("node killed", lease_end + 2000, lease_end + 4500)]
    # 9,000 ms late, 3,500 of them in outages: 5,500 > the 5,000 grace (counted twice: 3,500)
    assert rule(found := h.check()) == {"lease"}, found
    assert "3500 of them in outages: oom +1000..+4000, node killed +2000..+4500" in found[0]
    h.truth.outages.append(Outage("oom", lease_end - 500, lease_end + 500))  # 500 ms more
    assert h.check() == []
    # One still going counts up to the end of the span; one outside it, not at all.
    h.truth.outages[:] = [Outage("oom", lease_end + 4000), Outage("oom", BASE - 9000, BASE)]
    assert h.check() == []
    h.truth.outages[:] = [Outage("oom", lease_end + 6000), Outage("oom", BASE - 9000, BASE)]
    assert rule(h.check()) == {"lease"}


def test_the_exemptions_hold_only_where_they_should() -> None:
    h = good()
    # A lost attempt on a faulted worker is fine, so is a slot dead after three losses there.
    h.truth.faulted_pids.add(100)
    h.job("reclaimed", "noop", "succeeded", [attempt(1, "lost"), attempt(2, "succeeded", B)])
    h.job("unlucky", "noop", "dead", [attempt(n, "lost") for n in (1, 2, 3)], effects=0)
    h.job("amo-lost", "at_most_once", "lost", [attempt(1, "lost")], delivery="at_most_once",
          effects=0)
    # ctx.once is at most once: its effect may die with the attempt that recorded it...
    sid = h.job("eo-lost", "once", "succeeded",
                [attempt(1, "lost"), attempt(2, "succeeded", B)], delivery="exactly_once",
                effects=0)
    h.obs.once_marks[sid] = 1
    report = violations(h.obs, h.truth, grace_ms=5000)
    assert report.violations == [] and report.exempt_once == 1
    # ...but not with one that succeeded.
    h.obs.once_marks[sid] = 2
    assert rule(h.check()) == {"exactly-once"}
    # Not settled yet: a running slot is no violation.
    h.job("busy", "noop", "running", [attempt(1, "succeeded")])
    assert "terminal" not in rule(h.check(settled=False))


def test_a_gap_in_a_cron_series_is_a_violation() -> None:
    h = History()
    end = BASE + 4000
    h.truth.jobs["series"] = JobTruth(kind="cron", cron="* * * * * *", end_ms=end,
                                      submitted_ms=(BASE - 500, BASE - 400))
    for fire in (BASE, BASE + 1000, BASE + 3000, BASE + 4000):
        h.obs.slots[f"series:{fire}"] = slot("series", "succeeded", [attempt(1, "succeeded")],
                                             fire)
        h.obs.successes[f"series:{fire}"] = [(1, A)]
        h.truth.effects[f"series:{fire}"] = 1
    assert h.check() == [f"cron: job series: 1 occurrences without a slot ([{BASE + 2000}]), "
                         f"0 unexpected slots"]
    h.obs.slots[f"series:{BASE + 2000}"] = slot("series", "succeeded",
                                                [attempt(1, "succeeded")], BASE + 2000)
    h.obs.successes[f"series:{BASE + 2000}"] = [(1, A)]
    h.truth.effects[f"series:{BASE + 2000}"] = 1
    assert h.check() == []


def test_observe_reads_what_the_scripts_write(r: Any, ns: str) -> None:
    """The reading half against a real Redis: slots, successes with their worker, the DLQ,
    once marks and job hashes, as the Lua transitions write them."""
    import json

    from scheduler.core.keys import Keys, shard_of

    keys = Keys(ns)
    r.hset(keys.meta, "shards", 4)
    shard = shard_of("j", 4)
    r.hset(keys.slot(shard, "j:5"), mapping={"job_id": "j", "fire_ms": 5, "status": "dead",
                                             "attempt": 1, "worker": A, "once:effect": "1"})
    r.hset(keys.job(shard, "j"), mapping={"task": "t", "queue": "q", "payload": '{"a": 1}'})
    r.zadd(keys.dlq(shard), {"j:5": 1})
    r.xadd(keys.events(shard), {"type": "succeeded", "ts": 1, "worker": B,
                                "data": json.dumps([{"slot": "j:5", "attempt": 1}])})
    r.xadd(keys.events(shard), {"type": "orphaned", "ts": 1, "worker": "",
                                "data": json.dumps([{"slot": "j:5"}])})
    obs = observe(r, ns)
    assert obs.slots["j:5"].status is SlotStatus.DEAD and obs.dlq == {"j:5"}
    assert obs.successes == {"j:5": [(1, B)]} and obs.once_marks == {"j:5": 1}
    assert obs.orphaned == {"j:5"}
    # what the history rule compares, each hash whole, as text
    assert obs.hashes["j:5"]["once:effect"] == "1" and obs.hashes["j:5"]["status"] == "dead"
    assert obs.jobs == {"j": {"task": "t", "queue": "q", "payload": '{"a": 1}'}}


def good_with_history() -> tuple[History, Stored]:
    """good(), with what an operator and the handlers add to slots: a result, a run log, a
    priority, a cancelled slot with its reason, and a replayed dead slot's fresh attempt."""
    h = good()
    h.obs.hashes[f"ok:{BASE}"] |= {"result": '{"rows": 3}', "log:1": '["INFO started"]',
                                   "priority": "2"}
    h.truth.cancelled.add(h.job("stopped", "noop", "cancelled", [], effects=0))
    h.obs.hashes[f"stopped:{BASE}"] |= {"cancel": "not needed", "finished_ms": str(BASE)}
    h.job("again", "flaky", "dead", [attempt(n, "failed", error=f"boom {n}")
                                     for n in (1, 2, 3, 4, 5, 6)], effects=0, max_attempts=3)
    return h, h.stored()


def _set(where: dict[str, str], **fields: str | None) -> None:
    for k, value in fields.items():
        if value is None:
            where.pop(k.replace("_", ":"), None)
        else:
            where[k.replace("_", ":")] = value


S = {name: f"{name}:{BASE}" for name in ("ok", "retried", "gone", "stopped", "again")}
HISTORY_CASES = {
    # the bug the history rule was built for: the end of a slot never reached history
    "a finished slot still queued in history": lambda h, s: _set(
        s.slots[S["ok"]], status="queued", outcome=None, finished_ms=None),
    "a slot missing from history": lambda h, s: s.slots.pop(S["retried"]),
    "a slot in history that Redis does not hold": lambda h, s: s.slots.__setitem__(
        "ghost:1", {"job_id": "ghost", "fire_ms": "1", "status": "succeeded"}),
    "an attempt's outcome": lambda h, s: _set(
        s.slots[S["retried"]], a_1=msgspec.json.encode(attempt(1, "timed_out")).decode()),
    "an attempt's worker": lambda h, s: _set(s.slots[S["ok"]], worker=B),
    "a replayed slot's fresh attempts": lambda h, s: _set(
        s.slots[S["again"]], attempt="3", a_3=None, a_4=None, a_5=None, worker=A),
    "the dead letter's reason": lambda h, s: _set(
        s.slots[S["again"]], a_5=msgspec.json.encode(attempt(5, "failed", error="?")).decode()),
    "a run log": lambda h, s: _set(s.slots[S["ok"]], log_1=None),
    "a result": lambda h, s: _set(s.slots[S["ok"]], result="null"),
    "a priority": lambda h, s: _set(s.slots[S["ok"]], priority=None),
    "a cancel reason": lambda h, s: _set(s.slots[S["stopped"]], cancel="cancelled by operator"),
    "a job's definition": lambda h, s: _set(s.jobs["retried"], payload='{"n": 2}'),
    "a job missing from history": lambda h, s: s.jobs.pop("gone"),
    "a job in history that Redis does not hold": lambda h, s: s.jobs.__setitem__(
        "ghost", {"task": "x"}),
    "a slot Redis holds and history does not": lambda h, s: h.obs.hashes.__setitem__(
        "late:1", {"job_id": "late", "fire_ms": "1", "status": "scheduled"}),
}


def test_a_history_that_copied_everything_has_no_violation() -> None:
    h, stored = good_with_history()
    assert h.check(history=stored) == []
    assert h.check() == []  # no snapshotter ran: the rule is not judged


@pytest.mark.parametrize("case", list(HISTORY_CASES))
def test_the_history_rule_fires(case: str) -> None:
    h, stored = good_with_history()
    HISTORY_CASES[case](h, stored)
    found = h.check(history=stored)
    assert rule(found) == {"history"} and len(found) == 2, found  # the count, then the slot
    assert found[0].startswith("history: ") and " differ from Redis" in found[0]


def test_the_history_rule_names_what_differs() -> None:
    h, stored = good_with_history()
    for case in ("a finished slot still queued in history", "an attempt's outcome", "a run log",
                 "a cancel reason"):
        HISTORY_CASES[case](h, stored)
    found = h.check(history=stored)
    assert found[0] == ("history: 3 of 7 slots and 0 of 7 jobs differ from Redis: "
                        "{'succeeded in Redis, queued in history': 1, "
                        "'succeeded in both': 1, 'cancelled in both': 1}"), found
    assert f"history: {S['retried']}: attempts (number, outcome, worker) [(1, 'failed', " \
           f"'{A}'), (2, 'succeeded', '{A}')] in Redis, [(1, 'timed_out', '{A}'), " \
           f"(2, 'succeeded', '{A}')] in history" in found, found
    [done] = [m for m in found if S["ok"] in m]
    assert done.startswith(f"history: {S['ok']}: succeeded in Redis, queued in history")
    assert any("cancel reason differs: cancel 'not needed' in Redis, 'cancelled by operator' "
               "in history" in m for m in found), found


def test_redis_away_excuses_only_the_attempts_in_flight_across_it() -> None:
    """`sched verify --redis-restart`: Redis itself went away, so an attempt claimed before
    it came back, whose lease had not run out when it went, may be lost on any worker; one
    claimed after it came back, or whose lease ran out before it went, still fails `lost`."""
    h = good()
    h.job("across", "noop", "succeeded", [attempt(1, "lost"), attempt(2, "succeeded", B)])
    assert rule(h.check()) == {"lost"}  # no fault touched worker A
    h.truth.redis_away.append(Outage("redis restart", BASE + 1500, BASE + 6000))
    assert h.check() == []
    for claimed, lease_until in ((BASE + 6001, BASE + 8000), (BASE - 2000, BASE + 1499)):
        h.truth.redis_away[0] = Outage("redis restart", BASE + 1500, BASE + 6000)
        h.job("outside", "noop", "succeeded", [
            attempt(1, "lost", claimed_ms=claimed, lease_until_ms=lease_until,
                    finished_ms=lease_until + 100), attempt(2, "succeeded", B)])
        found = h.check()
        assert rule(found) == {"lost"} and all("outside" in f for f in found), found
        del h.obs.slots[f"outside:{BASE}"], h.obs.hashes[f"outside:{BASE}"]
        del h.obs.jobs["outside"], h.truth.jobs["outside"]
    # An outage still going (no end yet) covers every attempt claimed so far.
    h.truth.redis_away[0] = Outage("redis restart", BASE + 1500)
    assert h.check() == []
