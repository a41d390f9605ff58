"""The benchmarks run (tiny N): their commands and output format stay working."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler.worker.config import WorkerConfig

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path: Path, command: str, *args: str, codes: tuple[int, ...] = (0,)
          ) -> tuple[str, dict[str, Any]]:
    """Run `python -m bench COMMAND ARGS --out tmp_path`; its summary line and its JSON."""
    out = subprocess.run([sys.executable, "-m", "bench", command, *args, "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode in codes, out.stderr
    return out.stdout, json.loads((tmp_path / f"{command}.json").read_text())


def test_burndown_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "burndown", "--jobs", "300", "--runs", "1")
    assert stdout.startswith("burndown (concurrency 100, batch 500, 2 pipelines): 300 jobs x1:")
    assert "exactly once: yes" in stdout
    assert result["runs"][0]["duplicates"] == 0 and result["runs"][0]["committed"] == 300


def test_objectives_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "objectives", "--schedules", "200", "--seconds", "2")
    assert stdout.startswith("objectives: 200 per-minute schedules, 2 shards, one Redis: sweep ")
    assert result["with_watch"]["sweeps"] > 0 and "watch_redis_cpu_pct" in result


def test_submit_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "submit", "--jobs", "500", "--batch", "200",
                           "--singles", "20", "--runs", "1")
    assert stdout.startswith("submit: submit_many ") and "every job written: yes" in stdout
    run = result["runs"][0]
    assert 0 < run["single_p50_us"] <= run["single_p99_us"] <= run["single_max_us"]


def test_submit_replicated_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "submit", "--jobs", "400", "--batch", "200",
                           "--singles", "10", "--runs", "1", "--replicated")
    assert stdout.startswith("submit, one replica: submit_many ") and "written: yes" in stdout
    assert result["ratio"] > 0 and len(result["runs"]["replicated"]) == 1


def test_delayed_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "delayed", "--burst", "300", "--rate", "50",
                           "--seconds", "1", "--runs", "1")
    assert stdout.startswith("delayed: burst 300 due in one second: start lag p50 ")
    assert "never early: yes" in stdout
    run = result["runs"][0]
    assert run["burst"]["n"] == 300 and run["burst"]["min_ms"] >= 0
    assert run["stream"]["n"] == 50 and run["stream"]["min_ms"] >= 0


def test_burst_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "burst", "--sizes", "200", "--runs", "1")
    assert stdout.startswith("burst: 200 due at once: start lag p50 ")
    for res in result["results"]:
        assert res["n"] == 200 and 0 <= res["p50_ms"] <= res["p99_ms"] <= res["all_started_ms"]
        assert res["early"] == 0 and res["min_ms"] >= 0


def test_sustained_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "sustained", "--rate", "200", "--seconds", "2",
                           "--sample", "1")
    assert stdout.startswith("sustained: ") and "start lag p50 " in stdout
    assert result["lag"]["n"] == result["submitted"] and result["lag"]["min_ms"] >= 0
    assert "evalsha" in result["redis_commands_per_job"]


def test_snapshot_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "snapshot", "--events", "2000", "--runs", "1",
                           "--lifecycle-jobs", "500", "--load-rate", "500",
                           "--load-seconds", "1")
    assert stdout.startswith("snapshot: 2000 events x1: ") and "rows/s" in stdout
    assert result["runs"][0]["rows"] == 4000  # a job row and a slot row per submission
    assert result["load"]["jobs"] >= 400


def test_retention_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "retention", "--rate", "300", "--seconds", "4",
                           "--retention", "0.5", codes=(0, 1))
    assert stdout.startswith("retention: 300 jobs/s for 4s")
    assert result["on"]["deleted_slots"] > 0 and result["off"]["deleted_slots"] == 0


def test_peers_smoke_ours_only(tmp_path: Path) -> None:
    """`bench peers` through its own code path with only ours (CI downloads no peer)."""
    stdout, result = bench(tmp_path, "peers", "--only", "ours", "--jobs", "300", "--runs", "1",
                           "--delayed", "100", "--lead", "1")
    assert stdout.startswith("peers: burn-down executions/s, median (ours/theirs): ours ")
    assert "delayed start lag p99: ours " in stdout and "unavailable: none" in stdout
    run = result["burn_runs"]["ours"][0]
    assert run["done"] == 300 and run["duplicates"] == 0
    lag = result["delayed_runs"]["ours"][0]
    assert lag["n"] == 100 and lag["min_ms"] >= 0
    assert result["table"].splitlines()[2].startswith("| ours | this commit | 300 |")


def test_peers_rejects_an_unknown_peer(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench", "peers", "--only", "nope", "--out",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "unknown nope" in out.stderr


def test_sustained_with_history_writes_into_a_schema_of_its_own(tmp_path: Path) -> None:
    import psycopg

    from conftest import POSTGRES_DSN

    def schemas() -> set[str]:
        # The PostgreSQL is shared: other runs' schemas may be there, before and meanwhile.
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            return {name for (name,) in conn.execute(
                "SELECT schema_name FROM information_schema.schemata "
                "WHERE schema_name LIKE 'bench_sustained_%'").fetchall()}

    before = schemas()
    stdout, result = bench(tmp_path, "sustained", "--rate", "200", "--seconds", "2",
                           "--sample", "1", "--history", POSTGRES_DSN, "--retention", "30",
                           "--keep-history")
    assert "1 snapshotter(s) with 30s retention" in stdout and result["lag"]["n"] > 0
    [schema] = schemas() - before
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        try:
            jobs = conn.execute(f'SELECT count(*) FROM "{schema}".jobs').fetchone()
            assert jobs == (result["submitted"],)  # every job, in the run's own schema
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_script_ab_smoke(tmp_path: Path) -> None:
    """A tree against itself: every row measured, ratios near 1 (not asserted: noise)."""
    stdout, result = bench(tmp_path, "script_ab", "--a", str(ROOT), "--b", str(ROOT),
                           "--rounds", "1", "--jobs", "128", "--batch", "64")
    assert stdout.startswith("script_ab (us per entry")
    assert set(result["rows"]) == {"claim", "complete", "promote", "claim0", "complete0",
                                   "submit", "submit_delayed", "submit1", "submit_keyed",
                                   "take", "complete_keyed"}
    assert all(row["A"] > 0 and row["B"] > 0 for row in result["rows"].values())


def test_queue_names_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "queue_names", "--names", "60", "--busy", "3",
                           "--runs", "1")
    assert stdout.startswith("queue_names: 60 names, 3 holding work, 2 shards: sched status ")
    assert "(57 lanes dropped, 3 queues listed)" in stdout and result["ok"]


def test_processes_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "processes", "--jobs", "30000", "--runs", "1")
    assert stdout.startswith("processes: 30000 no-op jobs x1: plain worker ")
    assert set(result["median"]) == {"plain", "processes_1", "processes_2"}
    assert all(rate > 0 for rate in result["median"].values())


def test_ab_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "ab", "--a", str(ROOT), "--pairs", "2", "--",
                           "burndown", "--jobs", "300", "--runs", "1")
    assert stdout.startswith("ab (2 pairs of `burndown --jobs 300 --runs 1`), B/A median")
    assert "median_per_s " in stdout and len(result["pairs"]) == 2
    assert result["medians"]["jobs"] == 1.0 and len(result["ratios"]["median_per_s"]) == 2


@pytest.mark.parametrize(("args", "says"), [
    ((), "give the bench command to compare after --"),
    (("--", "ab"), "give the bench command to compare after --"),
    (("--b", "/", "--", "burndown"), "is not a source tree of this project"),
])
def test_ab_refuses_bad_input_in_one_line(args: tuple[str, ...], says: str) -> None:
    out = subprocess.run([sys.executable, "-m", "bench", "ab", "--a", str(ROOT), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [
        line for line in out.stderr.strip().splitlines() if says in line], out.stderr


def test_fairness_smoke(tmp_path: Path) -> None:
    # One shard: plain mode is one stream, read in order (with more, each shard's stream is
    # its own FIFO and the worker's loops over them run at their own pace).
    stdout, result = bench(tmp_path, "fairness", "--flood", "2000", "--few", "20", "--runs", "1",
                           "--shards", "1")
    assert stdout.startswith("fairness: A 2,000 jobs, then B 20 (one worker, x1, medians): ")
    keyed, plain = result["figures"]["keyed"], result["figures"]["plain"]
    # FIFO: B waits behind A's flood. Every A is read before B's last, so an A that starts
    # after it was in another claim pipeline's round trip, one that went slower than the
    # claims of B's: that round trip carries its share of the run slots and the next read
    # it prefetches (up to a batch), whose entries join the backlog when its reply is handled.
    config = WorkerConfig()
    share = min(config.batch, -(-config.concurrency // config.pipelines))
    late = (config.pipelines - 1) * (share + config.batch)
    assert plain["a_before_last_b"] >= 2000 - late
    assert keyed["a_while_b_waited"] <= 40  # turns: about one of A's for each of B's


def test_burndown_keyed_smoke(tmp_path: Path) -> None:
    stdout, result = bench(tmp_path, "burndown", "--jobs", "300", "--runs", "1", "--keys", "5",
                           "--per-key", "2")
    assert stdout.startswith("burndown --keys 5 --per-key 2 (concurrency 100, batch 500, 2 "
                             "pipelines): 300 jobs x1:")
    assert "exactly once: yes" in stdout and result["runs"][0]["committed"] == 300


def test_retention_soak_short(tmp_path: Path) -> None:
    """The soak, short: real `sched worker` and `sched scheduler` processes, no snapshotter,
    --retention 5s. Redis memory is flat once the window is full, result() reads a job that
    finished within it and raises ResultExpired for one past it."""
    stdout, result = bench(tmp_path, "retention-soak", "--rate", "200", "--seconds", "25",
                           "--retention", "5")
    assert stdout.startswith("retention-soak: ") and "(flat)" in stdout, stdout
    assert result["ok"] and abs(result["ratio"] - 1) <= 0.10
    checks = result["checks"]
    assert checks["within"] > 0 and checks["within_failed"] == 0
    assert checks["after"] > 0 and checks["after_failed"] == 0
    # At most a window's worth (and the expirer's pass) of finished jobs is kept.
    assert result["finished_kept"] <= 200 * (5 + 2)
