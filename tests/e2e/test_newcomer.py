"""A newcomer's first hour, from the getting-started page alone: its app (three tasks with
defaults, one typed payload, one declared schedule) is built from the page's own code blocks,
so the page and this test cannot drift. `sched worker --app` and then `sched scheduler --app`
start as the page starts them; each step the page promises is a test of its own: a submit by
name from the CLI lands in the task's queue with its timeout and retries, a misspelt handle
fails at import, a typed payload that does not fit is refused naming the field, and a
schedule dropped from the code is deleted when the node restarts."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import redis
from faults.harness import wait_for

from conftest import REDIS_URL, SCHED, TESTS, drop_namespace, new_namespace
from scheduler import Client, ValidationError
from scheduler.core.errors import JobNotFound

pytestmark = pytest.mark.slow  # real processes: ~15 s in all

PAGE = TESTS.parent / "docs" / "getting-started.md"
SECTION = "## Your own app in five minutes"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)


def _section() -> str:
    text = PAGE.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _blocks(lang: str) -> list[str]:
    return [code for kind, code in FENCE.findall(_section()) if kind == lang]


def tasks_source() -> str:
    """The page's `tasks.py`, as written."""
    found = [b for b in _blocks("python") if b.startswith("# tasks.py")]
    assert len(found) == 1, "the page shows one tasks.py"
    return found[0]


def client_source(ns: str) -> str:
    """The page's Python submit, on the test's Redis and namespace."""
    found = [b for b in _blocks("python") if "from tasks import" in b]
    assert len(found) == 1, "the page shows one Python submit through the handles"
    code = found[0].replace('"redis://127.0.0.1:6379/0"', repr(REDIS_URL))
    return code.replace('namespace="myapp"', f"namespace={ns!r}")


def sched_lines(command: str) -> list[list[str]]:
    """The page's `sched COMMAND ...` lines, as argument lists (comments and `&` dropped)."""
    out = []
    for block in _blocks("sh"):
        for line in block.splitlines():
            words = [w for w in shlex.split(line, comments=True) if w != "&"]
            if words[:2] == ["sched", command]:
                out.append(words[1:])
    return out


def load_tasks(path: Path) -> types.ModuleType:
    """The page's tasks module, imported under a name of its own (not `tasks`)."""
    spec = importlib.util.spec_from_file_location(f"newcomer_{os.getpid()}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the handler's annotations resolve in its module
    spec.loader.exec_module(module)
    return module


class App:
    """The page's app in a directory of its own, with its services on one namespace."""

    def __init__(self, where: Path, ns: str) -> None:
        self.where, self.ns = where, ns
        self.env = {**os.environ, "SCHED_REDIS_URL": REDIS_URL, "SCHED_NAMESPACE": ns}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        (where / "tasks.py").write_text(tasks_source())

    def start(self, command: str) -> subprocess.Popen[bytes]:
        """The page's own line for this service (the worker, the scheduler node)."""
        (args,) = sched_lines(command)
        with (self.where / f"{command}.log").open("ab") as log:
            proc = subprocess.Popen([*SCHED, *args], cwd=self.where, env=self.env,
                                    stdout=log, stderr=subprocess.STDOUT)
        self.procs[command] = proc
        return proc

    def stop(self, command: str) -> None:
        proc = self.procs.pop(command)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def log(self, command: str) -> str:
        return (self.where / f"{command}.log").read_text()

    def close(self) -> None:
        for command in list(self.procs):
            self.stop(command)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """The page's app running: the worker first (it publishes the tasks' defaults), then the
    scheduler node, in the order the page starts them."""
    ns = new_namespace()
    started = App(tmp_path_factory.mktemp("newcomer"), ns)
    r = redis.Redis.from_url(REDIS_URL)
    try:
        with Client(REDIS_URL, ns) as client:
            started.start("worker")
            wait_for(lambda: len(client.tasks()) == 3, timeout=30,
                     what="the worker publishing its three tasks")
            started.start("scheduler")
            wait_for(lambda: "1 declared schedules" in started.log("scheduler")
                     + started.log("worker"), timeout=30, what="the declared schedule applied")
        yield started
    finally:
        started.close()
        drop_namespace(r, ns)
        r.close()


def test_the_page_app_has_three_tasks_with_defaults_one_typed_payload_one_schedule(
        app: App) -> None:
    tasks = load_tasks(app.where / "tasks.py")
    registry = tasks.registry
    assert len(registry.names()) == 3
    for name in registry.names():
        task = registry.get(name)
        assert {"timeout", "retry"} <= set(task.defaults), f"{name}: no defaults"
    typed = [registry.get(n).payload_type for n in registry.names()]
    assert [t for t in typed if t is not None] == [tasks.Email]
    assert issubclass(tasks.Email, msgspec.Struct)
    assert list(registry.schedules) == ["nightly-totals"]
    with Client(REDIS_URL, app.ns) as client:
        published = {t.task: t for t in client.tasks()}
        assert set(published) == set(registry.names())
        assert published["emails.send"].payload_type == "tasks.Email"
        job = client.get_job("nightly-totals")
        assert (job.task, job.cron, job.deleted_ms) == ("reports.build", "0 2 * * *", None)
        # The declared schedule takes its task's defaults, as a submit through the handle.
        assert (job.timeout_s, job.retry.max_attempts) == (600, 2)


def test_a_submit_by_name_from_the_cli_lands_in_the_tasks_queue_with_its_defaults(
        app: App) -> None:
    submits = sched_lines("submit")
    assert submits and submits[0][1] == "emails.send"
    done = subprocess.run([*SCHED, *submits[0]], cwd=app.where, env=app.env, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().splitlines()[-1]
    tasks = load_tasks(app.where / "tasks.py")
    defaults = tasks.registry.get("emails.send").defaults
    with Client(REDIS_URL, app.ns) as client:
        job = client.get_job(job_id)
        assert (job.task, job.queue, job.timeout_s, job.retry) == \
            ("emails.send", "mail", 30, defaults["retry"])
        assert job.retry.max_attempts == 5
        assert client.result(job_id, timeout=30) == {"sent": "a@example.com"}


def test_the_pages_python_submit_runs_as_written(app: App) -> None:
    done = subprocess.run([sys.executable, "-c", client_source(app.ns)], cwd=app.where,
                          env=app.env, timeout=90, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["{'sent': 'ada@example.com'}", "payload.to", "6"]


def test_a_misspelt_handle_fails_at_import_and_writes_nothing(app: App) -> None:
    code = client_source(app.ns)
    misspelt = code.replace("import Email, build, send", "import Email, build, sned")
    assert misspelt != code
    with Client(REDIS_URL, app.ns) as client:
        before = len(client.recent_jobs(limit=500).jobs)
        done = subprocess.run([sys.executable, "-c", misspelt], cwd=app.where, env=app.env,
                              timeout=60, capture_output=True, text=True)
        assert done.returncode != 0
        assert "ImportError: cannot import name 'sned' from 'tasks'" in done.stderr
        assert len(client.recent_jobs(limit=500).jobs) == before


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_a_misspelt_handle_in_the_app_stops_its_services_at_their_start(
        tmp_path: Path, command: str) -> None:
    broken = App(tmp_path, new_namespace())
    source = tasks_source()
    assert 'registry.schedule("nightly-totals", build,' in source
    (tmp_path / "tasks.py").write_text(source.replace('"nightly-totals", build,',
                                                      '"nightly-totals", biuld,'))
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "nightly-totals" in text)
    proc = broken.start(command)
    try:
        assert proc.wait(timeout=60) != 0
    finally:
        broken.close()
    out = broken.log(command).strip()
    assert out == (f"error: --app 'tasks:registry': importing 'tasks' failed at tasks.py line "
                   f"{line}: NameError: name 'biuld' is not defined"), out
    assert out + "\n" in _blocks("text"), "the page shows the line as it is"


def test_a_typed_payload_that_does_not_fit_is_refused_naming_the_field(app: App) -> None:
    tasks = load_tasks(app.where / "tasks.py")
    with Client(REDIS_URL, app.ns) as client:
        before = len(client.recent_jobs(limit=500).jobs)
        for payload, field in [({"to": 42}, "payload.to"), ({"subject": "x"}, "payload.to"),
                               ({"to": "a@b", "subject": None}, "payload.subject")]:
            with pytest.raises(ValidationError) as err:
                tasks.send.submit(client, payload)
            assert err.value.field == field and "Email" in str(err.value), err.value
        assert len(client.recent_jobs(limit=500).jobs) == before


def test_removing_the_declared_schedule_and_restarting_the_node_deletes_it(
        tmp_path: Path) -> None:
    ns = new_namespace()
    fresh = App(tmp_path, ns)
    r = redis.Redis.from_url(REDIS_URL)
    try:
        with Client(REDIS_URL, ns) as client:
            kept = client.schedule("made-by-hand", "reports.build", {"values": [1]},
                                   cron="0 3 * * *")
            fresh.start("scheduler")
            _started(fresh, 1)
            assert _exists(client, "nightly-totals")
            fresh.stop("scheduler")
            source = tasks_source()
            # The page's schedule as the reader deletes it: its comment and its statement.
            dropped = re.sub(r"\n# Declared with the code:.*", "\n", source, flags=re.S)
            assert "registry.schedule" in source and "registry.schedule" not in dropped
            (tmp_path / "tasks.py").write_text(dropped)
            fresh.start("scheduler")
            _started(fresh, 2)
            assert client.get_job("nightly-totals").deleted_ms is not None
            assert client.next_fires("nightly-totals") == []
            assert client.get_job(kept).deleted_ms is None
    finally:
        fresh.close()
        drop_namespace(r, ns)
        r.close()
    assert "1 removed (nightly-totals)" in fresh.log("scheduler")


def _started(app: App, times: int) -> None:
    """The node has logged its start `times` times: it applies the app's declarations before
    it starts, so from here on they are in Redis (no wait that a node skipping them runs
    out)."""
    wait_for(lambda: len(re.findall(r"scheduler node \S+ started \(", app.log("scheduler")))
             >= times, timeout=30, what="the scheduler node started")


def _exists(client: Client, job_id: str) -> bool:
    try:
        return client.get_job(job_id).deleted_ms is None
    except JobNotFound:  # not there yet
        return False
