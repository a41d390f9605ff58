"""`sched worker --processes 2` under faults: its children SIGKILLed under load are started
again within 2 s and lose nothing, its /metrics answers throughout, and SIGTERM drains every
child; SIGTERM during the start of many children stops the start; a child that keeps dying
after it is up is restarted after a doubling backoff, then stops the supervisor; SIGUSR1
reaches every child. (Its crash loop before a child is up and SIGHUP:
tests/e2e/test_processes.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import SCHED
from scheduler import Client
from scheduler.core.bounds import MAX_PROCESSES
from scheduler.worker import supervisor as supervision

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



def test_sigterm_during_the_start_of_many_children_stops_it_and_leaves_none(
        tmp_path: Path) -> None:
    """A supervisor of the most children allowed (a small program each) gets SIGTERM once a
    few run: it starts no more, stops those it started, and exits 0 within its grace and
    margin, leaving no child."""
    grace_s = 0.5
    driver = ("import logging, sys\n"
              "from scheduler.worker.supervisor import Supervisor, serve_supervisor\n"
              "logging.basicConfig(level=logging.INFO)\n"
              f"sys.exit(serve_supervisor(Supervisor(['sleep', '600'], {MAX_PROCESSES}, "
              f"{grace_s})))\n")
    log = tmp_path / "supervisor.log"
    with log.open("w") as out:
        sup = subprocess.Popen([sys.executable, "-c", driver], stderr=out)
    try:
        wait_for(lambda: len(children_of(sup.pid)) >= 10, 30, "the first children",
                 interval=0.005)
        sup.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert sup.wait(timeout=60) == 0, log.read_text()[-3000:]
        took = time.monotonic() - stopped
    finally:
        if sup.poll() is None:
            left = children_of(sup.pid)
            sup.kill()
            sup.wait()
            for k in left:  # sleep has no PDEATHSIG: none left behind
                os.kill(k, signal.SIGKILL)
    started = [int(pid) for pid in re.findall(r"started \(pid (\d+)\)", log.read_text())]
    assert 10 <= len(started) < MAX_PROCESSES // 2, len(started)
    assert took < grace_s + supervision.STOP_MARGIN_S, took
    assert not [p for p in started if pid_alive(p)]


def test_a_child_that_keeps_dying_after_it_is_up_backs_off_then_stops_the_supervisor(
        app_env: dict[str, str], redis_url: str, ns: str) -> None:
    """Each child dies 3 s after it starts (well after it is up), every time: each restart
    waits twice as long as the one before, and CRASH_LOOP deaths of one child within
    CRASH_WINDOW_S stop the supervisor, exit 1, with one error naming the cause."""
    life_s = 3.0
    started = time.monotonic()
    done = subprocess.run(
        [*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker", "--processes", "2",
         "--app", "dying_app:registry", "--log-level", "warning"],
        env={**app_env, "SCHED_TEST_LIFE_S": str(life_s)}, capture_output=True, text=True,
        timeout=supervision.CRASH_WINDOW_S + 30)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: worker child ") and (
        f"died {supervision.CRASH_LOOP} times within {supervision.CRASH_WINDOW_S:.0f}s "
        "(last: exit code 3)") in lines[-1], lines[-1]
    assert "in a row before it was up" not in done.stderr  # each was up, then died
    assert "Traceback" not in done.stderr
    waits = [float(w) for w in re.findall(r"worker child 0 \(pid \d+\) exit code 3; "
                                          r"restarting it in ([\d.]+)s", done.stderr)]
    assert len(waits) >= supervision.CRASH_LOOP - 2, done.stderr
    first = supervision.BACKOFF_FIRST_S
    assert waits[:3] == [first, 2 * first, 4 * first], waits
    assert took < supervision.CRASH_LOOP * (life_s + 5), took


def test_sigusr1_reaches_every_child(tmp_path: Path, app_env: dict[str, str], redis_url: str,
                                     ns: str) -> None:
    """The supervisor has no tasks of its own: SIGUSR1 goes on to each child, which logs
    where its tasks wait."""
    log = tmp_path / "supervisor.log"
    with log.open("wb") as out, Client(redis_url, ns) as client:
        client.create_namespace()
        sup = subprocess.Popen(
            [*SCHED, "--redis-url", redis_url, "--namespace", ns, "worker", "--processes", "2",
             "--app", "app_tasks:registry", "--log-level", "warning"],
            env={**app_env, "SCHED_TEST_REDIS_URL_APP": redis_url}, stdout=out,
            stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: len(client.workers()) == 2, 30, "both children registered")
            kids = children_of(sup.pid)
            sup.send_signal(signal.SIGUSR1)
            wait_for(lambda: log.read_text().count(" task(s):") >= 2, 10,
                     "both children's task dumps")
            assert children_of(sup.pid) == kids and sup.poll() is None
        finally:
            sup.send_signal(signal.SIGTERM)
            sup.wait(timeout=30)


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_and_margin(
        tmp_path: Path) -> None:
    """SIGTERM to the supervisor: a child that ignores it is SIGKILLed STOP_MARGIN_S after
    the grace, and the supervisor exits 1 (not every child drained)."""
    grace_s = 0.5
    driver = ("import logging, sys\n"
              "from scheduler.worker.supervisor import Supervisor, serve_supervisor\n"
              "logging.basicConfig(level=logging.INFO)\n"
              "sys.exit(serve_supervisor(Supervisor(['sh', '-c', 'trap \"\" TERM; exec sleep "
              f"600'], 2, {grace_s})))\n")
    log = tmp_path / "supervisor.log"
    with log.open("w") as out:
        sup = subprocess.Popen([sys.executable, "-c", driver], stderr=out)

    def ignoring() -> bool:  # both exec'd sleep, SIGTERM ignored (kept across exec)
        kids = children_of(sup.pid)
        return len(kids) == 2 and all(
            Path(f"/proc/{k}/comm").read_text().strip() == "sleep" for k in kids)

    kids: set[int] = set()
    try:
        wait_for(ignoring, 30, "two children that ignore SIGTERM")
        kids = children_of(sup.pid)
        sup.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert sup.wait(timeout=30) == 1, log.read_text()[-3000:]
        took = time.monotonic() - stopped
    finally:
        if sup.poll() is None:
            kids |= children_of(sup.pid)
            sup.kill()
            sup.wait()
            for k in kids:  # they ignore SIGTERM and have no PDEATHSIG: none left behind
                if pid_alive(k):
                    os.kill(k, signal.SIGKILL)
    assert grace_s + supervision.STOP_MARGIN_S - 0.1 <= took, took
    assert took < grace_s + supervision.STOP_MARGIN_S + 2.0, took
    assert log.read_text().count("did not stop within the grace; killing it") == 2
    assert not [k for k in kids if pid_alive(k)]
