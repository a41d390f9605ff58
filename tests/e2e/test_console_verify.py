"""The console's Verify page, read from a live `sched web` process over the real Redis: the
last `sched verify` runs of the namespace, newest first, each with its verdict and every
invariant's figure; the list keeps the last 20; an empty list says what would fill it; an
entry that is not a run's summary (written by hand, or hostile) is left out and escaped text
stays text: never a 500. The browser test (slow) walks to the page from the nav."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import redis
from test_console import SHOTS, open_from_nav

from helpers import http_get, running, serve_console
from scheduler import Client
from scheduler.core.canary import RUNS_KEPT, Check, VerifyRun, encode_run
from scheduler.core.errors import ValidationError
from scheduler.testing.verify import record

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def web(redis_url: str, ns: str) -> Iterator[str]:
    proc, base = serve_console(redis_url, ns)
    with running(proc):
        yield base


def summary(run: str, started_ms: int, exit_code: int = 0, **fields: object) -> VerifyRun:
    checks = (Check("ran", True, "240 of 240 canary slots succeeded"),
              Check("retry", exit_code != 1, "24 canaries failed their first attempt"))
    return VerifyRun(run=run, started_ms=started_ms, took_ms=6400, exit_code=exit_code,
                     slots=240, checks=() if exit_code == 2 else checks, **fields)  # type: ignore[arg-type]


def test_the_verify_page_lists_the_last_runs_and_answers_hostile_entries(
        redis_url: str, ns: str, r: redis.Redis, web: str) -> None:
    status, body = http_get(f"{web}/verify")
    assert status == 200 and "no verify run yet: `sched verify" in body.replace(
        "<code>", "`").replace("</code>", "`"), body[-2000:]
    with Client(redis_url, ns) as client:
        for i in range(RUNS_KEPT + 5):
            record(client, summary(f"run{i:08d}", 1_800_000_000_000 + i))
        record(client, summary("failedrun001", 1_800_000_001_000, 1))
        record(client, summary("cannotrun001", 1_800_000_002_000, 2, chaos=True, seed=7,
                               reason="no worker started a canary on queue 'default'"))
        key = client.keys.verify_runs()
        assert r.llen(key) == RUNS_KEPT  # capped: the one key a run leaves stays small
        runs = client.verify_runs()
        assert [x.run for x in runs[:3]] == ["cannotrun001", "failedrun001", "run00000024"]
        assert len(runs) == RUNS_KEPT and len(client.verify_runs(3)) == 3
        for bad in (0, RUNS_KEPT + 1, "5"):
            with pytest.raises(ValidationError, match="limit"):
                client.verify_runs(bad)  # type: ignore[arg-type]
    status, body = http_get(f"{web}/verify")
    assert status == 200
    assert "exit 2: could not run" in body and "--chaos seed 7" in body
    assert "no worker started a canary on queue" in body
    assert "failedrun001" in body and "exit 1: FAILED: retry" in body, body[-3000:]
    assert "exit 0: every invariant holds" in body
    assert body.index("cannotrun001") < body.index("failedrun001") < body.index("run00000024")
    # Entries that are no run's summary, and one whose every text is hostile.
    r.lpush(key, b"not json", b"\xff\xfe", msgspec.json.encode({"run": 5}))
    r.lpush(key, encode_run(summary(HOSTILE, 1_800_000_003_000, 1, reason=HOSTILE)))
    for path in ("/verify", "/verify?limit=-1&x=%00", f"/verify?{HOSTILE}"):
        status, body = http_get(f"{web}{path}")
        assert status == 200, (path, body[-2000:])
        assert HOSTILE not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    r.delete(key)
    r.set(key, b"a string, not a list")
    status, body = http_get(f"{web}/verify")
    assert status != 500 and "Traceback" not in body, body[-2000:]


@pytest.mark.slow
def test_the_verify_page_in_a_browser(redis_url: str, ns: str, web: str,
                                      tmp_path: Path) -> None:
    """From the nav to the Verify page: a heading row per run with its verdict, its
    invariants under it, the failed one marked; a screenshot (SCHED_UPDATE_SCREENSHOTS=1
    writes the docs')."""
    from playwright.sync_api import sync_playwright

    with Client(redis_url, ns) as client:
        record(client, summary("passedrun001", 1_800_000_000_000))
        record(client, summary("failedrun001", 1_800_000_060_000, 1))
    with sync_playwright() as p:
        browser, page = open_from_nav(p, web, "/verify", "Verify runs", height=600)
        headings = page.locator("#rows tr.group th").all_inner_texts()
        assert len(headings) == 2 and "failedrun001" in headings[0], headings
        assert headings[0].endswith("exit 1: FAILED: retry"), headings
        assert headings[1].endswith("exit 0: every invariant holds"), headings
        cells = [row.locator("td").all_inner_texts()
                 for row in page.locator("#rows tr.child").all()]
        assert cells[:2] == [["ok", "ran", "240 of 240 canary slots succeeded"],
                             ["FAIL", "retry", "24 canaries failed their first attempt"]]
        assert cells[3] == ["ok", "retry", "24 canaries failed their first attempt"]
        page.screenshot(path=str(tmp_path / "verify.png"), full_page=True)
        assert page.locator("text=Traceback").count() == 0
        browser.close()
    if os.environ.get("SCHED_UPDATE_SCREENSHOTS"):
        SHOTS.mkdir(exist_ok=True)
        shutil.copy(tmp_path / "verify.png", SHOTS / "console-verify.png")
