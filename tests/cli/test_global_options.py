"""`--redis-url` and `--namespace` before the command or after it, on every command: the same
environment variables and defaults, the one after the command winning."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import click
import pytest
import redis

from conftest import SCHED
from scheduler import Client, SlotStatus
from scheduler.cli.main import cli, main

BAD = "b{ad"  # a namespace the SDK refuses (scheduler/core/keys.py check_name), naming it
REFUSED = f"namespace: '{BAD}' is not allowed"
# What each command needs to get as far as opening the SDK.
NEEDS = {"app_spec": ["--app", "app_tasks:registry"], "dlq purge": ["--all", "--yes"],
         "queues limit": ["--concurrency", "1"], "namespace set": ["--retention", "1h"]}
# The history schema is the store's, shared by every namespace: no namespace to reach.
NO_NAMESPACE = {"db upgrade"}


def commands(cmd: click.Command = cli, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], click.Command]]:
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from commands(sub, (*path, name))
    else:
        yield path, cmd


def args_for(path: tuple[str, ...], cmd: click.Command) -> list[str]:
    args = [*path, *NEEDS.get(" ".join(path), [])]
    for p in cmd.params:
        if p.required:
            args += NEEDS[p.name] if isinstance(p, click.Option) else ["x"]
    return args


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


ALL = [" ".join(path) for path, _ in commands()]


@pytest.mark.parametrize("name", ALL)
def test_namespace_after_the_command_reaches_the_sdk(
        name: str, capsys: pytest.CaptureFixture[str], redis_url: str) -> None:
    [(path, cmd)] = [(p, c) for p, c in commands() if " ".join(p) == name]
    argv = ["--redis-url", redis_url, *args_for(path, cmd), "--namespace", BAD]
    code, out, err = run(capsys, *argv)
    if name in NO_NAMESPACE:
        assert code == 0, err
        return
    assert (code, err.strip().splitlines()) == (1, [f"error: {REFUSED}; use 1-64 characters "
                                                    f"from A-Z a-z 0-9 _ . -"]), (argv, out)


def test_every_command_shows_both_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    for path, _ in [((), cli), *commands()]:
        code, out, _ = run(capsys, *path, "--help")
        assert code == 0 and "--redis-url" in out and "--namespace" in out, path
        assert "SCHED_REDIS_URL" in out and "SCHED_NAMESPACE" in out, path


def test_the_one_after_the_command_wins(capsys: pytest.CaptureFixture[str], redis_url: str,
                                        ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(capsys, "--redis-url", redis_url, "--namespace", ns, "status",
                       "--namespace", BAD)
    assert code == 1 and REFUSED in err
    code, out, _ = run(capsys, "--redis-url", redis_url, "--namespace", BAD, "jobs", "list",
                       "--namespace", ns)
    assert code == 0, out
    monkeypatch.setenv("SCHED_NAMESPACE", BAD)  # the environment is a default, as before
    code, out, _ = run(capsys, "--redis-url", redis_url, "status", "--namespace", ns, "--json")
    assert code == 3 and f'"namespace":"{ns}"' in out  # 3: no worker alive
    code, _, err = run(capsys, "--redis-url", redis_url, "status")
    assert code == 1 and REFUSED in err
    monkeypatch.delenv("SCHED_NAMESPACE")
    monkeypatch.setenv("SCHED_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    code, _, err = run(capsys, "status", "--redis-url", redis_url, "--namespace", ns)
    assert code == 3, err
    code, _, err = run(capsys, "status", "--namespace", ns)
    assert code == 1 and "127.0.0.1:1" in err
    code, _, err = run(capsys, "status", "--namespace", ns, "--redis-url",
                       "redis://127.0.0.1:2/0")
    assert code == 1 and "127.0.0.1:2" in err


@pytest.mark.slow  # a real long-running `sched` process
def test_a_worker_process_given_both_after_its_command(redis_url: str, ns: str,
                                                      app_env: dict[str, str]) -> None:
    """`sched worker --app m:r --redis-url URL --namespace NS` runs the jobs of NS there (the
    environment names a Redis where nothing listens: the flags win)."""
    r = redis.Redis.from_url(redis_url)
    effects = f"{ns}:effects"
    proc = subprocess.Popen([*SCHED, "worker", "--app", "app_tasks:registry", "--redis-url",
                             redis_url, "--namespace", ns, "--log-level", "warning"],
                            env={**app_env, "SCHED_REDIS_URL": "redis://127.0.0.1:1/0",
                                 "SCHED_TEST_REDIS_URL_APP": redis_url},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        with Client(redis_url, ns) as client:
            job = client.submit("test.effect", {"effects": effects})
            slot = client.result(job, timeout=30)
            assert slot is None and client.slots(job)[0].status is SlotStatus.SUCCEEDED
        assert r.hlen(effects) == 1
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
        r.close()
    assert proc.returncode == 0, out.decode()
