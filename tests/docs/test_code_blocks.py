"""Every code block of the docs (docs/**/*.md and README.md) runs, as a reader would run it.

The rules a page is written to:

- A fence preceded by `<!-- no-run -->` (or `<!-- no-run: why -->`, the last non-blank line
  before it) is not run: a service that runs until stopped, a Postgres or a cluster the test
  has not got. Use it sparingly; `text` blocks (synopses, captured output) never run.
- A `python` block whose first line names a file (`# tasks.py`, `# test_tasks.py`) is that
  file, written into the page's own directory. A page with a `tasks.py` gets a real
  `sched worker --app tasks:registry --queues default,mail` and a `sched scheduler` on it,
  started in that directory, while its blocks run. A `test_*.py` file is run with pytest
  there, with every network connection refused: the testing mode needs no Redis.
- Every other `python` block runs alone, in a fresh interpreter, as a reader who copies
  just that block would run it: no block sees another's names. A page whose examples share
  some lines (imports, a client, a handler) states them once, in a block preceded by
  `<!-- setup -->` whose first line says so to the reader (`# setup used by every example
  on this page`); that block is prepended to each of the page's other blocks (and runs on
  its own when there is no other). One setup block a page at most. The blocks of a page
  run one after another in page order (a page may show a job submitted, then relayed, then
  read back, as long as each block says it all), against the test Redis in a namespace of
  the page's own: `redis://127.0.0.1:6379/0` becomes the test's URL and every
  `namespace="..."` the page's.
- In `sh` blocks, each line that starts with `sched` runs (with SCHED_REDIS_URL,
  SCHED_NAMESPACE and a private SCHED_HISTORY_FILE; `JOB_ID` is the id the page's last
  `sched submit` printed, `CRON_JOB_ID` the last `sched submit --cron`'s) and must exit 0
  (`sched status` may exit 3, unhealthy). The commands that run until stopped (worker,
  scheduler, snapshotter, exporter, web, dev) get `--help` instead, which still refuses an
  option they do not have. Other lines (`export`, `bash scripts/...`) are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REDIS_URL, SCHED, TESTS, drop_namespace, new_namespace

ROOT = TESTS.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
NO_RUN = re.compile(r"<!--\s*no-run\b[^>]*-->\s*$")
SETUP = re.compile(r"<!--\s*setup\s*-->\s*$")
SETUP_TITLE = "# setup used by every example on this page"
FILE_LINE = re.compile(r"#\s*([\w/]+\.py)\b")
SERVICES = {"worker", "scheduler", "snapshotter", "exporter", "web", "dev"}


@dataclass
class Block:
    lang: str
    code: str
    line: int  # where the fence opens, for the failure message
    run: bool
    setup: bool = False  # the page's shared setup, prepended to each of its other blocks


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        out.append(Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1,
                         not NO_RUN.search(before), bool(SETUP.search(before))))
    return out


def _file_name(block: Block) -> str | None:
    first = block.code.split("\n", 1)[0]
    m = FILE_LINE.match(first)
    return m.group(1) if block.lang == "python" and m else None


def _ids(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_page_is_found_and_markers_are_rare() -> None:
    assert ROOT / "docs" / "index.md" in PAGES
    every = [b for page in PAGES for b in blocks(page)]
    skipped = [b for b in every if not b.run and b.lang not in ("text", "")]
    runnable = [b for b in every if b.run and b.lang in ("python", "sh")]
    assert len(skipped) < len(runnable) / 2, "no-run is for the few blocks that cannot run"


def test_every_block_marked_no_run_says_why_or_is_a_service() -> None:
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"<!--\s*no-run\b[^>]*-->", text):
            after = text[m.end():].lstrip("\n")
            assert after.startswith("```"), f"{_ids(page)}: a no-run marker not before a fence"


def test_a_pages_setup_is_one_python_block_that_says_what_it_is() -> None:
    for page in PAGES:
        setups = [b for b in blocks(page) if b.setup]
        assert len(setups) <= 1, f"{_ids(page)}: one <!-- setup --> block a page at most"
        for b in setups:
            where = f"{_ids(page)}:{b.line}"
            assert b.lang == "python" and b.run, f"{where}: the setup is a python block that runs"
            assert b.code.startswith(SETUP_TITLE), \
                f"{where}: the setup's first line tells the reader: {SETUP_TITLE!r}"


def test_a_block_sees_the_pages_setup_and_no_other_blocks_names(tmp_path: Path) -> None:
    page = ROOT / "docs" / "index.md"  # any page: only its name is used, in the message
    setup = Block("python", f"{SETUP_TITLE}\nshared = 1\n", 3, True, setup=True)
    first = Block("python", "mine = shared + 1\n", 10, True)
    second = Block("python", "print(shared, mine)\n", 20, True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    _run_python(page, [first, Block("python", "print(shared)\n", 15, True)], setup, "ns",
                env, tmp_path)
    with pytest.raises(AssertionError) as failed:
        _run_python(page, [first, second], setup, "ns", env, tmp_path)
    assert "docs/index.md:20:" in str(failed.value) and "name 'mine' is not defined" in \
        str(failed.value)
    assert "docs/index.md:10:" not in str(failed.value)


_NO_NETWORK = '''
import socket

tried = []


def refuse(self, address):
    tried.append(address)
    raise ConnectionRefusedError(address)


socket.socket.connect = socket.socket.connect_ex = refuse


def pytest_sessionfinish(session, exitstatus):
    if tried:
        raise SystemExit(f"the example tried to connect: {tried}")
'''

# Runs one block (the page's setup prepended) in this fresh interpreter, naming the block.
_DRIVER = '''
import sys, traceback
setup_line, setup, line, code = sys.argv[1:5]
scope = {"__name__": "__main__"}
try:
    if setup:
        exec(compile(setup, f"<setup block at line {setup_line}>", "exec"), scope)
    exec(compile(code, f"<block at line {line}>", "exec"), scope)
except BaseException:
    traceback.print_exc()
    sys.exit(f"the block at line {line} failed")
'''


def _python(code: str, ns: str) -> str:
    return re.sub(r'namespace="[^"]*"', f'namespace="{ns}"',
                  code.replace('"redis://127.0.0.1:6379/0"', repr(REDIS_URL)))


def _sched_lines(code: str) -> list[str]:
    out = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line.startswith("sched "):
            continue
        line = _uncommented(line)
        words = shlex.split(line)
        if len(words) > 1 and words[1] in SERVICES:
            line = shlex.join([w for w in words if w != "&"] + ["--help"])
        out.append(line)
    return out


def _uncommented(line: str) -> str:
    """The line without its trailing `# comment` (a `#` inside quotes stays)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def _run_sh(code: str, env: dict[str, str], cwd: Path, state: dict[str, str], where: str) -> None:
    for line in _sched_lines(code):
        line = line.replace("CRON_JOB_ID", state.get("cron_id", "CRON_JOB_ID"))
        line = line.replace("JOB_ID", state.get("job_id", "JOB_ID"))
        done = subprocess.run(["bash", "-c", line], env=env, cwd=cwd, timeout=60,
                              capture_output=True, text=True)
        ok = {0, 3} if line.startswith("sched status") else {0}
        assert done.returncode in ok, f"{where}: `{line}` exited {done.returncode}:\n" \
                                      f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        if line.startswith("sched submit") and "--cron" not in line and "--delay" not in line:
            state["job_id"] = done.stdout.strip().splitlines()[-1]
        elif line.startswith("sched submit") and "--cron" in line:
            state["cron_id"] = done.stdout.strip().splitlines()[-1]


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*SCHED, *args, "--log-level", "warning"], env=env, cwd=cwd,
                            stderr=subprocess.PIPE)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the page's services; each must have run until then (a handler's own traceback in
    their log is the page's example at work, not a failure; one still waiting for its
    namespace, on a page that submits nothing, ends by the signal itself)."""
    running = [p.poll() is None for p in procs]
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, was_running in zip(procs, running, strict=True):
        _, err = p.communicate(timeout=30)
        assert was_running and p.returncode in (0, -signal.SIGTERM), err.decode()[-2000:]


def _forget_outbox_namespace() -> None:
    """A page runs in a namespace of its own, but the test database's default outbox
    (schema `scheduler`) outlives it and would still serve an earlier run's namespace: the
    page starts from an outbox no relay has used yet, as a reader's does."""
    import psycopg

    from conftest import POSTGRES_DSN

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        try:
            conn.execute("DELETE FROM scheduler.outbox_namespace")
        except psycopg.errors.UndefinedTable:
            pass  # no outbox yet, or one from before namespaces: nothing recorded


@pytest.mark.slow  # real processes: a few seconds a page
@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_the_code_blocks_of_a_page_run(page: Path, tmp_path: Path) -> None:
    import redis

    page_blocks = [b for b in blocks(page) if b.run and b.lang in ("python", "sh", "bash")]
    if not page_blocks:
        pytest.skip("nothing to run")
    ns = new_namespace()
    if any("outbox" in b.code for b in page_blocks):
        _forget_outbox_namespace()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
           "SCHED_REDIS_URL": REDIS_URL, "SCHED_NAMESPACE": ns,
           "SCHED_HISTORY_FILE": str(tmp_path / "history.sqlite3")}
    files = {name: b for b in page_blocks if (name := _file_name(b))}
    for name, b in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(b.code)
    procs = []
    if "tasks.py" in files:
        procs = [_start(["worker", "--app", "tasks:registry", "--queues", "default,mail"],
                        env, tmp_path), _start(["scheduler"], env, tmp_path)]
    try:
        state: dict[str, str] = {}
        setup = next((b for b in page_blocks if b.setup), None)
        python = [b for b in page_blocks
                  if b.lang == "python" and not b.setup and not _file_name(b)]
        if setup is not None and not python:
            setup, python = None, [setup]
        for b in page_blocks:
            if b.lang != "python":
                _run_sh(b.code, env, tmp_path, state, f"{_ids(page)}:{b.line}")
        _run_python(page, python, setup, ns, env, tmp_path)
        for name in files:
            if Path(name).name.startswith("test_"):
                _run_pytest(tmp_path, name, env, page)
    finally:
        _stop(procs)
        r = redis.Redis.from_url(REDIS_URL)
        drop_namespace(r, ns)
        r.close()


def _run_python(page: Path, python: list[Block], setup: Block | None, ns: str,
                env: dict[str, str], cwd: Path) -> None:
    """Each block in a fresh interpreter of its own, the page's setup prepended, in page
    order; every block runs, and the failure names each that failed."""
    failed = []
    for b in python:
        args = [str(setup.line) if setup else "0", _python(setup.code, ns) if setup else "",
                str(b.line), _python(b.code, ns)]
        done = subprocess.run([sys.executable, "-c", _DRIVER, *args], env=env, cwd=cwd,
                              timeout=120, capture_output=True, text=True)
        if done.returncode != 0:
            failed.append(f"{_ids(page)}:{b.line}: {done.stderr[-3000:]}")
    assert not failed, "\n\n".join(failed)


def _run_pytest(tmp_path: Path, name: str, env: dict[str, str], page: Path) -> None:
    (tmp_path / "conftest.py").write_text(_NO_NETWORK)
    env = {**env, "SCHED_REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "error", name], cwd=tmp_path, env=env, timeout=120,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"{_ids(page)}: {done.stdout[-3000:]}{done.stderr[-2000:]}"
    assert " passed" in done.stdout and "failed" not in done.stdout

