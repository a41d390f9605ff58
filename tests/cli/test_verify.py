"""`sched verify` against real processes: a healthy `sched scheduler` + `sched worker` passes
every invariant and the run leaves no key behind (a SCAN of the namespace before and after);
no worker serving the canary, no scheduler node, or no Redis is exit 2 within seconds; a
planted bug (a mutant of the fault suite, run by the stack from a copy of the code) is exit 1
naming the invariant it broke. `--chaos` runs workers and a node of the app beside the stack,
killed and restarted through the run: it passes on this code, fails naming the invariant on
a bug only a crash reaches, and stops its children however it ends. The tests that need only a healthy
stack share one per module (`healthy`: its node and worker on a 3 s lease, so a run's lease
canaries hold 4 s); each run is its own, in the stack's namespace. A run leaves one key, its
summary on the namespace's list of the last runs (`RUNS`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from faults.mutants import MUTANTS

from conftest import SCHED, TESTS, close_plain, drop_namespace, new_namespace, ns_keys
from helpers import running, sched, sched_process
from scheduler import Client
from scheduler.testing.verify import keeps_history

ROOT = Path(__file__).resolve().parents[2]
# Keys that hold one job or slot, or a verify run's records: none may outlive a run.
PER_RUN = (b":job:", b":slot:", b":runs:", b":submitted:", b":verify:", b":dedupe:")
RUNS = b":verify:runs"  # the one key a run leaves: the last runs' summaries
LEASE = ("--lease", "3")  # a short lease: a run's lease canaries hold 4 s


def verify(redis_url: str, ns: str, *args: str, env: dict[str, str] | None = None,
           timeout: float = 180) -> tuple[int, str, str, float]:
    """Run `sched verify` as a user does: (exit code, stdout, stderr, seconds)."""
    started = time.monotonic()
    done = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, "verify",
                           *args], capture_output=True, text=True, timeout=timeout,
                          env=env or dict(os.environ))
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def stack(redis_url: str, ns: str, env: dict[str, str], cwd: Path | None = None,
          worker: tuple[str, ...] = (), node: tuple[str, ...] = ()
          ) -> list[subprocess.Popen[bytes]]:
    """`sched scheduler` and `sched worker`; from `cwd`, the copy of the code there (`-m`
    imports from the working directory first)."""
    if cwd is None:
        return [sched_process(redis_url, ns, env, "scheduler", *node),
                sched_process(redis_url, ns, env, "worker", "--app", "app_tasks:registry",
                              *worker)]
    return [subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, *args],
                             env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
            for args in (["scheduler", *node], ["worker", "--app", "app_tasks:registry",
                                                *worker])]


@pytest.fixture(scope="module")
def healthy(redis_url: str) -> Iterator[str]:
    """One healthy stack (a node and a worker, each on a 3 s lease) for the module's tests
    that need nothing else: its namespace, warmed. Each test's runs are its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS),
                                                        os.environ.get("PYTHONPATH", "")])}
    name = new_namespace()
    warm(redis_url, name)
    plain = redis.Redis.from_url(redis_url)
    try:
        with running(*stack(redis_url, name, env, worker=LEASE, node=LEASE)):
            yield name
    finally:
        drop_namespace(plain, name)
        close_plain(plain)


def warm(redis_url: str, ns: str) -> None:
    """The namespace exists, as on a deployment that has run work."""
    with Client(redis_url, ns) as client:
        client.submit("noop")


def per_run(keys: list[bytes], before: list[bytes] | None = None) -> list[bytes]:
    """The keys of one job, slot or verify run among `keys` that were not in `before`, but
    the list of the last runs' summaries."""
    return [k for k in keys if any(p in k for p in PER_RUN) and k not in (before or [])
            and not k.endswith(RUNS)]


@pytest.mark.slow  # real processes: seconds to a minute each
def test_verify_passes_on_a_healthy_stack_and_leaves_no_key(
        redis_url: str, healthy: str, r: redis.Redis) -> None:
    """Two runs: every invariant holds, lease renewal included (two canaries outlive the 3 s
    lease); the first leaves one key, the list of the last runs, and the second none more
    (a SCAN before and after); the list shows both, newest first, with their verdicts."""
    ns = healthy
    before = ns_keys(r, ns)
    code, out, err, _ = verify(redis_url, ns, "--duration", "5s", "--rate", "40")
    assert code == 0, out + err
    assert "every invariant holds" in out
    assert "2 canaries held 4 s, past the workers' 3 s lease" in out, out
    first = ns_keys(r, ns)
    assert [k for k in set(first) - set(before) if b":verify:" in k] in (
        [], [f"{ns}:verify:runs".encode()]), sorted(set(first) - set(before))[:5]
    assert per_run(first, before) == [], per_run(first, before)[:5]
    code, out, err, _ = verify(redis_url, ns, "--duration", "5s", "--rate", "100", "--json")
    assert code == 0, out + err
    after = ns_keys(r, ns)
    verdict = json.loads(out)
    names = {i["name"]: i for i in verdict["invariants"]}
    assert set(names) == {"ran", "commit", "cron", "retry", "at-most-once", "dedupe",
                          "start-lag"}
    assert all(i["holds"] for i in names.values()), names
    assert verdict["canaries"]["flaky"] > 0 and verdict["canaries"]["at_most_once"] > 0
    assert "four times, each retry within its cap" in names["retry"]["figure"]
    assert verdict["canaries"]["cron"] == 1 and verdict["lag_ms"]["count"] > 400
    assert verdict["removed_keys"] > 400
    # The second run left nothing the first had not: the SCAN after equals the SCAN before.
    assert set(after) - set(first) == set(), sorted(set(after) - set(first))[:5]
    assert per_run(after, before) == []
    with Client(redis_url, ns) as client:
        runs = client.verify_runs()
    latest = runs[0]
    assert latest.run == verdict["run"]
    assert latest.exit_code == 0 and latest.slots == verdict["slots"] and not latest.chaos
    assert [(c.name, c.holds, c.figure) for c in latest.checks] == [
        (i["name"], True, i["figure"]) for i in verdict["invariants"]]
    assert len(runs) >= 2 and runs[1].exit_code == 0 and runs[1].started_ms < latest.started_ms


@pytest.mark.slow  # real processes and a 30 s run: about a minute
@pytest.mark.timeout(240)
@pytest.mark.parametrize("redis_url", ["cluster"], indirect=True)
def test_verify_passes_on_a_cluster_and_leaves_no_key(
        redis_url: str, ns: str, r: Any, app_env: dict[str, str]) -> None:
    """Three masters, one worker and one node, at the run's defaults (200 canaries a second)
    for 30 s: the canaries' shards spread over the masters, each read and removed there, and
    every invariant holds, start lag and capped retries included."""
    warm(redis_url, ns)
    before = ns_keys(r, ns)
    with running(*stack(redis_url, ns, app_env)):
        time.sleep(2)  # the worker is up
        code, out, err, _ = verify(redis_url, ns, "--duration", "30s", "--json")
    assert code == 0, out + err
    verdict = json.loads(out)
    assert all(i["holds"] for i in verdict["invariants"]), verdict["invariants"]
    assert verdict["lag_ms"]["count"] > 6000 and verdict["lag_ms"]["p99"] <= 2000
    assert per_run(ns_keys(r, ns), before) == []


@pytest.mark.slow  # real processes: seconds to a minute each
@pytest.mark.parametrize("serving", ["nothing", "node only", "worker only"])
def test_verify_cannot_run_without_a_worker_or_a_node_and_says_so_in_seconds(
        redis_url: str, ns: str, r: redis.Redis, app_env: dict[str, str],
        serving: str) -> None:
    warm(redis_url, ns)
    before = ns_keys(r, ns)
    procs = [] if serving == "nothing" else [sched_process(
        redis_url, ns, app_env,
        *(["scheduler"] if serving == "node only" else ["worker", "--app", "app_tasks:registry"]))]
    with running(*procs):
        if procs:
            time.sleep(2)  # the worker is up
        code, out, err, took = verify(redis_url, ns, "--duration", "60s",
                                      "--start-timeout", "3")
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: cannot verify: "), err
    assert ("scheduler node" if serving == "worker only" else "no worker") in lines[-1]
    assert took < 30, f"took {took:.0f} s: the probe must not wait out --duration"
    assert per_run(ns_keys(r, ns), before) == []
    with Client(redis_url, ns) as client:  # the console lists it, with the reason
        (summary,) = client.verify_runs()
    assert summary.exit_code == 2 and summary.checks == () and summary.reason in lines[-1]


def test_verify_says_redis_is_unreachable_with_exit_2() -> None:
    code, out, err, took = verify("redis://127.0.0.1:1/0", "sched", "--duration", "5s")
    assert code == 2 and out == "", out + err
    assert err.strip().splitlines()[-1].startswith("error: cannot verify: Redis is "
                                                   "unreachable"), err
    assert took < 30


def _planted(name: str, tmp: Path) -> Path:
    """A copy of the package with the fault suite's mutant `name` applied."""
    m = next(m for m in MUTANTS if m.name == name)
    shutil.copytree(ROOT / "scheduler", tmp / "scheduler",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp / m.path
    text = target.read_text()
    assert text.count(m.old) == 1, f"mutant {name} no longer applies"
    target.write_text(text.replace(m.old, m.new))
    return tmp


@pytest.mark.slow  # real processes: seconds to a minute each
@pytest.mark.parametrize(("mutant", "broken", "rule", "lease"), [
    ("materializer-skips-a-second", "cron", "cron", ()),
    # One fire time gets a second slot (a millisecond later).
    ("materializer-doubles-a-second", "cron", "cron", ()),
    ("retry-without-backoff", "retry", "retry", ()),
    # Uncapped backoff: the canaries failing four times under a 0.5 s cap wait 4 s.
    ("retry-cap-forgotten", "retry", "retry", ()),
    # Outcomes dropped on a healthy worker: their leases (short here) run out, and the
    # reclaimed attempts are lost on a worker nobody stopped.
    ("committer-drops-a-batch", "ran", "lost", LEASE),
    # Leases never renewed: the lease canaries (4 s) are reclaimed under their worker.
    ("heartbeat-renews-nothing", "ran", "lost", LEASE),
])
def test_verify_fails_on_a_planted_bug_and_names_the_invariant(
        redis_url: str, ns: str, r: redis.Redis, app_env: dict[str, str], tmp_path: Path,
        mutant: str, broken: str, rule: str, lease: tuple[str, ...]) -> None:
    """The stack runs a copy of the code with the bug; `sched verify` runs the real code."""
    copy = _planted(mutant, tmp_path)
    env: dict[str, Any] = {**app_env, "PYTHONDONTWRITEBYTECODE": "1",
                           "PYTHONPATH": os.pathsep.join([str(copy), app_env["PYTHONPATH"]])}
    warm(redis_url, ns)
    before = ns_keys(r, ns)
    with running(*stack(redis_url, ns, env, copy, lease, lease)):
        code, out, err, _ = verify(redis_url, ns, "--duration", "6s", "--rate", "40")
    assert code == 1, out + err
    assert f"FAIL {broken}" in out and f"FAILED: {broken}" in out, out
    assert f"\n    {rule}: " in out, out  # the checker's evidence, naming a job or a slot
    assert per_run(ns_keys(r, ns), before) == []
    with Client(redis_url, ns) as client:  # the console lists the run, failed
        (summary,) = client.verify_runs()
    assert summary.exit_code == 1 and broken in [c.name for c in summary.checks if not c.holds]


@pytest.mark.slow  # real processes: seconds to a minute each
@pytest.mark.parametrize("mutant", [None, "history-skips-slot-ends"])
def test_verify_judges_the_history_store_when_the_namespace_keeps_history(
        redis_url: str, ns: str, r: redis.Redis, app_env: dict[str, str], tmp_path: Path,
        mutant: str | None) -> None:
    """A snapshotter runs on the namespace: every canary slot's state in its store equals
    Redis's (a planted snapshotter bug fails the history invariant, naming slots)."""
    store = tmp_path / "history.db"
    env: dict[str, Any] = dict(app_env)
    copy = None
    if mutant is not None:
        copy = _planted(mutant, tmp_path / "copy")
        env.update(PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(copy), app_env["PYTHONPATH"]]))
    warm(redis_url, ns)
    before = ns_keys(r, ns)
    snapshotter = subprocess.Popen(
        [*SCHED, "--redis-url", redis_url, "--namespace", ns, "snapshotter", "--history-file",
         str(store)], env=env, cwd=copy, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with running(*stack(redis_url, ns, env, copy), snapshotter):
        with Client(redis_url, ns) as client:  # the snapshotter is reading
            deadline = time.monotonic() + 30
            while keeps_history(client) is None and time.monotonic() < deadline:
                time.sleep(0.1)
        code, out, err, _ = verify(redis_url, ns, "--duration", "6s", "--rate", "40",
                                   "--history-file", str(store))
    if mutant is None:
        assert code == 0, out + err
        assert "ok   history" in out and "every invariant holds" in out, out
    else:
        assert code == 1, out + err
        assert "FAIL history" in out and "\n    history: " in out, out
    assert per_run(ns_keys(r, ns), before) == []


def test_the_canary_is_reserved_and_unlisted() -> None:
    from scheduler import Registry

    registry = Registry()
    with pytest.raises(ValueError, match="kept for the scheduler's own tasks"):
        registry.task("sched.canary")(lambda ctx, payload: None)
    assert registry.names() == [] and Registry(canary=False).canary is False


# --- --chaos: extra workers and a node of the app, killed and restarted through the run ----

CHAOS = ("--chaos", "--app", "app_tasks:registry", "--kills", "5", "--seed")


@pytest.mark.slow  # real processes: seconds to a minute each
def test_verify_chaos_kills_and_restarts_its_children_and_every_invariant_holds(
        redis_url: str, healthy: str, r: redis.Redis, app_env: dict[str, str]) -> None:
    """Five SIGKILLs (workers and the node, at random) within a 20 s run, shorter than the
    60 s of the requirement to fit the suite's budget: the attempts the killed workers held
    are lost and reclaimed, nothing else is, no slot commits twice, and the run's children
    are gone and its keys removed at the end."""
    ns = healthy
    before = ns_keys(r, ns)
    code, out, err, _ = verify(redis_url, ns, "--duration", "20s", "--rate", "50",
                               *CHAOS, "7", "--json", env=app_env)
    assert code == 0, out + err
    verdict = json.loads(out)
    assert verdict["chaos"]["seed"] == 7 and len(verdict["chaos"]["killed"]) == 5, verdict
    # Worker kills are aimed at a canary in flight (a kill of an idle worker proves little).
    workers = sum(1 for k in verdict["chaos"]["killed"] if k.startswith("worker "))
    assert 0 < verdict["chaos"]["in_flight"] <= workers, verdict["chaos"]
    names = {i["name"]: i for i in verdict["invariants"]}
    assert all(i["holds"] for i in names.values()), names
    assert "0 slots with more than one committed success" in names["commit"]["figure"]
    assert "seed 7" in err  # printed at the start, so a failing run can be repeated
    killed = [int(k.split()[1]) for k in verdict["chaos"]["killed"]]
    assert not any(_alive(pid) for pid in killed)
    assert per_run(ns_keys(r, ns), before) == []
    with Client(redis_url, ns) as client:
        latest = client.verify_runs()[0]
    assert (latest.run, latest.chaos, latest.seed, latest.exit_code) == (verdict["run"], True,
                                                                        7, 0)


@pytest.mark.slow  # real processes: seconds to a minute each
def test_verify_chaos_fails_on_a_planted_reclaim_bug_and_names_the_invariant(
        redis_url: str, ns: str, r: redis.Redis, app_env: dict[str, str],
        tmp_path: Path) -> None:
    """An expired lease ends `lost` instead of re-running: a bug only a crash reaches, so only
    the chaos's kills put it on the canaries' path. The whole run (stack, chaos children and
    verify) runs the copy: the bug is in a Lua script only a node's reclaimer calls."""
    copy = _planted("reclaim-ends-lost", tmp_path)
    env: dict[str, Any] = {**app_env, "PYTHONDONTWRITEBYTECODE": "1",
                           "PYTHONPATH": os.pathsep.join([str(copy), app_env["PYTHONPATH"]])}
    warm(redis_url, ns)
    before = ns_keys(r, ns)
    with running(*stack(redis_url, ns, env, copy)):
        # Worker kills only early in the run (seed 3): their leases run out while it settles.
        code, out, err, _ = verify(redis_url, ns, "--duration", "20s", "--rate", "50",
                                   *CHAOS, "3", env=env)
    assert code == 1, out + err
    assert "FAIL ran" in out and "FAILED: ran" in out, out
    assert re.search(r"; [1-9]\d* of \d+ worker kills found a canary in flight", out), out
    assert "\n    terminal: " in out and "ended lost" in out, out
    assert per_run(ns_keys(r, ns), before) == []


@pytest.mark.slow  # real processes: seconds to a minute each
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_verify_chaos_interrupted_stops_its_children_and_removes_its_keys(
        redis_url: str, ns: str, r: redis.Redis, app_env: dict[str, str], sig: int) -> None:
    """Ctrl-C (or SIGTERM) mid-run: the chaos children are stopped and the run's keys
    removed before it exits."""
    warm(redis_url, ns)
    before = ns_keys(r, ns)
    p = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns, "verify",
                          "--duration", "60s", "--rate", "20", *CHAOS, "11"], env=app_env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        children: list[int] = []
        deadline = time.monotonic() + 30
        while len(children) < 3 and time.monotonic() < deadline:  # two workers and a node
            time.sleep(0.5)
            children = _children(p.pid)
        assert len(children) >= 3, children
        time.sleep(3)  # probing or submitting
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, out + err
    assert err.strip().splitlines()[-1].startswith("error: verify interrupted"), err
    assert not [c for c in children if _alive(c)], children
    assert per_run(ns_keys(r, ns), before) == []


@pytest.mark.parametrize(("args", "says"), [
    (("--chaos",), "--chaos starts workers of your app: give --app"),
    (("--app", "app_tasks:registry"), "--app and --seed are for --chaos"),
    (("--seed", "3"), "--app and --seed are for --chaos"),
    (("--chaos", "--app", "app_tasks:registry", "--kills", "0"), "'--kills'"),
])
def test_verify_chaos_bad_options_say_so_in_one_line_and_change_nothing(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str, r: redis.Redis,
        args: tuple[str, ...], says: str) -> None:
    warm(redis_url, ns)
    before = ns_keys(r, ns)
    code, out, err = sched(capsys, redis_url, ns, "verify", "--duration", "5s", *args)
    assert code == 2 and out == "", out + err
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert ns_keys(r, ns) == before


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
