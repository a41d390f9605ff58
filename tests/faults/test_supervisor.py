"""`sched worker --processes 2` under faults: its children SIGKILLed under load are started
again within 2 s and lose nothing, its /metrics answers throughout, and SIGTERM drains every
child. (Its crash loop and SIGHUP: tests/e2e/test_processes.py.)"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .harness import Processes, children_of, free_port, pid_alive, wait_for
from .scenario import Scenario, slow

pytestmark = pytest.mark.slow

RESTART_S = 2.0
GRACE_S = 1.0  # what Processes.worker gives every worker


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()  # type: ignore[no-any-return]


def samples(port: int) -> dict[str, float]:
    """Every sample of the supervisor's /metrics without labels, summed over its labels."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(scrape(port)):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def two_children(sup: subprocess.Popen[bytes], old: set[int] = frozenset()) -> set[int]:  # type: ignore[assignment]
    kids: set[int] = set()

    def ready() -> bool:
        nonlocal kids
        kids = children_of(sup.pid)
        return len(kids) == 2 and not kids & old

    wait_for(ready, 30, "two worker children")
    return kids


class Scraper(threading.Thread):
    """Scrapes the supervisor's /metrics and /healthz in turn until stopped; counts what
    answered and keeps what did not."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.answered = 0
        self.failures: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            for path in ("/metrics", "/healthz"):
                try:
                    scrape(self.port, path)
                    self.answered += 1
                except (OSError, AssertionError) as exc:
                    self.failures.append(f"{path}: {exc!r}")

    def stop(self) -> None:
        self.done.set()
        self.join()


def test_sigkilled_children_are_restarted_and_lose_nothing(scenario: Scenario,
                                                            procs: Processes) -> None:
    port = free_port()
    scenario.submit(slow(500, scenario.effects, 0.3))
    procs.node()
    sup = procs.worker("--processes", "2", "--concurrency", "10", "--metrics-port", str(port))
    kids = two_children(sup)
    wait_for(lambda: scenario.store.effect_count() >= 20, 30, "the first effects")
    scrapes = Scraper(port)
    scrapes.start()
    fresh = 0
    for round_ in range(3):
        victim = min(kids - {fresh})  # the one up longest: a child killed before it is up
        procs.kill_child(victim)      # counts towards a crash loop
        killed = time.monotonic()
        wait_for(lambda kids=kids: len(children_of(sup.pid) - kids) == 1, RESTART_S,  # type: ignore[misc]
                 f"the restart of child {victim}", interval=0.02)
        assert time.monotonic() - killed < RESTART_S
        [fresh] = children_of(sup.pid) - kids
        kids = children_of(sup.pid)
        assert victim not in kids and len(kids) == 2
        assert samples(port)["sched_worker_restarts_total"] == round_ + 1
        time.sleep(1.5)  # the load goes on between kills
    scrapes.stop()
    assert scrapes.answered > 10 and not scrapes.failures, scrapes.failures
    scenario.settle(procs, 60)
    report = scenario.check(procs)
    assert report.observed.events["reclaimed"] > 0  # the killed children's runs were taken back
    said = (procs.logs / f"{procs.procs.index(sup)}-worker.log").read_text()
    assert said.count("killed by SIGKILL; restarting it") == 3, said
    seen = samples(port)
    assert seen["sched_worker_children"] == 2
    # What `sched workers` and the console show: the children under their supervisor, with
    # its restarts, from the children's own heartbeats.
    [group] = scenario.client.supervisors()
    assert (group.pid, group.processes, group.restarts) == (sup.pid, 2, 3), group
    assert {c.pid for c in group.children if c.alive} >= kids
    # The children's run counters summed, those of the killed ones included (the last they
    # said before they died): at least what the two live ones ran.
    assert 0 < seen["sched_runs_total"] <= 500 + report.observed.events["reclaimed"]

    # SIGTERM with runs in flight: every child drains within its grace, the supervisor exits 0.
    scenario.submit(slow(40, scenario.effects, 0.5))
    wait_for(lambda: sum(s == "running" for s in scenario.statuses(scenario.slot_ids())) >= 10,
             20, "runs in flight")
    sup.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert sup.wait(timeout=GRACE_S + 10) == 0
    assert time.monotonic() - stopped < GRACE_S + 2.0
    procs.killed.add(sup.pid)  # stopped on purpose
    assert not any(children_of(sup.pid)) and not [k for k in kids if pid_alive(k)]
    procs.worker("--concurrency", "20")  # runs what the drain released
    scenario.settle(procs, 60)
    scenario.check(procs)

