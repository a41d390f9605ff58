"""The mutant runner's fork server (mutate.py `Forks`): a process that imports pytest, its
plugins and the third-party libraries the code uses once, then forks one pytest run per
request. A fresh `python -m pytest` per mutant spent over a second starting up before any
test ran; a fork starts in milliseconds.

It never imports `scheduler` or anything of the tests: each child chdirs into the mutant's
copy and puts it first on sys.path and PYTHONPATH (for the processes its tests start), so
the code the child imports is the mutated copy's.
Started with `python -P` (no script directory on sys.path).

Protocol, one JSON line each way on stdin/stdout: {"cwd", "args", "out", "timeout_s"} ->
{"rc", "timed_out", "cpu_s"} (the child's own CPU time). The child writes pytest's output to `out`, runs in a session of its
own, and whatever it leaves running is killed with it. EOF on stdin ends the server.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Third-party modules the code and its tests import at their top: loaded here, each child
# has them already. None of them starts a thread or opens a connection on import.
PRELOAD = ("redis", "redis.asyncio", "redis.cluster", "msgspec", "click", "jinja2", "psycopg",
           "prometheus_client", "croniter", "yaml", "fakeredis", "opentelemetry.trace",
           "starlette.applications")


def preload() -> None:
    """pytest's plugins, loaded by one run over an empty directory: through pytest's
    assert-rewriting import hook, as a run loads them (a module of a plugin's package
    imported before pytest marks it for rewriting makes it warn, an error here; anyio's is
    one, which starlette's app imports). Then the third-party modules."""
    import pytest

    with tempfile.TemporaryDirectory(prefix="sched-forkserver-") as empty:
        here = os.getcwd()
        os.chdir(empty)
        try:
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", empty])
        finally:
            os.chdir(here)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # Nothing of the real tree may be loaded: a child would run it instead of the copy.
    leaked = [name for name, mod in list(sys.modules.items())
              if name.partition(".")[0] == "scheduler"
              or name != "__main__" and _ours(getattr(mod, "__file__", None) or "")]
    if leaked:
        raise SystemExit(f"forkserver: modules of {ROOT} loaded before a fork: {leaked}")
    # What is loaded now stays out of the children's garbage collections (pytest collects
    # several times as it ends): a fork's pages are shared until written, and each child
    # would otherwise walk every object the server made.
    gc.freeze()


def _ours(path: str) -> bool:
    """A file of the real tree (the venv may live inside it: its packages are not ours)."""
    path = os.path.abspath(path)
    return path.startswith(ROOT + os.sep) and not path.startswith(
        os.path.abspath(sys.prefix) + os.sep)


def child(cwd: str, args: list[str], out: str) -> None:
    """In the forked child: run pytest in the copy `cwd`; never returns."""
    rc = 3
    try:
        os.setsid()
        os.chdir(cwd)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the server's stdin is its request pipe
        os.close(null)
        os.environ["PYTHONPATH"] = cwd
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # the processes the tests start
        # pytest rewrites its plugins' modules (anyio's, ...) on import: written once, its
        # cache (in the venv, as any pytest run writes it) spares each run a few hundred ms.
        # Whatever else is written lands in the copy, removed after the run.
        sys.dont_write_bytecode = False
        sys.path[:] = [cwd] + [p for p in sys.path if p and os.path.abspath(p) != HERE]
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import pytest

        rc = int(pytest.main(args))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 3
    except BaseException:  # noqa: B036 - a child must always exit, with a non-zero code
        import traceback

        traceback.print_exc()
        rc = 3
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(rc)


def serve_one(request: dict) -> dict:
    pid = os.fork()
    if pid == 0:
        child(request["cwd"], request["args"], request["out"])
    deadline = time.monotonic() + float(request["timeout_s"])
    timed_out = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.02)
    # What the tests left behind in the child's session goes with it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return {"rc": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}


def main() -> None:
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != HERE]
    preload()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(serve_one(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
