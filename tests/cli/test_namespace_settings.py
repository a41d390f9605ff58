"""`sched namespace set` / `show`: the namespace's retention settings, read and changed from
the CLI; a bad value is one line, exit 1, and nothing written."""

from __future__ import annotations

import json

import pytest
import redis

from helpers import sched
from scheduler.core.keys import Keys
from scheduler.core.namespace import RETENTION_FIELDS


def test_set_then_show(capsys: pytest.CaptureFixture[str], redis_url: str, ns: str) -> None:
    code, out, _ = sched(capsys, redis_url, ns, "namespace", "show", "--json")
    assert code == 0 and json.loads(out) == {"namespace": ns, "retention_s": 3600.0,
                                             "retain_max": 500_000,
                                             "dead_retention_s": 604800.0,
                                             "strict_tasks": False}
    code, out, _ = sched(capsys, redis_url, ns, "namespace", "set", "--retention", "1h",
                         "--retain-max", "100000")
    assert code == 0 and "3600 s or the last 100,000 finished slots" in out
    code, out, _ = sched(capsys, redis_url, ns, "namespace", "set", "--dead-retention", "14d")
    assert code == 0
    code, out, _ = sched(capsys, redis_url, ns, "namespace", "show", "--json")
    shown = json.loads(out)
    assert (shown["retention_s"], shown["retain_max"], shown["dead_retention_s"]) == (
        3600.0, 100_000, 14 * 86400.0)


@pytest.mark.parametrize("args, problem, exit_code", [
    (("--retention", "abc"), "retention must be a duration such as 90s, 15m, 1h or 7d", 1),
    (("--retention", "0.5"), "retention must be between 1 s and 366 days", 1),
    (("--dead-retention", "400d"), "dead_retention must be between 1 s and 366 days", 1),
    (("--retain-max", "0"), "'--retain-max': 0 is not in the range 1<=x<=1000000000", 2),
])
def test_a_bad_value_is_one_line_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], r: redis.Redis, redis_url: str, ns: str,
        args: tuple[str, ...], problem: str, exit_code: int) -> None:
    code, out, err = sched(capsys, redis_url, ns, "namespace", "set", *args)
    assert code == exit_code and out == ""
    assert len(err.strip().splitlines()) == 1 and problem in err and "Traceback" not in err
    assert r.hmget(Keys(ns).meta, *RETENTION_FIELDS) == [None] * len(RETENTION_FIELDS)


def test_set_without_an_option_is_a_usage_error(capsys: pytest.CaptureFixture[str],
                                                redis_url: str, ns: str) -> None:
    code, _, err = sched(capsys, redis_url, ns, "namespace", "set")
    assert code == 2 and "give at least one of --retention" in err and "--strict-tasks" in err


def test_a_change_writes_only_the_settings_given(capsys: pytest.CaptureFixture[str],
                                                 r: redis.Redis, redis_url: str,
                                                 ns: str) -> None:
    """So two operators changing different settings at once both get theirs."""
    code, _, _ = sched(capsys, redis_url, ns, "namespace", "set", "--retain-max", "5")
    assert code == 0
    assert r.hmget(Keys(ns).meta, *RETENTION_FIELDS) == [None, b"5", None]
