"""The console's pages, read from a live `sched web` process (started as users start it: its
default 5 s chart sampling) over the real Redis, with real workers and scheduler nodes where
a page shows their work: each page says what Redis says at the moment it is viewed; the
overview and /queues show every queue with its limit and runs; lists of queued, scheduled,
retrying and running slots page through to their end; a search by id; immediate jobs found;
empty pages say what would fill them; no query string gets a 500. The browser tests
open the console before its worker starts, and walk the new pages in chromium."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis
from test_console import CHROMIUM, SHOTS, _get, open_from_nav

from helpers import (
    garble,
    make_dead,
    run_until,
    running,
    sched_process,
    serve_console,
    until,
    workers_of,
)
from scheduler import AsyncClient, Client, Registry, RetryPolicy, SlotStatus
from scheduler.worker.worker import SupervisorRef

pytestmark = pytest.mark.slow  # real processes: `-m 'not slow'` skips them

WORKER_APP = "scheduler.dev.examples.tasks:registry"
JOB_STATES = ["active", "ended", "deleted"]
SLOT_LISTS = ["queued", "scheduled", "retrying", "running"]


class _Tables(HTMLParser):
    """A page's tables (by id; "" for one without), each a list of rows, each a list of
    (text, href) cells."""

    def __init__(self, body: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, str | None]]]] = {}
        self.current: list[list[tuple[str, str | None]]] | None = None
        self.cell: list[str] | None = None
        self.href: str | None = None
        self.feed(body)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.current = self.tables.setdefault(a.get("id") or "", [])
        elif tag == "tr" and self.current is not None:
            self.current.append([])
        elif tag in ("td", "th") and self.current is not None:
            self.cell, self.href = [], None
        elif tag == "a" and self.cell is not None:
            self.href = a.get("href")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None and self.current:
            self.current[-1].append(("".join(self.cell).strip(), self.href))
            self.cell = None
        elif tag == "table":
            self.current = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def _table(body: str, name: str) -> list[list[tuple[str, str | None]]]:
    """A table's body rows (its header row left out)."""
    return _Tables(body).tables.get(name, [])[1:]


def _texts(body: str, name: str, column: int = 0) -> list[str]:
    return [row[column][0] for row in _table(body, name) if len(row) > column]


def _wait(what: str, done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _process(redis_url: str, ns: str, *args: str) -> subprocess.Popen[bytes]:
    return sched_process(redis_url, ns, dict(os.environ), *args, "--log-level", "error")


@contextlib.contextmanager
def _runs(client: Client, redis_url: str, ns: str, queue: str, n: int) -> Iterator[list[str]]:
    """n runs of a minute in `queue`, held by a `sched worker` process until the block ends;
    their job ids."""
    ids = client.submit_many([{"task": "demo.sleep", "queue": queue,
                               "payload": {"seconds": 60}} for _ in range(n)])
    with running(_process(redis_url, ns, "worker", "--app", WORKER_APP, "--queues", queue,
                          "--grace", "0.5")):
        _wait("the runs", lambda: all(client.slots(j)[0].status is SlotStatus.RUNNING
                                      for j in ids))
        yield ids


@pytest.fixture
def web(redis_url: str, ns: str) -> Iterator[str]:
    """`sched web` as a user starts it (no token: loopback), before anything else."""
    proc, base = serve_console(redis_url, ns)
    with running(proc):
        yield base


# --- what Redis says now ----------------------------------------------------------------

def test_pages_show_what_redis_says_when_they_are_viewed(redis_url: str, ns: str,
                                                          web: str) -> None:
    """The console samples every 5 s for its charts; a page must not show that sample."""
    assert _get(f"{web}/queues")[0] == 200  # the namespace is empty yet
    with Client(redis_url, ns) as client:
        client.submit("demo.noop", queue="fresh")
        code, body = _get(f"{web}/queues")
        assert "fresh" in _texts(body, "rows"), "a queue submitted to is not on /queues"
        assert "fresh" in _texts(_get(f"{web}/")[1], "queues")
        with running(_process(redis_url, ns, "worker", "--app", WORKER_APP, "--queues",
                              "fresh")):
            _wait("the SDK to see the worker", lambda: any(w.alive for w in client.workers()))
            alive = [w.worker_id for w in client.workers() if w.alive]
            assert _texts(_get(f"{web}/workers")[1], "rows") == alive
            code, body = _get(f"{web}/")
            assert 'id="verdict">healthy' in body, body
            assert 'id="workers-alive">1<' in body


def test_the_tasks_page_lists_the_catalog_with_the_workers_serving_each_task(
        redis_url: str, ns: str, web: str) -> None:
    """/tasks is the catalog as `sched tasks` lists it: each task the worker started with,
    its defaults, the live workers serving it; linked from the nav, each task to its jobs.
    Once the worker stops, the tasks stay and no worker serves them."""
    with Client(redis_url, ns) as client:
        client.create_namespace()
        with running(_process(redis_url, ns, "worker", "--app", WORKER_APP)):
            _wait("the worker to serve its tasks",
                  lambda: any(t.workers for t in client.tasks()))
            found = client.tasks()
            code, body = _get(f"{web}/tasks")
            assert code == 200 and '<a href="/tasks"' in _get(f"{web}/")[1]
            rows = _table(body, "rows")
            assert [row[0][0] for row in rows] == [t.task for t in found]
            assert rows[0][0][1] == f"/jobs?task={found[0].task}"
            assert {row[9][0] for row in rows} == {found[0].workers[0]}  # the workers column
            assert {row[10][0] for row in rows} == {"1"}  # one version
        _wait("the worker to leave", lambda: not any(t.workers for t in client.tasks()))
        code, body = _get(f"{web}/tasks")
        rows = _table(body, "rows")
        assert code == 200 and [row[0][0] for row in rows] == [t.task for t in found]
        assert {row[9][0] for row in rows} == {"none"}


def test_the_workers_page_groups_the_children_under_their_supervisor(
        redis_url: str, ns: str, web: str) -> None:
    """The console first, then a worker on its own and two children of one supervisor (as
    `sched worker --processes 2` starts them; its id is anyone's text: escaped), then the
    first submit: /workers lists the one on its own, then a heading row for the supervisor
    (host, pid, children alive, restarts) and its children under it."""
    hostile = "<script>alert(1)</script>"
    ref = SupervisorRef(id=hostile, pid=4242, host=socket.gethostname(), index=0,
                        processes=2, restarts=0)
    refs = [None, ref, msgspec.structs.replace(ref, index=1, restarts=2)]

    async def main() -> tuple[list[Any], str]:
        async with workers_of(redis_url, ns, refs), AsyncClient(redis_url, ns) as client:
            async def registered() -> bool:  # waiting for the namespace
                return len(await client.workers()) == 3
            await until("the workers to register", registered)
            await client.submit("demo.noop")

            async def started() -> bool:
                return all(w.alive and not w.waiting for w in await client.workers())
            await until("the workers to start", started)
            return await client.workers(), (await asyncio.to_thread(_get, f"{web}/workers"))[1]

    found, body = asyncio.run(main())
    alone = next(w.worker_id for w in found if w.supervisor is None)
    children = [w.worker_id for w in sorted(found, key=lambda w: w.child or 0) if w.supervisor]
    assert _texts(body, "rows") == [
        alone, f"supervisor {hostile} on {socket.gethostname()}, pid 4242: 2/2 children alive, "
               f"2 restarts", *children]
    assert hostile not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert body.count('<tr class="child">') == 2
    garble(redis.Redis.from_url(redis_url), ns)  # the registry is anyone's to write
    code, body = _get(f"{web}/workers")
    assert code == 200 and "odd" in _texts(body, "rows")
    assert "<b>x" not in body and "&lt;b&gt;x" in body


# --- the console does what the CLI does -------------------------------------------------

def test_the_overview_and_queues_list_each_queue_with_its_limit_and_links(
        redis_url: str, ns: str, web: str) -> None:
    with Client(redis_url, ns) as client:
        client.submit_many([{"task": "demo.noop", "queue": "mail"} for _ in range(3)])
        client.submit("demo.noop", queue="mail", delay=600)
        client.set_queue_limit("mail", concurrency=2, rate=5)
        make_dead(client, redis_url, ns)
        for page in ("/", "/queues"):
            body = _get(web + page)[1]
            table = "queues" if page == "/" else "rows"
            header = _Tables(body).tables[table][0]
            assert [h for h, _ in header] == ["queue", "depth", "pending", "running", "lag",
                                              "ok/s", "failed/s", "limit", "keys"]
            mail = next(r for r in _table(body, table) if r[0][0] == "mail")
            assert mail[0] == ("mail", "/queues/mail")
            assert mail[1] == ("3", "/queues/mail")
            assert mail[3] == ("0", "/queues/mail/running")
            assert mail[7][0] == "2 at once, 5/s (0 held)"
        body = _get(f"{web}/")[1]
        assert re.search(r'<a href="/dead-letters" id="dead-letters">1</a>', body)
        assert '<a href="/scheduled">1 scheduled</a>' in body
        assert '<a href="/workers" id="workers-alive">0</a>' in body


def test_a_queues_lists_page_through_its_queued_scheduled_and_retrying_slots(
        redis_url: str, ns: str, web: str) -> None:
    registry = Registry()

    @registry.task("t.fails")
    async def fails(ctx: Any, payload: Any) -> None:
        raise RuntimeError("down for now")

    with Client(redis_url, ns) as client:
        retrying = client.submit_many([{"task": "t.fails", "queue": "q", "payload": i,
                                        "retry": RetryPolicy(max_attempts=5, base_s=600,
                                                             max_s=600)} for i in range(3)])
        asyncio.run(run_until(redis_url, ns, registry, lambda: all(
            client.slots(j)[0].status is SlotStatus.SCHEDULED for j in retrying),
            queues=["q"]))
        queued = client.submit_many([{"task": "t.waits", "queue": "q", "payload": i}
                                     for i in range(120)])
        later = client.submit_many([{"task": "t.later", "queue": "q", "delay": 900}
                                    for _ in range(55)])
        pages = {"queued": _follow(web, "/queues/q"), "queued2": _follow(web, "/queues/q/queued"),
                 "scheduled": _follow(web, "/queues/q/scheduled"),
                 "retrying": _follow(web, "/queues/q/retrying"),
                 "all retrying": _follow(web, "/retrying")}
    for name, expected in [("queued", queued), ("queued2", queued),
                           ("scheduled", later + retrying), ("retrying", retrying),
                           ("all retrying", retrying)]:
        rows = pages[name]
        slots = [r[0][0] for r in rows]
        assert len(slots) == len(set(slots)), f"{name}: a slot on two pages"
        assert sorted(s.partition(":")[0] for s in slots) == sorted(expected), name
        assert all(r[0][1] == f"/slots/{r[0][0]}" for r in rows)
    assert all("down for now" in r[-1][0] for r in pages["retrying"])


def _follow(web: str, path: str) -> list[list[tuple[str, str | None]]]:
    """Every row of a paged list, following its "next page" links (each page at most 50)."""
    rows: list[list[tuple[str, str | None]]] = []
    url: str | None = web + path
    for _ in range(20):
        assert url is not None
        code, body = _get(url)
        assert code == 200, (url, body)
        page = _table(body, "rows")
        if page and page[0][0][0].startswith("nothing") or 'id="empty"' in body:
            page = []
        assert len(page) <= 50
        rows += [r[1:] for r in page]  # the selection checkbox's cell first
        found = re.search(r'<a href="([^"]+)" id="next-page">', body)
        if not found:
            return rows
        url = web + found.group(1).replace("&amp;", "&")
    raise AssertionError(f"{path}: the pages never end")


def test_the_running_page_shows_each_run_with_its_worker_and_lease(
        redis_url: str, ns: str, web: str) -> None:
    with Client(redis_url, ns) as client, _runs(client, redis_url, ns, "slow", 4) as ids:
        holder = client.slots(ids[0])[0].worker
        for path in ("/running", "/queues/slow/running"):
            rows = [r[1:] for r in _table(_get(web + path)[1], "rows")]
            assert sorted(r[0][0].partition(":")[0] for r in rows) == sorted(ids), path
            for _slot, task, queue, _priority, status, who, started, lease in rows:
                assert (task[0], queue[0], status[0], who[0]) == (
                    "demo.sleep", "slow", "running", holder)
                assert started[0].endswith("Z") and lease[0].endswith("s left")
        assert _table(_get(f"{web}/queues/other/running")[1], "rows")[0][0][0].startswith(
            "nothing is running now")


def test_search_goes_to_the_job_or_slot_page(redis_url: str, ns: str, web: str) -> None:
    with Client(redis_url, ns) as client:
        job = client.submit("demo.noop")
        slot = client.slots(job)[0].slot_id
    for given, page in [(job, f"/jobs/{job}"), (slot, f"/slots/{slot}"),
                        (f" {job} ", f"/jobs/{job}")]:
        code, body = _get(f"{web}/search?id={given.strip()}")
        assert code == 200 and f"<h1>{page.split('/')[1][:-1].capitalize()} " in body, given
        assert (_search_target(web, given)) == page
    code, body = _get(f"{web}/search?id=nosuchjob")
    assert code == 404 and "no such job or slot" in body
    code, body = _get(f"{web}/search?id=no%20such%20thing")
    assert code == 400 and "neither a job id nor a slot id" in body


def _search_target(web: str, given: str) -> str:
    """Where /search redirects (not followed)."""
    import http.client
    from urllib.parse import quote, urlsplit

    where = urlsplit(web)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
    try:
        conn.request("GET", f"/search?id={quote(given)}")
        reply = conn.getresponse()
        assert reply.status == 303, reply.status
        return reply.getheader("location") or ""
    finally:
        conn.close()


def test_immediate_jobs_are_listed_with_the_recent_submissions(redis_url: str, ns: str,
                                                               web: str) -> None:
    with Client(redis_url, ns) as client:
        now = client.submit("demo.noop", {"n": 1}, queue="mail")
        time.sleep(0.002)  # newest first is by the ms (two shards' events of one ms: either)
        later = client.submit("demo.noop", queue="mail", delay=60)
        slot = client.slots(now)[0].slot_id
    recent = _table(_get(f"{web}/recent")[1], "rows")
    assert [(r[0][0], r[2][0]) for r in recent] == [(later, "delayed"), (now, "immediate")]
    assert recent[1][0][1] == f"/jobs/{now}" and recent[1][5] == ("queued", f"/slots/{slot}")
    immediate = _table(_get(f"{web}/jobs?kind=immediate")[1], "rows")
    assert [r[0][0] for r in immediate] == [now]
    code, body = _get(f"{web}/jobs/{now}")
    assert code == 200 and "immediate" in body and "concurrency key" not in body
    with Client(redis_url, ns) as client:
        keyed = client.submit("demo.noop", queue="mail", concurrency_key="tenant-42")
    code, body = _get(f"{web}/jobs/{keyed}")
    assert code == 200 and re.search(r"concurrency key.*?tenant-42", body, re.S)


def test_empty_pages_say_what_would_fill_them(web: str) -> None:
    wants = {"/history": "<code>sched snapshotter</code>",
             "/workers": "<code>sched worker --app MODULE:REGISTRY</code>",
             "/tasks": "<code>sched worker --app MODULE:REGISTRY</code>",
             "/running": "<code>sched worker --app MODULE:REGISTRY</code>",
             "/scheduled": "<code>sched scheduler</code>",
             "/retrying": "waits here out its backoff",
             "/dead-letters": "<code>max_attempts</code>",
             "/jobs": "<code>delay=</code>",
             "/schedules": "<code>client.schedule(name, task, payload, cron=...)</code>",
             "/recent": "<code>client.submit(task, payload)</code>",
             "/queues": "no queue yet",
             "/queues/q": "nothing is waiting in this queue"}
    for path, text in wants.items():
        code, body = _get(web + path)
        assert code == 200, path
        empty = re.search(r'class="empty" id="empty">(.*?)</td>', body, re.S)
        assert empty and text in empty.group(1), (path, empty and empty.group(1))
        assert "nothing here" not in body and "`" not in body, path


def test_warnings_and_problems_show_code_not_backticks(redis_url: str, ns: str,
                                                       web: str) -> None:
    with Client(redis_url, ns) as client:
        client.submit("demo.noop")
    code, body = _get(f"{web}/")
    assert "no worker is alive: start one with <code>sched worker --app MODULE:REGISTRY</code>" \
        in body
    assert "`" not in body
    assert "`" not in _get(f"{web}/partials/health")[1]


def test_a_cron_jobs_next_fire_times_leave_out_the_slots_already_made(
        redis_url: str, ns: str, web: str) -> None:
    """A running `sched scheduler` makes a cron job's slots a few seconds ahead: those are
    the job's slots, not its next fire times."""
    with Client(redis_url, ns) as client:
        ticker = client.schedule("ticker", "demo.noop", None, cron="* * * * * *")
        with running(_process(redis_url, ns, "scheduler")):
            _wait("slots made ahead", lambda: sum(
                s.fire_ms > client.now_ms() + 1000 for s in client.slots(ticker)) >= 1)
            body = _get(f"{web}/jobs/{ticker}")[1]
    sections = {part.partition("</h2>")[0]: part for part in body.split("<h2>")[1:]}
    fires = [r[0][0] for r in next(_Tables(part).tables[""] for title, part in sections.items()
                                   if title.startswith("Next fire times"))[1:]]
    made = [r[3][0] for r in next(_Tables(part).tables[""] for title, part in sections.items()
                                  if title.startswith("Slots"))[1:]]
    assert fires and made
    assert not set(fires) & set(made), f"a slot listed as a next fire: {set(fires) & set(made)}"
    assert min(fires) > max(made)


def test_a_cron_jobs_page_says_whether_each_occurrence_fired(redis_url: str, ns: str,
                                                              web: str) -> None:
    """The job page of a recurring job lists its latest occurrences, newest first, with
    their state, start lag and, for those that did not run, why in words (Client.fires);
    and its on-time line."""
    with Client(redis_url, ns) as client:
        ticker = client.schedule("ticker", "demo.noop", None, cron="* * * * * *",
                                 queue="nobody-reads")
        first = client.get_job(ticker).fire_ms
        with running(_process(redis_url, ns, "scheduler")):
            # past their objective, and made (on a loaded box the node starts late)
            _wait("occurrences past their objective", lambda: client.now_ms() > first + 4500
                  and len(client.slots(ticker)) > (client.now_ms() - first) // 1000)
            body = _get(f"{web}/jobs/{ticker}")[1]
    sections = {part.partition("</h2>")[0]: part for part in body.split("<h2>")[1:]}
    rows = next(_Tables(part).tables[""] for title, part in sections.items()
                if title.startswith("Did it fire?"))[1:]
    assert len(rows) >= 4
    times = [r[0][0] for r in rows]
    assert times == sorted(times, reverse=True)
    assert all(r[1][0] == "pending" and r[1][1] == f"/slots/{ticker}:" + str(ms_of(r[0][0]))
               for r in rows), rows
    assert "no_worker: no live worker reads its queue" in [r[3][0] for r in rows]
    assert "on time" in body and "started within 2s" in body
    # The timeline: one mark per occurrence, oldest first, its state and reason on hover.
    marks = re.findall(r'<a class="mark m-(\w+)" title="([^"]*)" href="([^"]*)"',
                       body.partition('id="timeline"')[2].partition("</div>")[0])
    assert len(marks) == len(rows) and [m[2] for m in marks] == [r[1][1] for r in rows][::-1]
    assert {m[0] for m in marks} == {"pending"}
    assert any("pending, no_worker: no live worker reads its queue" in m[1] for m in marks)


def test_a_series_that_reaches_year_9999_shows_where_it_ends(redis_url: str, ns: str,
                                                             web: str) -> None:
    """The calendar ends with year 9999: the job page lists the last fire and says that no
    other comes, instead of failing."""
    from datetime import UTC, datetime

    with Client(redis_url, ns) as client:
        job_id = client.submit("demo.noop", cron="0 0 31 12 *",
                               start_at=datetime(9999, 12, 30, tzinfo=UTC))
    code, body = _get(f"{web}/jobs/{job_id}")
    assert code == 200, body
    assert "9999-12-31" in body and "no further fire before the end of year 9999" in body


# --- bad input ----------------------------------------------------------------------------

def test_a_bad_filter_value_is_a_400_page_naming_the_allowed_values(web: str) -> None:
    for url, allowed in [("/history?status=bogus", [s.value for s in SlotStatus]),
                         ("/jobs?kind=bogus", ["immediate", "delayed", "at", "cron"]),
                         ("/jobs?state=bogus", list(JOB_STATES)),
                         ("/queues/q/bogus", list(SLOT_LISTS))]:
        code, body = _get(web + url)
        assert code == 400, (url, code)
        assert "<h1>Bad request</h1>" in body and "Traceback" not in body
        assert "bogus" in body and all(a in body for a in allowed), (url, body)
    code, body = _get(f"{web}/running?after=nope")
    assert code == 400 and "page cursor" in body
    code, body = _get(f"{web}/jobs/not%20an%20id")
    assert code == 400 and "not a job id" in body


ODD = ["bogus", "", "%00", "%1B%5B31m", "%E2%82%AC%F0%9F%98%80", "%FF%FE", "a" * 3000,
       "%0D%0ASet-Cookie:%20x=1", "-1", "9" * 40, "1-0.0.0", "1-1.999999.999999999",
       "%25", "..%2F..%2Fetc%2Fpasswd", "%3Cscript%3Ealert(1)%3C%2Fscript%3E", "%22'%60",
       "0-0.0.0", "18446744073709551615-0.0.0"]
ROUTES = {"/": [], "/queues": [], "/running": ["after"], "/scheduled": ["after"],
          "/retrying": ["after"], "/jobs": ["kind", "task", "state"], "/recent": ["after"],
          "/schedules": [], "/workers": [], "/tasks": [], "/dead-letters": [],
          "/history": ["job", "status"],
          "/queues/q": ["after"], "/queues/q/running": ["after"],
          "/queues/q/scheduled": ["after"], "/queues/q/retrying": ["after"], "/search": ["id"],
          "/partials/health": [], "/api/series": [], "/jobs/JOB": [], "/slots/SLOT": [],
          "/login": ["next"]}
WEIRD_IDS = ["a%20b", "%00", "%E2%82%AC", "a" * 300, "x:1", "x:y", ":", "%3A", "a:b:c",
             "%1B", "..", "%2E%2E", "%FF", "q:99999999999999999999999999", "-", "%0A"]


def test_no_query_a_user_or_attacker_can_send_answers_500(redis_url: str, ns: str,
                                                           web: str) -> None:
    with Client(redis_url, ns) as client:
        job = client.submit("demo.noop", queue="q")
        slot = client.slots(job)[0].slot_id
    seen: dict[int, int] = {}

    def check(url: str) -> None:
        code, body = _get(web + url)
        seen[code] = seen.get(code, 0) + 1
        assert code in (200, 400, 404), (url[:200], code, body[:500])
        assert "Traceback" not in body and "Internal Server Error" not in body, url[:200]

    for route, params in ROUTES.items():
        path = route.replace("JOB", job).replace("SLOT", slot)
        for value in ODD:
            check(f"{path}?{'&'.join(f'{p}={value}' for p in ['zzz', 'done', 'failed'])}")
            for p in params:
                check(f"{path}?{p}={value}")
        check(f"{path}?{'&'.join(f'{p}=1' for p in params)}&{'&'.join(['kind=at'] * 50)}")
    for route, weird in itertools.product(["/jobs/", "/slots/", "/queues/", "/queues/q/",
                                           "/static/"], WEIRD_IDS):
        check(route + weird)
    check("/static/%2E%2E/%2E%2E/%2E%2E/etc/passwd")
    assert seen.get(400, 0) > 100 and seen.get(200, 0) > 100, seen
    code, _ = _get(f"{web}/jobs?task={'x' * 20_000}")  # past the server's own bounds
    assert code != 500


# --- in a browser -------------------------------------------------------------------------

def test_a_console_opened_before_its_worker_shows_it_within_one_page_load(
        redis_url: str, ns: str, web: str) -> None:
    """As users start things: the console first, then a worker and a scheduler node, then a
    submit through the SDK. Once the SDK sees the worker alive, one load of /workers shows it
    and one load of the overview says healthy (never a sample older than the page)."""
    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), "the browser tests need Debian's chromium (apt-get)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{web}/")
        assert page.locator("#verdict").inner_text() == "unhealthy"
        page.goto(f"{web}/workers")
        worker = _process(redis_url, ns, "worker", "--app", WORKER_APP)
        node = _process(redis_url, ns, "scheduler")
        with running(node, worker), Client(redis_url, ns) as client:
            job = client.submit("demo.noop", {"n": 1})
            _wait("the SDK to see the worker alive",
                  lambda: any(w.alive for w in client.workers()))
            alive = [w.worker_id for w in client.workers() if w.alive]
            page.goto(f"{web}/workers")
            shown = page.locator("#rows tbody tr td:first-child").all_inner_texts()
            assert shown == alive, f"/workers shows {shown}; the SDK sees {alive}"
            page.goto(f"{web}/")
            assert page.locator("#verdict").inner_text() == "healthy", page.locator(
                "#health").inner_text()
            assert page.locator("#workers-alive").inner_text() == "1"
            assert page.locator("#empty").count() == 0
            _wait("the job's run", lambda: client.slots(job)[0].status is
                  SlotStatus.SUCCEEDED)
        browser.close()


def test_the_new_pages_in_a_browser(redis_url: str, ns: str, web: str,
                                    tmp_path: Path) -> None:
    """From the overview's counts to their lists, a queue's pages, the running page, the
    search box; screenshots (SCHED_UPDATE_SCREENSHOTS=1 writes the docs')."""
    from playwright.sync_api import sync_playwright

    with Client(redis_url, ns) as client:
        dead = make_dead(client, redis_url, ns)
        client.submit_many([{"task": "demo.noop", "queue": "mail", "payload": i}
                            for i in range(70)])
        client.submit_many([{"task": "demo.noop", "queue": "mail", "delay": 3600}
                            for _ in range(5)])
        with _runs(client, redis_url, ns, "reports", 3) as sleeping, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{web}/")
            page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
            page.click("#dead-letters")
            assert page.url.endswith("/dead-letters")
            assert dead[0] in page.locator("#rows").inner_text()
            page.goto(f"{web}/")
            page.click("#queues a[href='/queues/mail']:text('70')")
            assert page.locator("h1").inner_text() == "Queued: queue mail"
            assert page.locator("#rows tbody tr").count() == 50
            page.click("#next-page")
            assert page.locator("#rows tbody tr").count() == 20
            page.click(".tabs a:text('scheduled')")
            assert page.locator("#rows tbody tr").count() == 5
            page.goto(f"{web}/")
            page.click("a[href='/running']:visible")
            assert page.locator("#rows tbody tr").count() == 3
            page.screenshot(path=str(tmp_path / "running.png"), full_page=True)
            page.fill("nav input[name=id]", sleeping[0])
            page.press("nav input[name=id]", "Enter")
            assert page.locator("h1").inner_text() == f"Job {sleeping[0]}"
            page.fill("nav input[name=id]", "nosuchjob")
            page.press("nav input[name=id]", "Enter")
            assert "no such job or slot" in page.locator("#note").inner_text()
            browser.close()
    if os.environ.get("SCHED_UPDATE_SCREENSHOTS"):
        SHOTS.mkdir(exist_ok=True)
        shutil.copy(tmp_path / "running.png", SHOTS / "console-running.png")


def test_the_tasks_page_in_a_browser(redis_url: str, ns: str, web: str,
                                     tmp_path: Path) -> None:
    """From the nav to the Tasks page, and from a task to its jobs; a screenshot
    (SCHED_UPDATE_SCREENSHOTS=1 writes the docs')."""
    from playwright.sync_api import sync_playwright

    with Client(redis_url, ns) as client:
        client.create_namespace()
        with running(_process(redis_url, ns, "worker", "--app", WORKER_APP)), \
                sync_playwright() as p:
            _wait("the worker to serve its tasks",
                  lambda: any(t.workers for t in client.tasks()))
            client.submit_many([{"task": "demo.noop", "payload": i} for i in range(3)])
            browser, page = open_from_nav(p, web, "/tasks", "Tasks")
            shown = page.locator("#rows tbody tr td:first-child").all_inner_texts()
            assert shown == [t.task for t in client.tasks()]
            page.screenshot(path=str(tmp_path / "tasks.png"), full_page=True)
            page.click("#rows a:text('demo.noop')")
            assert "task=demo.noop" in page.url
            assert page.locator("text=Traceback").count() == 0
            browser.close()
    if os.environ.get("SCHED_UPDATE_SCREENSHOTS"):
        SHOTS.mkdir(exist_ok=True)
        shutil.copy(tmp_path / "tasks.png", SHOTS / "console-tasks.png")


def ms_of(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_a_schedules_timeline_in_a_browser(redis_url: str, ns: str, web: str,
                                           tmp_path: Path) -> None:
    """A schedule that runs every second: its page draws a mark per occurrence, coloured
    by state (green: ran on time), each naming its start lag on hover; a mark opens its
    slot."""
    from playwright.sync_api import sync_playwright

    with Client(redis_url, ns) as client:
        ticker = client.schedule("ticker", "demo.noop", None, cron="* * * * * *")
        with running(_process(redis_url, ns, "scheduler"),
                     _process(redis_url, ns, "worker", "--app", WORKER_APP)):
            _wait("a few runs", lambda: sum(s.status is SlotStatus.SUCCEEDED
                                            for s in client.slots(ticker)) >= 3)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"{web}/jobs/{ticker}")
                marks = page.locator("#timeline .mark")
                assert marks.count() >= 3
                ran = page.locator("#timeline .m-ran, #timeline .m-late")
                assert ran.count() >= 3
                box = ran.first.bounding_box()
                assert box and box["width"] > 5 and box["height"] > 5  # drawn, not empty
                color = ran.first.evaluate("e => getComputedStyle(e).backgroundColor")
                assert color not in ("rgba(0, 0, 0, 0)", "transparent"), color
                title = ran.first.get_attribute("title") or ""
                assert "ran, start lag " in title and "succeeded" in title, title
                page.screenshot(path=str(tmp_path / "timeline.png"), full_page=True)
                ran.first.click()
                assert page.locator("h1").inner_text().startswith("Slot ")
                browser.close()
