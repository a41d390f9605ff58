"""The web console in a real browser: Debian's chromium driven by Playwright, against a live
`sched web` process (with a token) over the real Redis, after a real worker made a succeeded
and two dead slots. Every page is opened (and screenshotted), every action performed from the
page, and its effect checked in Redis through the SDK. Then what must be refused: no token,
a forged form (no CSRF token), a read-only console, a non-loopback bind without a token.

Screenshots go to a temp dir; SCHED_UPDATE_SCREENSHOTS=1 writes the ones the docs show
into docs/img/."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from conftest import SCHED, TESTS
from helpers import run_until, running, serve_console
from scheduler import Client, Context, Registry, RetryPolicy, SlotStatus

pytestmark = pytest.mark.slow

TOKEN = "console-test-token"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = TESTS.parent / "docs" / "img"


def open_from_nav(p: Any, base: str, href: str, title: str, height: int = 800) -> Any:
    """A chromium page of the console at `base`, walked from the overview's nav to `href`,
    whose heading must be `title`: (browser, page); close the browser when done."""
    assert os.path.exists(CHROMIUM), "the browser tests need Debian's chromium (apt-get)"
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1280, "height": height})
    page.goto(f"{base}/")
    page.click(f"nav a[href='{href}']")
    assert page.locator("h1").inner_text() == title
    return browser, page


def _get(url: str, **headers: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _post(url: str, body: str, **headers: str) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body.encode(), method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


@pytest.fixture
def stack(redis_url: str, ns: str) -> Iterator[dict[str, Any]]:
    """A namespace with a succeeded slot, two dead ones, a waiting delayed job and a named
    schedule, and `sched web` serving it with a token."""
    registry = Registry()

    @registry.task("t.ok")
    async def ok(ctx: Context, payload: Any) -> None:
        pass

    @registry.task("t.bad")
    async def bad(ctx: Context, payload: Any) -> None:
        raise ValueError(f"cannot handle {payload}")

    with Client(redis_url, ns) as client:
        done = client.submit("t.ok", {"n": 1})
        dead = [client.submit("t.bad", {"n": i}, retry=RetryPolicy(max_attempts=1))
                for i in range(2)]
        asyncio.run(run_until(redis_url, ns, registry, lambda: all(
            client.slots(j)[0].status is SlotStatus.DEAD for j in dead)))
        waiting = client.submit("t.ok", {"n": 2}, delay=3600)
        nightly = client.schedule("nightly-report", "t.ok", {"kind": "daily"}, cron="0 3 * * *")
        proc, base = serve_console(redis_url, ns, "--token", TOKEN, "--sample-interval", "0.5")
        worker = subprocess.Popen([*SCHED, "--redis-url", redis_url, "--namespace", ns,
                                   "worker", "--app", "scheduler.dev.examples.tasks:registry",
                                   "--lease", "3", "--log-level", "error"], stderr=subprocess.PIPE)
        with running(worker, proc):
            yield {"client": client, "base": base, "done": done, "waiting": waiting,
                   "nightly": nightly, "dead": [client.slots(j)[0].slot_id for j in dead]}


def test_every_page_and_action_in_a_browser(stack: dict[str, Any], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), "the browser tests need Debian's chromium (apt-get)"
    base, client = stack["base"], stack["client"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        # what the Content-Security-Policy refused (Chromium reports each on the console)
        refused: list[str] = []
        page.on("console", lambda m: refused.append(m.text)
                if "Content Security Policy" in m.text else None)
        questions: list[str] = []  # the confirm() of delete and purge, answered by `answer`
        answer = {"accept": True}
        page.on("dialog", lambda d: (questions.append(d.message),
                                     d.accept() if answer["accept"] else d.dismiss()))
        page.goto(f"{base}/")
        assert page.title().startswith("Sign in")
        page.fill("input[name=token]", TOKEN)
        page.click("button[type=submit]")
        page.wait_for_selector("#verdict")
        cookie = {c["name"]: c for c in page.context.cookies()}["sched_token"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert 11 * 3600 < cookie["expires"] - time.time() <= 12 * 3600
        # htmx refreshes the health panel (every 5 s), under the policy
        with page.expect_response(lambda r: r.url.endswith("/partials/health"),
                                  timeout=10_000) as health:
            pass
        assert health.value.status == 200
        for _ in range(16):  # some load for the charts (the worker reports rates each 1 s): no-op runs, and failing ones
            client.submit_many([{"task": "demo.noop", "payload": i} for i in range(300)]
                               + [{"task": "demo.flaky", "payload": {"fail_rate": 0.3},
                                   "retry": RetryPolicy(max_attempts=1)} for _ in range(30)])
            time.sleep(0.5)
        page.wait_for_function("Number(document.body.dataset.samples) >= 16", timeout=20_000)
        assert page.locator(".charts canvas").count() >= 4  # uPlot drew, under the policy
        shots = {"overview": "/", "queues": "/queues", "jobs": "/jobs",
                 "job": f"/jobs/{stack['nightly']}", "slot": f"/slots/{stack['dead'][0]}",
                 "schedules": "/schedules", "tasks": "/tasks", "workers": "/workers",
                 "dead-letters": "/dead-letters", "history": "/history",
                 "running": "/running", "queue": "/queues/default", "scheduled": "/scheduled",
                 "recent": "/recent"}
        for name, path in shots.items():
            page.goto(base + path)
            assert page.locator("h1").inner_text(), path
            assert page.locator("text=Traceback").count() == 0, path
            page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        page.goto(f"{base}/slots/{stack['dead'][0]}")
        assert "ValueError: cannot handle" in page.content()

        # trigger now, from the job's page: one more slot of the schedule, in Redis
        before = len(client.slots(stack["nightly"]))
        page.goto(f"{base}/jobs/{stack['nightly']}")
        page.click("button[data-action='trigger now']")
        assert "triggered 1 run(s)" in page.locator("#done").inner_text()
        assert len(client.slots(stack["nightly"])) == before + 1

        # cancel the delayed job's waiting slot
        page.goto(f"{base}/jobs/{stack['waiting']}")
        page.click("button[data-action='cancel waiting slots']")
        assert "1 cancelled" in page.locator("#done").inner_text()
        assert client.slots(stack["waiting"])[0].status is SlotStatus.CANCELLED

        # replay one dead slot by selection, purge the other from its page
        page.goto(f"{base}/dead-letters")
        page.check(f"input[type=checkbox][value='{stack['dead'][0]}']")
        page.click("button[data-action='replay selected']")
        assert "replayed 1 of 1" in page.locator("#done").inner_text()
        # a new attempt of the same slot (the worker here does not know t.bad: it dies again)
        deadline = time.monotonic() + 10
        while client.get_slot(stack["dead"][0]).attempt < 2:
            assert time.monotonic() < deadline, "the replayed slot got no new attempt"
            time.sleep(0.05)
        page.goto(f"{base}/slots/{stack['dead'][1]}")
        answer["accept"] = False  # "no" to the question: nothing is purged
        page.click("button[data-action='purge']")
        assert questions[-1] == "Purge it from the DLQ?"
        assert page.locator("#done").count() == 0
        assert stack["dead"][1] in {d.slot.slot_id for d in client.dead_letters(limit=10_000)}
        answer["accept"] = True
        page.click("button[data-action='purge']")
        assert "purged 1 of 1" in page.locator("#done").inner_text()
        assert stack["dead"][1] not in {d.slot.slot_id
                                        for d in client.dead_letters(limit=10_000)}

        # delete the schedule, by selection on the schedules page
        page.goto(f"{base}/schedules")
        page.check(f"input[type=checkbox][value='{stack['nightly']}']")
        page.click("button[data-action='delete selected']")
        assert "deleted 1 schedule(s)" in page.locator("#done").inner_text()
        assert client.get_job(stack["nightly"]).deleted_ms is not None
        assert questions == ["Purge it from the DLQ?"] * 2  # no, then yes

        # sign out, from the nav: the cookie is gone, every page asks for the token again
        page.click("button[data-action='sign out']")
        assert page.title().startswith("Sign in")
        assert "sched_token" not in {c["name"] for c in page.context.cookies()}
        page.goto(f"{base}/jobs")
        assert page.title().startswith("Sign in")
        assert refused == []
        browser.close()
    if os.environ.get("SCHED_UPDATE_SCREENSHOTS"):
        SHOTS.mkdir(exist_ok=True)
        for name in ("overview", "job"):
            shutil.copy(tmp_path / f"{name}.png", SHOTS / f"console-{name}.png")


def test_a_rebinding_page_gets_nothing_from_a_console_without_token(
        stack: dict[str, Any], redis_url: str, ns: str) -> None:
    """DNS rebinding in the browser: a page of attacker.example whose name now resolves to
    127.0.0.1 reaches a console with no token under its own name, and is refused."""
    from playwright.sync_api import sync_playwright

    client = stack["client"]
    proc, base = serve_console(redis_url, ns)
    evil = f"http://attacker.example:{urlsplit(base).port}"
    with running(proc), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--host-resolver-rules=MAP attacker.example 127.0.0.1"])
        page = browser.new_page()
        response = page.goto(f"{evil}/jobs/{stack['waiting']}")
        assert response is not None and response.status == 421
        assert "loopback" in page.content() and stack["waiting"] not in page.content()
        before = len(client.slots(stack["nightly"]))
        status = page.evaluate("""async (job) => (await fetch("/actions/trigger", {
            method: "POST", body: new URLSearchParams({jobs: job})})).status""",
                               stack["nightly"])
        assert status == 421
        assert len(client.slots(stack["nightly"])) == before
        # the same browser under the loopback name: the console
        response = page.goto(f"{base}/jobs/{stack['waiting']}")
        assert response is not None and response.status == 200
        assert stack["waiting"] in page.content()
        browser.close()


def test_what_the_console_refuses(stack: dict[str, Any], redis_url: str, ns: str) -> None:
    base = stack["base"]
    code, body = _get(f"{base}/")
    assert code == 401 and "Sign in" in body
    assert _get(f"{base}/api/series")[0] == 401
    assert _get(f"{base}/jobs", Authorization=f"Bearer {TOKEN}")[0] == 200
    assert _get(f"{base}/jobs", Authorization="Bearer wrong")[0] == 401
    # a forged form: the token and the console's Origin, but no CSRF field: nothing cancelled
    code, body = _post(f"{base}/actions/cancel", f"ids={stack['waiting']}",
                       Authorization=f"Bearer {TOKEN}", Origin=base)
    assert code == 403 and "CSRF" in body
    assert stack["client"].slots(stack["waiting"])[0].status is SlotStatus.SCHEDULED
    proc, ro = serve_console(redis_url, ns, "--read-only")
    with running(proc):
        code, body = _get(f"{ro}/jobs/{stack['nightly']}")
        assert code == 200 and "read-only" in body and "data-action" not in body
        code, body = _post(f"{ro}/actions/trigger", f"jobs={stack['nightly']}", Origin=ro)
        assert code == 403 and "read-only" in body
    refused = subprocess.run([*SCHED, "--redis-url", redis_url, "--namespace", ns, "web",
                              "--host", "0.0.0.0"], capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1
    assert "without a token" in refused.stderr
