"""`sched verify` across a Redis outage and a Sentinel failover, and against `sched dev` as
its docs start it. `--redis-restart CMD` runs the operator's command mid-run: the run keeps
submitting through the outage (a refused batch sent again under the same ids), measures how
long Redis was away, excuses the attempts in flight across it, and still judges every
invariant; a command that fails is exit 2 naming it. Every run leaves no key of its own."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from faults.harness import wait_for
from faults.sentinel import sentinel_set

from conftest import SCHED, ns_keys
from helpers import running, sched, sched_process
from scheduler.core.keys import Keys
from scheduler.testing import restart

NS = "verifyha"
# Keys that hold one job or slot, or a verify run's records: none may outlive a run.
PER_RUN = (b":job:", b":slot:", b":runs:", b":submitted:", b":verify:", b":dedupe:")


def verify(redis_url: str, ns: str, *args: str, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`sched verify` as a user runs it: (exit code, stdout, stderr)."""
    done = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, "verify",
                           *args], capture_output=True, text=True, timeout=240, cwd=cwd,
                          env=env)
    return done.returncode, done.stdout, done.stderr


def per_run(r: redis.Redis, ns: str) -> list[bytes]:
    """The keys a run made and should have removed: all but the runs' summaries, the one
    key verify leaves on purpose (the console lists them)."""
    kept = Keys(ns).verify_runs().encode()
    return [k for k in ns_keys(r, ns) if any(p in k for p in PER_RUN) and k != kept]


@contextlib.contextmanager
def sched_dev(tmp: Path) -> Iterator[dict[str, str]]:
    """`sched dev` as getting-started.md starts it (a private redis-server when none answers
    at the URL); its ready file's {redis_url, ...}. Stopped with SIGTERM at the end."""
    from scheduler.dev.embedded import free_port

    ready = tmp / "ready.json"
    proc = subprocess.Popen([*SCHED, "--redis-url", f"redis://127.0.0.1:{free_port()}/0",
                             "--namespace", NS, "dev", "--no-web", "--metrics-port", "0",
                             "--ready-file", str(ready), "--history-file",
                             str(tmp / "history.db")],
                            cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with running(proc):
        wait_for(lambda: ready.exists() or proc.poll() is not None, 30, "sched dev's ready file")
        assert proc.poll() is None, "sched dev exited before it was ready"
        yield json.loads(ready.read_text())


@pytest.mark.slow  # `sched dev` and a verify run: about 15 s
def test_verify_passes_against_sched_dev_and_judges_its_history(tmp_path: Path) -> None:
    with sched_dev(tmp_path) as info:
        code, out, err = verify(info["redis_url"], NS, "--duration", "5s", "--rate", "40",
                                "--history-file", str(tmp_path / "history.db"), "--json")
        assert code == 0, out + err
        verdict = json.loads(out)
        assert {i["name"]: i["holds"] for i in verdict["invariants"]}["history"] is True
        with contextlib.closing(redis.Redis.from_url(info["redis_url"])) as r:
            assert per_run(r, NS) == []


@pytest.mark.slow  # `sched dev` and a verify run across a 12 s outage: about 40 s
def test_verify_submits_through_redis_refusing_every_call_and_judges_across_it(
        tmp_path: Path) -> None:
    """CLIENT PAUSE holds every client's call for 12 s: longer than the SDK's timeout and
    retry (the run sees submits fail and sends them again) and than `sched dev`'s 6 s lease
    (attempts in flight lose their lease, and are excused as the outage's)."""
    with sched_dev(tmp_path) as info:
        port = urllib.parse.urlsplit(info["redis_url"]).port
        code, out, err = verify(info["redis_url"], NS, "--duration", "10s", "--rate", "40",
                                "--redis-restart", f"redis-cli -p {port} CLIENT PAUSE 12000",
                                "--redis-restart-at", "10%", "--no-history", "--json")
        assert code == 0, out + err
        with contextlib.closing(redis.Redis.from_url(info["redis_url"])) as r:
            assert per_run(r, NS) == []
    verdict = json.loads(out)
    restart = verdict["redis_restart"]
    assert restart["exit_code"] == 0 and restart["output"] == "OK", restart
    # Away until the run's first submit went through: the pause, not the command's instant.
    assert restart["away_until_ms"] - restart["started_ms"] >= 12_000, restart
    ran = next(i for i in verdict["invariants"] if i["name"] == "ran")
    assert "lost in flight across the Redis restart" in ran["figure"], ran


@pytest.mark.slow  # `sched dev` and a verify run that stops at its command
def test_a_failing_restart_command_is_exit_2_naming_it_and_leaves_no_key(
        tmp_path: Path) -> None:
    with sched_dev(tmp_path) as info:
        code, out, err = verify(info["redis_url"], NS, "--duration", "5s", "--rate", "20",
                                "--redis-restart", "redis-cli -p 1 PING",
                                "--redis-restart-at", "0s")
        with contextlib.closing(redis.Redis.from_url(info["redis_url"])) as r:
            left = per_run(r, NS)
    assert code == 2 and out == "", out + err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: cannot verify: the --redis-restart command failed: "
                           "redis restart: redis-cli -p 1 PING exited 1"), last
    assert "Could not connect" in last, last
    assert left == []


@pytest.mark.parametrize("args, says", [
    (["--redis-restart", ""], "the command is empty"),
    (["--redis-restart", "true", "--redis-restart-at", "95%"], "from 0% to 80% of --duration"),
    (["--redis-restart-at", "10%"], "--redis-restart-at is for --redis-restart"),
])
def test_bad_restart_options_are_one_line_before_anything_runs(
        capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:
    # Nothing answers at this URL: the options are refused before Redis is asked. (`sched`'s
    # entry point in this process: the real process is the tests' above.)
    code, out, err = sched(capsys, "redis://127.0.0.1:1/0", NS, "verify", "--duration", "10s",
                           *args)
    assert code == 2 and out == "", out + err
    assert says in err and err.count("\n") <= 2 and "Traceback" not in err, err


def test_the_restart_command_is_split_like_a_shell_line_and_its_time_bounded() -> None:
    assert restart.split("redis-cli -p 26379 SENTINEL FAILOVER 'my master'") == [
        "redis-cli", "-p", "26379", "SENTINEL", "FAILOVER", "my master"]
    assert restart.split("sh -c 'a; b'") == ["sh", "-c", "a; b"]  # no shell unless asked
    for bad, says in (("", "empty"), ("a 'b", "not a command line")):
        with pytest.raises(ValueError, match=says):
            restart.split(bad)
    assert restart.at_seconds("50%", 30) == 15 and restart.at_seconds("12s", 30) == 12
    assert restart.at_seconds("0", 30) == 0 and restart.at_seconds("24", 30) == 24
    for bad, says in (("9s", "0 to 8 s"), ("81%", "80%"), ("-1", "not within"),
                      ("soon", "neither a share")):
        with pytest.raises(ValueError, match=says):
            restart.at_seconds(bad, 10)


def test_a_run_that_ends_stops_its_restart_command_and_what_it_started(tmp_path: Path) -> None:
    """Ctrl-C (or any other end of the run) stops a command still running, and what it
    started (here a sleep in the background), rather than leaving them to run on."""
    import os
    import time

    pids = tmp_path / "pids"
    cmd = restart.RedisRestart(["sh", "-c", f"sleep 120 & echo $$ $! > {pids}; wait"], at_s=0)
    cmd.begin()
    wait_for(lambda: pids.exists() and pids.read_text().strip(), 10, "the command's pids")
    shell, child = (int(p) for p in pids.read_text().split())
    began = time.monotonic()
    cmd.stop()
    assert time.monotonic() - began < restart.STOP_GRACE_S + 2
    assert cmd._thread is not None
    cmd._thread.join(5)
    assert not cmd._thread.is_alive(), "the command still runs after the run stopped it"
    for pid in (shell, child):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists()
                 or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], 5,
                 f"process {pid} gone")
    assert cmd.code is not None and cmd.code < 0, cmd.report()


@pytest.mark.slow  # a primary, two replicas, three sentinels, a node, a worker: about 30 s
def test_verify_passes_across_a_sentinel_failover(app_env: dict[str, str]) -> None:
    """The primary's host dies mid-run (SIGKILL, as the operator's drill command does): the
    sentinels promote a replica, every process follows by itself, and the run submits
    through the failover and judges across it."""
    with sentinel_set() as hs:
        old = hs.primary_port()
        pid = next(hs.procs[n].pid for n, p in hs.ports.items() if p == old)
        with running(sched_process(hs.url, NS, app_env, "scheduler"),
                     sched_process(hs.url, NS, app_env, "worker", "--app",
                                   "app_tasks:registry")):
            code, out, err = verify(hs.url, NS, "--duration", "10s", "--rate", "50", "--json",
                                    "--redis-restart", f"kill -9 {pid}", env=app_env)
        new = hs.primary_port()
        with contextlib.closing(redis.Redis(port=new)) as r:
            left = per_run(r, NS)
    assert code == 0, out + err
    assert new != old, "the sentinels did not fail over"
    restart = json.loads(out)["redis_restart"]
    assert restart["exit_code"] == 0 and restart["away_until_ms"] > restart["ended_ms"]
    assert left == [], left[:5]
