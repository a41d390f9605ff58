"""`sched history`, `sched runs` falling back to history, `sched db upgrade`, and the one-line
errors of the history commands."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import drain, run_until, sched
from scheduler import AsyncClient, Client, Context, Registry, Slot, ValidationError
from scheduler.history.snapshotter import SnapshotterConfig


def test_history_and_runs_read_the_store(redis_url: str, ns: str, r: redis.Redis,
                                         tmp_path: Path, capsys: Any) -> None:
    registry = Registry()
    ran: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran.append(ctx.slot_id)

    file = str(tmp_path / "h.db")
    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "t"} for _ in range(3)])
    asyncio.run(run_until(redis_url, ns, registry, lambda: len(ran) == 3))
    asyncio.run(drain(redis_url, ns, f"sqlite://{file}",
                      config=SnapshotterConfig(retention_s=None)))
    code, out, _ = sched(capsys, redis_url, ns, "history", "--history-file", file, "--json")
    assert code == 0 and {s["job_id"] for s in json.loads(out)} == set(ids)
    code, out, _ = sched(capsys, redis_url, ns, "history", "--history-file", file,
                         "--status", "succeeded", "--job", ids[0])
    assert code == 0 and ids[0] in out and ids[1] not in out and "succeeded" in out
    for key in r.scan_iter(match=f"{ns}:*:{ids[0]}*", count=10_000):  # as retention would
        r.delete(key)
    code, out, _ = sched(capsys, redis_url, ns, "runs", ids[0], "--history-file", file, "--json")
    assert code == 0 and json.loads(out)[0]["status"] == "succeeded"
    code, _, err = sched(capsys, redis_url, ns, "runs", "nosuchjob", "--history-file", file)
    assert code == 1 and err.startswith("error: no job 'nosuchjob'")


def test_the_async_client_reads_history_and_runs_too(redis_url: str, ns: str, r: redis.Redis,
                                                     tmp_path: Path) -> None:
    registry = Registry()
    ran: list[str] = []

    @registry.task("t")
    async def t(ctx: Context, payload: Any) -> None:
        ran.append(ctx.slot_id)

    file = f"sqlite://{tmp_path / 'h.db'}"
    with Client(redis_url, ns) as client:
        ids = client.submit_many([{"task": "t"} for _ in range(3)])
    asyncio.run(run_until(redis_url, ns, registry, lambda: len(ran) == 3))
    asyncio.run(drain(redis_url, ns, file, config=SnapshotterConfig(retention_s=None)))
    for key in r.scan_iter(match=f"{ns}:*:{ids[0]}*", count=10_000):  # as retention would
        r.delete(key)

    async def read() -> tuple[list[Slot], list[Slot], list[Slot]]:
        async with AsyncClient(redis_url, ns, history=file) as client:
            everything = await client.history(status="succeeded")
            with pytest.raises(ValidationError):
                await client.history(status="finished")
            return everything, await client.runs(ids[0]), await client.runs(ids[1])

    everything, gone, live = asyncio.run(read())
    assert {s.job_id for s in everything} == set(ids)
    assert [(s.job_id, s.status.value) for s in gone] == [(ids[0], "succeeded")]
    assert [(s.job_id, s.status.value) for s in live] == [(ids[1], "succeeded")]


def test_db_upgrade_is_idempotent(pg_dsn: str, redis_url: str, ns: str, capsys: Any) -> None:
    for _ in range(2):
        code, out, _ = sched(capsys, redis_url, ns, "db", "upgrade", "--postgres-dsn", pg_dsn)
        assert code == 0 and out.strip() == "history schema at version 4 (postgres)"


def test_history_errors_are_one_line(redis_url: str, ns: str, tmp_path: Path,
                                     capsys: Any) -> None:
    file = str(tmp_path / "h.db")
    for args, start, exit_code in [
            (["--status", "nope"], "error: Invalid value for '--status': 'nope' is not one of "
                                   "'scheduled'", 2),
            (["--since", "yesterday"], "error: since: 'yesterday'", 1),
            (["--postgres-dsn", "postgresql://x@127.0.0.1:1/n?connect_timeout=1"],
             "error: cannot reach Postgres", 1)]:
        code, _, err = sched(capsys, redis_url, ns, "history", "--history-file", file, *args)
        assert code == exit_code and err.startswith(start) and err.count("\n") == 1, err


def test_read_only_commands_create_no_history_file_and_a_dsn_must_be_postgres(
        redis_url: str, ns: str, tmp_path: Path, capsys: Any) -> None:
    file = tmp_path / "never.sqlite3"
    code, _, err = sched(capsys, redis_url, ns, "history", "--history-file", str(file))
    assert code == 1 and "no history file at" in err and err.count("\n") == 1
    assert not file.exists()
    code, _, err = sched(capsys, redis_url, ns, "runs", "some-job", "--history-file",
                         str(file))
    assert code == 1 and not file.exists()
    code, _, err = sched(capsys, redis_url, ns, "history", "--postgres-dsn", "garbage")
    assert code == 1 and "is not a Postgres DSN" in err
    assert not (Path.cwd() / "garbage").exists()
