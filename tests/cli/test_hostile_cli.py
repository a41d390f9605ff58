"""Bad input to `sched`, as a user (or a script gone wrong) types it: one line naming the
problem, a non-zero exit, no traceback, nothing started and nothing written."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import redis

from conftest import SCHED, ns_keys
from helpers import http_get, running, sched, serve_console
from scheduler import Client
from scheduler.cli.main import cli as sched_cli
from scheduler.cli.options import Finite
from scheduler.core.keys import shard_of
from scheduler.scripts import calls as scripts


def one_line(code: int, err: str, expected: int = 1) -> str:
    assert code == expected, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# --- --payload @file ----------------------------------------------------------------------


def _files(tmp: Path) -> dict[str, tuple[str, str]]:
    """name: (--payload value, what the error says)."""
    (tmp / "latin1.json").write_bytes('{"name": "Zo\xeb"}'.encode("latin-1"))
    (tmp / "deep-list.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp / "deep-dict.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    (tmp / "deep-but-decodable.json").write_text('{"a":' * 100 + "1" + "}" * 100)
    (tmp / "not-json.json").write_text("{name: 1}")
    return {
        "invalid UTF-8": (f"@{tmp}/latin1.json", "latin1.json is not UTF-8 text (byte 0xeb "
                                                 "at offset 12)"),
        "too deep (lists)": (f"@{tmp}/deep-list.json", "nested too deep"),
        "too deep (objects)": (f"@{tmp}/deep-dict.json", "nested too deep"),
        "deeper than the bound": (f"@{tmp}/deep-but-decodable.json", "deeper than 64 levels"),
        "not JSON": (f"@{tmp}/not-json.json", "not-json.json does not hold valid JSON"),
        "a missing file": (f"@{tmp}/nothing-here.json", "No such file or directory"),
        "a directory": (f"@{tmp}", "Is a directory"),
    }


@pytest.mark.parametrize("case", ["invalid UTF-8", "too deep (lists)", "too deep (objects)",
                                  "deeper than the bound", "not JSON", "a missing file",
                                  "a directory"])
def test_a_payload_file_that_cannot_be_used_is_one_line(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        tmp_path: Path, case: str) -> None:
    """Invalid UTF-8 and a deep file were tracebacks (UnicodeDecodeError, RecursionError)."""
    value, text = _files(tmp_path)[case]
    code, _, err = sched(capsys, redis_url, ns, "submit", "t", "--payload", value)
    assert text in one_line(code, err), err
    assert ns_keys(r, ns) == []


def test_a_payload_file_in_utf8_with_a_byte_order_mark_is_read(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str, tmp_path: Path) -> None:
    (tmp_path / "p.json").write_bytes('\ufeff{"name": "Zoë"}'.encode())
    code, out, err = sched(capsys, redis_url, ns, "submit", "t", "--payload", f"@{tmp_path}/p.json")
    assert code == 0, err
    with Client(redis_url, ns) as client:
        assert client.get_job(out.strip()).payload == {"name": "Zoë"}


def test_a_payload_argument_that_is_not_utf8_is_one_line(
        r: redis.Redis, redis_url: str, ns: str) -> None:
    done = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, "submit", "t",
                           "--payload", b'"\xff"'], capture_output=True, text=True, timeout=60)
    assert "payload: is not UTF-8 text" in one_line(done.returncode, done.stderr)
    assert ns_keys(r, ns) == []


def test_a_duration_too_long_for_a_float_is_one_line(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str) -> None:
    code, _, err = sched(capsys, redis_url, ns, "submit", "t", "--delay", "9" * 400)
    assert "is not a duration" in one_line(code, err)
    assert ns_keys(r, ns) == []


# --- numbers ------------------------------------------------------------------------------


def _number_options() -> Iterator[tuple[list[str], click.Option]]:
    """Every option of every command that takes a number with a fraction."""
    def walk(command: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Option]]:
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, click.types.FloatParamType):
                yield path, param
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])

    yield from walk(sched_cli, [])


NUMBER_OPTIONS = [(" ".join(path), param.opts[0]) for path, param in _number_options()]


def test_every_number_option_is_finite() -> None:
    """One type for every float option (cli/options.py), so none takes NaN or infinity."""
    assert len(NUMBER_OPTIONS) >= 20
    plain = [f"{' '.join(path)} {p.opts[0]}" for path, p in _number_options()
             if not isinstance(p.type, Finite)]
    assert not plain


@pytest.mark.parametrize("command, option", NUMBER_OPTIONS)
def test_every_number_option_refuses_nan_and_infinity(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        command: str, option: str) -> None:
    """`worker|scheduler --lease nan|inf` were tracebacks; `worker --grace nan` and
    `snapshotter --retention nan` started and logged tracebacks."""
    for bad in ("nan", "inf", "-inf", "NaN", "1e999"):
        code, _, err = sched(capsys, redis_url, ns, *command.split(), option, bad)
        line = one_line(code, err, expected=2)
        assert f"Invalid value for '{option}'" in line and "is not a finite number" in line
    assert ns_keys(r, ns) == []


_WORKER = ["worker", "--app", "scheduler.dev.examples.tasks:registry"]
# One case per service as a real process; the others through the entry point in this
# process, where a service that did start would hold the test past its timeout just the same.
_REAL = [[*_WORKER, "--lease", "1e20"], ["scheduler", "--lookahead", "1e308"],
         ["snapshotter", "--retention", "nan"]]


@pytest.mark.parametrize("args", [
    [*_WORKER, "--lease", "nan"],
    [*_WORKER, "--lease", "inf"],
    [*_WORKER, "--grace", "nan"],
    ["scheduler", "--lease", "inf"],
    ["snapshotter", "--retention", "nan"],
    [*_WORKER, "--lease", "1e20"],
    ["scheduler", "--lookahead", "1e308"],
    ["scheduler", "--queue-idle", "1e308"],
], ids=" ".join)
def test_a_service_given_nan_never_starts(capsys: pytest.CaptureFixture[str], r: redis.Redis,
                                          redis_url: str, ns: str, args: list[str],
                                          tmp_path: Path) -> None:
    """They exit at once with one line, and register nothing (a lease of 1e20 s started a
    worker whose every heartbeat failed)."""
    start = time.monotonic()
    store = ["--history-file", str(tmp_path / "h.sqlite3")] if args[0] == "snapshotter" else []
    if args in _REAL:
        done = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, *args,
                               *store], capture_output=True, text=True, timeout=60)
        code, err = done.returncode, done.stderr
    else:
        code, _, err = sched(capsys, redis_url, ns, *args, *store)
    one_line(code, err, expected=2)
    assert time.monotonic() - start < 30
    assert ns_keys(r, ns) == [] and not (tmp_path / "h.sqlite3").exists()


def test_a_lease_from_the_environment_is_checked_too(r: redis.Redis, redis_url: str,
                                                      ns: str, app_env: dict[str, str]) -> None:
    done = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, "scheduler"],
                          capture_output=True, text=True, timeout=60,
                          env={**app_env, "SCHED_LEASE_SECONDS": "nan"})
    assert "'--lease'" in one_line(done.returncode, done.stderr, expected=2)
    assert ns_keys(r, ns) == []


# --- names --------------------------------------------------------------------------------


@pytest.mark.parametrize("args, text", [
    (["submit", "bad\x1b[2Jtask"], "task: 'bad\\x1b[2Jtask' holds the control character "
                                   "U+001B (ESC); a task name is 1-200 printable characters"),
    (["submit", "two\nlines"], "holds the control character U+000A (newline)"),
    (["submit", "t", "--queue", "mail\n"], "queue: 'mail\\n' is not allowed: it holds the "
                                           "control character U+000A (newline); use 1-64 "
                                           "characters from A-Z a-z 0-9 _ . -"),
    (["queues", "limit", "mail\x1b", "--concurrency", "2"], "U+001B (ESC)"),
    (["worker", "--app", "scheduler.dev.examples.tasks:registry", "--queues", "a\x9bb"],
     "U+009B"),
])
def test_names_with_control_characters_are_one_line(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        args: list[str], text: str) -> None:
    """ESC or a newline in a task name reached terminals and log lines as they were; the
    error shows the name escaped, never the raw character."""
    code, _, err = sched(capsys, redis_url, ns, *args)
    line = one_line(code, err)
    assert text in line and "\x1b" not in err and "\x9b" not in err
    assert ns_keys(r, ns) == []


# --- dedupe keys and reasons ----------------------------------------------------------------


@pytest.mark.parametrize("args, text", [
    (["submit", "t", "--dedupe-key", "k\x1b[2J"],
     "dedupe_key: 'k\\x1b[2J' holds the control character U+001B (ESC)"),
    (["cancel", "JOB", "--reason", "stop\x1b]0;owned\x07"], "reason: 'stop\\x1b]0;owned\\x07' "
                                                         "holds the control character U+001B"),
    (["jobs", "delete", "SERIES", "--reason", "gone\nforged: line"], "U+000A (newline)"),
    (["cancel", "JOB", "--reason", "x" * 5000], "reason: is 5,000 characters long; give at "
                                                "most 1,000"),
    (["jobs", "delete", "SERIES", "--reason", "x" * 1001], "give at most 1,000"),
], ids=["dedupe key with ESC", "cancel reason with OSC", "delete reason with a newline",
        "cancel reason too long", "delete reason too long"])
def test_a_dedupe_key_or_reason_with_control_characters_or_too_long_is_one_line(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        args: list[str], text: str) -> None:
    """Terminal escapes in a dedupe key or a cancel/delete reason were stored, and printed
    raw by `sched jobs show`; a reason of any length was stored on every slot it ended."""
    with Client(redis_url, ns) as client:
        ids = {"JOB": client.submit("t", None, delay=600),
               "SERIES": client.submit("t", None, cron="0 3 * * *")}
    before = {k: r.dump(k) for k in ns_keys(r, ns)}
    code, _, err = sched(capsys, redis_url, ns, *[ids.get(a, a) for a in args])
    line = one_line(code, err)
    assert text in line and "\x1b" not in err and "\x07" not in err and "\n" not in line
    assert {k: r.dump(k) for k in ns_keys(r, ns)} == before


def test_sched_jobs_show_prints_no_control_character_it_read(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str) -> None:
    """What was stored before the SDK refused it, or by another writer, reaches no terminal
    through `sched jobs show`: the dedupe key, the delete reason and the task name were
    printed as they were read."""
    with Client(redis_url, ns) as client:
        job_id = client.submit("t", None, cron="0 3 * * *", dedupe_key="k")
        client.delete_job(job_id, reason="r")
        key = client.keys.job(shard_of(job_id, client.shards), job_id)
    r.hset(key, mapping={"dedupe_key": "k\x1b[2J\x1b[H", "deleted": "r\x1b]0;owned\x07",
                         "task": "t\x9b31m\nforged: line"})
    code, out, err = sched(capsys, redis_url, ns, "jobs", "show", job_id)
    assert code == 0, err
    assert not any(c in out for c in "\x1b\x07\x9b"), out
    assert "dedupe key: k\ufffd[2J\ufffd[H" in out
    assert "(r\ufffd]0;owned\ufffd)" in out
    assert "task:       t\ufffd31m\ufffdforged: line" in out


def test_sched_status_prints_no_control_character_it_read(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str) -> None:
    """A shard owner's node id is whatever its lease key holds: `sched status` printed it
    to the terminal as read."""
    with Client(redis_url, ns) as client:
        client.submit("t", None)
        owner = client.keys.owner(0)
    r.set(owner, "1:node\x1b]0;owned\x07\x1b[2J", px=60_000)
    code, out, err = sched(capsys, redis_url, ns, "status")
    assert code == 3 and "Traceback" not in err, err  # unhealthy: no worker
    assert not any(c in out for c in "\x1b\x07"), out
    assert "(node\ufffd]0;owned\ufffd\ufffd[2J)" in out, out


# --- what got past the SDK ----------------------------------------------------------------


@pytest.fixture
def deep_job(r: redis.Redis, redis_url: str, ns: str) -> Iterator[str]:
    """A delayed job and a cron job whose payloads nest 10,000 objects deep, and a cron job
    whose expression and zone do not parse (submit.lua checks neither), written straight
    through submit.lua, beside one made by the SDK; the delayed one's id."""
    with Client(redis_url, ns) as client:
        client.submit("t.fine", {"n": 1}, delay=3600)
        shards = client.shards
        prefixes = [client.keys.prefix(shard_of(j, shards))
                    for j in ("deep-one", "deep-cron", "bad-cron")]
    later = int(time.time() * 1000) + 3_600_000
    payload = '{"a":' * 10_000 + "1" + "}" * 10_000
    for prefix, job_id, fields in (
            (prefixes[0], "deep-one", ["payload", payload, "kind", "delayed", "delay_ms",
                                       3_600_000]),
            (prefixes[1], "deep-cron", ["payload", payload, "kind", "cron", "cron",
                                        "0 3 * * *"]),
            (prefixes[2], "bad-cron", ["kind", "cron", "cron", "every day", "tz", "Mars/X"])):
        scripts.run_sync(r, [scripts.submit(prefix, int(time.time() * 1000), 1000, [
            (job_id, "t.deep", "default", later, fields)])])
    yield "deep-one"


def test_sched_jobs_list_shows_a_job_whose_payload_does_not_decode(
        capsys: pytest.CaptureFixture[str], redis_url: str, ns: str, deep_job: str) -> None:
    """One such job made `sched jobs list` fail with a RecursionError."""
    code, out, err = sched(capsys, redis_url, ns, "jobs", "list")
    assert code == 0, err
    assert deep_job in out and "t.fine" in out and "bad-cron" in out
    code, out, err = sched(capsys, redis_url, ns, "jobs", "show", "bad-cron")
    assert code == 0 and "next fire:  -" in out, err
    code, out, err = sched(capsys, redis_url, ns, "jobs", "list", "--json")
    assert code == 0 and "nested deeper than 64 levels" in out, err
    code, out, err = sched(capsys, redis_url, ns, "jobs", "show", deep_job)
    assert code == 0 and "(not shown: 60001 bytes of JSON nested deeper than 64 levels)" in out


@pytest.mark.slow  # a real long-running `sched` process
def test_the_console_shows_a_job_whose_payload_does_not_decode(
        redis_url: str, ns: str, deep_job: str) -> None:
    """/jobs and /schedules failed with such a job; a real `sched web` serves both, and the
    job's own page, with the placeholder."""
    proc, base = serve_console(redis_url, ns)
    with running(proc):
        for path, shown in (("/jobs", deep_job), ("/schedules", "deep-cron"),
                            ("/schedules", "bad-cron"), ("/jobs/bad-cron", "every day")):
            status, page = http_get(base + path)
            assert status == 200 and shown in page, path
        status, page = http_get(f"{base}/jobs/{deep_job}")
        assert status == 200 and "nested deeper than 64 levels" in page
