"""`sched` as a user drives it: bad input is one line, an exit code, and nothing written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import redis

from conftest import SCHED, ns_keys
from helpers import sched


@pytest.mark.parametrize(("args", "message"), [
    (["--payload", "{not json"], "error: payload: is not valid JSON"),
    (["--delivery", "twice"], "error: Invalid value for '--delivery': 'twice' is not one of "
                              "'at_least_once', 'at_most_once', 'exactly_once'."),
    (["--cron", "* * * * *", "--catchup", "most"], "error: Invalid value for '--catchup'"),
    (["--cron", "* * * * *", "--overlap", "never"], "error: Invalid value for '--overlap'"),
    (["--timeout", "-5"], "error: timeout: -5.0 is not allowed; must be a number of seconds > 0 "
                          "and at most 31,536,000 (a year)"),
    (["--timeout", "soon"], "error: timeout: 'soon' is not a duration"),
    (["--max-attempts", "0"], "error: Invalid value for '--max-attempts': 0 is not in the "
                              "range 1<=x<=1000."),
    (["--max-attempts", "100000000000000000000"], "error: Invalid value for '--max-attempts': "
                                                  "100000000000000000000 is not in the range "
                                                  "1<=x<=1000."),
    (["--delay", "1000000000000"], "error: delay: 1e+12 is not allowed; must be a number of "
                                   "seconds from 0 to 31,536,000 (a year"),
    (["--delay", "366d"], "error: delay: 3.16224e+07 is not allowed; must be a number of "
                          "seconds from 0 to 31,536,000 (a year"),
    (["--timeout", "400d"], "error: timeout: 34560000.0 is not allowed; must be a number of "
                            "seconds > 0 and at most 31,536,000 (a year)"),
    (["--queue", "a:b"], "error: queue: 'a:b' is not allowed"),
    (["--payload", "@/nonexistent/file.json"], "error: payload: cannot read /nonexistent"),
])
def test_bad_submit_input(capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str,
                          ns: str, args: list[str], message: str) -> None:
    code, out, err = sched(capsys, redis_url, ns, "submit", "demo.hello", *args)
    assert code != 0 and out == ""
    assert err.startswith(message) and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert ns_keys(r, ns) == []


def test_payload_over_the_size_limit(capsys: pytest.CaptureFixture[str], r: redis.Redis,
                                     redis_url: str, ns: str, tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"blob": "x" * (1024 * 1024)}))
    code, _, err = sched(capsys, redis_url, ns, "submit", "t", "--payload", f"@{big}")
    assert code == 1
    assert err.startswith("error: payload: is 1048587 bytes encoded, over the limit of 1048576")
    assert ns_keys(r, ns) == []


def test_unreachable_redis_is_one_line(capsys: pytest.CaptureFixture[str], ns: str) -> None:
    code, _, err = sched(capsys, "redis://127.0.0.1:1/0", ns, "submit", "t")
    assert code == 1 and err.startswith("error: cannot reach Redis") and err.count("\n") == 1
    code, _, err = sched(capsys, "mysql://x", ns, "submit", "t")
    assert code == 1 and err.startswith("error: redis url 'mysql://x'")


def test_submit_show_and_runs(capsys: pytest.CaptureFixture[str], redis_url: str,
                              ns: str) -> None:
    code, out, _ = sched(capsys, redis_url, ns, "submit", "emails.send", "--payload",
                         '{"to": "a@b.c"}', "--queue", "mail", "--timeout", "5",
                         "--max-attempts", "4", "--delivery", "at_most_once", "--json")
    assert code == 0
    created = json.loads(out)
    job_id = created["job_id"]

    code, out, _ = sched(capsys, redis_url, ns, "jobs", "show", job_id, "--json")
    shown = json.loads(out)
    assert shown["job"]["task"] == "emails.send" and shown["job"]["payload"] == {"to": "a@b.c"}
    assert shown["job"]["retry"]["max_attempts"] == 4 and shown["job"]["timeout_s"] == 5
    assert shown["slots"][0]["slot_id"] == created["slot_id"]
    assert shown["slots"][0]["status"] == "queued"

    code, out, _ = sched(capsys, redis_url, ns, "jobs", "show", job_id)
    assert "task:       emails.send" in out and "at_most_once" in out and "queued" in out

    code, out, _ = sched(capsys, redis_url, ns, "runs", job_id, "--json")
    assert [s["status"] for s in json.loads(out)] == ["queued"]
    code, out, _ = sched(capsys, redis_url, ns, "runs", job_id)
    assert created["slot_id"] in out

    code, out, err = sched(capsys, redis_url, ns, "jobs", "show", "nope")
    assert code == 1 and err.startswith("error: no job 'nope'")


def test_dedupe_key_from_the_command_line(capsys: pytest.CaptureFixture[str], redis_url: str,
                                          ns: str) -> None:
    first = sched(capsys, redis_url, ns, "submit", "t", "--dedupe-key", "k1")[1]
    second = sched(capsys, redis_url, ns, "submit", "t", "--dedupe-key", "k1")[1]
    assert first == second and len(first.strip()) == 33


def test_worker_app_errors_are_one_line(capsys: pytest.CaptureFixture[str], redis_url: str,
                                        ns: str) -> None:
    code, _, err = sched(capsys, redis_url, ns, "worker", "--app", "no_such_module:registry")
    assert code == 1 and err.startswith("error: --app 'no_such_module:registry': cannot import")
    code, _, err = sched(capsys, redis_url, ns, "worker", "--app", "json:loads")
    assert code == 1 and "is not a scheduler.Registry" in err


def test_the_console_script_runs() -> None:
    out = subprocess.run([*SCHED, "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("submit", "worker", "scheduler", "jobs", "runs"):
        assert command in out
