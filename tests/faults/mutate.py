"""Run the planted bugs of tests/faults/mutants.py: each is applied to a fresh copy of the
code and its tests run there; a mutant the tests do not catch is a failure of the suite.
Each run is a pytest forked from a server that imported pytest once (forkserver.py), in a
copy linked to a compiled template of the code (copy_with).

    .venv/bin/python tests/faults/mutate.py [--fast] [--suite] [--jobs N] [NAME ...]

--fast runs only the mutants marked fast (what CI runs), --suite runs the whole fault suite
against each mutant instead of the tests named for it, NAME picks mutants by name. Prints
one line per mutant and exits 1 if any survived.
"""

from __future__ import annotations

import argparse
import atexit
import compileall
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from faults.mutants import MUTANTS, Mutant  # noqa: E402

# bench/: the bench smoke tests run it; docs/, scripts/ and mkdocs.yml: tests/docs builds the
# site (scripts/griffe_drives.py feeds its API reference).
COPIED = ("scheduler", "tests", "bench", "pyproject.toml", "docs", "scripts", "mkdocs.yml")


_template: Path | None = None
_stamps: dict[Path, tuple[int, int]] = {}
_template_lock = threading.Lock()


def template() -> Path:
    """The unmutated copy each mutant's copy links to (made once per process): the code as
    it is now, compiled. Importing a hundred modules from source cost a run more than its
    tests did; the bytecode is checked against its source's hash on import (not its time
    stamp), so a mutated file's is never used."""
    global _template
    with _template_lock:
        if _template is None:
            where = Path(tempfile.mkdtemp(prefix="sched-mutant-template-"))
            for name in COPIED:
                src = ROOT / name
                if src.is_dir():
                    shutil.copytree(src, where / name,
                                    ignore=shutil.ignore_patterns("__pycache__"))
                    compileall.compile_dir(
                        where / name, quiet=2,
                        invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                else:
                    shutil.copy(src, where / name)
            _stamps.update((f, _stamp(f)) for f in where.rglob("*") if f.is_file())
            _template = where
        return _template


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def check_template() -> None:
    """The copies' files are hard links to the template's (copying 700 files cost more
    than most mutants' tests): a run that wrote into one in place would change the code
    every later mutant runs. Python and pytest write bytecode to a new file and rename it,
    and the mutated file is written anew, so none does; this says so if one ever does."""
    changed = [str(f) for f, stamp in _stamps.items() if _stamp(f) != stamp]
    if changed:
        raise SystemExit(f"a mutant's run wrote into {changed[:3]} in place: its copy "
                         "shares those files with the copies after it (mutate.py, copy_with)")


def copy_with(m: Mutant) -> Path:
    """A copy of the code with the mutant applied; the replaced text must occur once. Its
    files are hard links to the template's, but for the mutated one and its directories."""
    where = Path(tempfile.mkdtemp(prefix=f"sched-mutant-{m.name}-"))
    shutil.copytree(template(), where, dirs_exist_ok=True, copy_function=os.link)
    target = where / m.path
    text = target.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutant {m.name}: the text to replace occurs {text.count(m.old)} "
                         f"times in {m.path}; update tests/faults/mutants.py")
    target.unlink()  # the link: writing through it would change the template
    target.write_text(text.replace(m.old, m.new))
    # Its bytecode would fail the hash check anyway; gone, nothing can read it.
    for pyc in (target.parent / "__pycache__").glob(f"{target.stem}.*"):
        pyc.unlink()
    return where


class Forks:
    """A fork server (forkserver.py): pytest and its plugins imported once, one forked
    pytest run per mutant. One run at a time; `run` keeps one per job."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen(
            [sys.executable, "-P", str(Path(__file__).with_name("forkserver.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, cwd=tempfile.gettempdir())
        self.cpu_s = 0.0  # the last run's CPU time (its own: not the processes it started)
        if not self.reply().get("ready"):
            raise RuntimeError("the mutant fork server did not start")

    def reply(self) -> dict[str, Any]:
        assert self.proc.stdout
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the mutant fork server exited ({self.proc.wait()})")
        return dict(json.loads(line))

    def pytest(self, where: Path, args: list[str], timeout_s: float) -> tuple[int | None, str]:
        """pytest's exit code in the copy `where` (None: killed at the timeout), and its
        output."""
        out = where / ".pytest-output"
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"cwd": str(where), "args": args, "out": str(out),
                                          "timeout_s": timeout_s}) + "\n")
        self.proc.stdin.flush()
        answer = self.reply()
        self.cpu_s = float(answer["cpu_s"])
        text = out.read_text(errors="replace") if out.exists() else ""
        return (None if answer["timed_out"] else int(answer["rc"])), text

    def close(self) -> None:
        """End the server (EOF on its stdin) and close its pipes."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


_idle: list[Forks] = []
_idle_lock = threading.Lock()


@atexit.register
def close() -> None:
    """Stop the fork servers and remove the template (again at exit)."""
    global _template
    with _idle_lock:
        while _idle:
            _idle.pop().close()
    with _template_lock:
        if _template is not None:
            shutil.rmtree(_template, ignore_errors=True)
            _template = None
            _stamps.clear()


def run(m: Mutant, suite: bool, timeout_s: float) -> tuple[Mutant, bool, float, str]:
    """(mutant, caught, seconds, the last lines pytest printed)."""
    with _idle_lock:
        forks = _idle.pop() if _idle else None
    forks = forks or Forks()
    where = copy_with(m)
    started = time.monotonic()
    tests = ["tests/faults"] if suite else list(m.tests)
    try:
        code, out = forks.pytest(
            where, ["-x", "-q", "-p", "no:cacheprovider", "--timeout", str(int(timeout_s)),
                    *tests], timeout_s + 60)
        with _idle_lock:
            _idle.append(forks)
    except BaseException:
        forks.proc.kill()
        forks.close()
        raise
    finally:
        shutil.rmtree(where, ignore_errors=True)
    check_template()
    # Exit 4 or 5 (a test id that does not exist, nothing collected) is no catch: a
    # mutant naming a renamed test would otherwise pass for caught.
    caught = code not in (0, 4, 5)
    if code is None:
        out += f"\n(timed out after {timeout_s + 60:.0f}s)"
    elif code in (4, 5):
        out += f"\nno test ran (pytest exit {code}): does {tests} exist?"
    lines = out.splitlines()
    # Caught: the first line saying why (so a reader can tell it failed for the right
    # reason); survived: how the run ended.
    why = [line.strip() for line in lines if line.startswith("E ")][:2]
    tail = "\n".join(why if caught and why else
                     [line for line in lines[-6:] if line.strip()])
    return m, caught, time.monotonic() - started, tail


def table() -> str:
    """The mutants as the markdown table of docs/internals/invariants.md (`--table`)."""
    rows = ["| mutant | the bug planted (and what catches it) | fast |", "|---|---|---|"]
    bar = "\\|"  # a | inside a cell
    rows += [f"| `{m.name}` | {m.why.replace('|', bar)} | {'yes' if m.fast else ''} |"
             for m in MUTANTS]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--fast", action="store_true")
    parser.add_argument("--suite", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per mutant")
    parser.add_argument("--table", action="store_true",
                        help="print the docs' table of the mutants and run none")
    args = parser.parse_args(argv)
    if args.table:
        sys.stdout.write(table())
        return 0
    chosen = [m for m in MUTANTS if (not args.names or m.name in args.names)
              and (m.fast or not args.fast)]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        raise SystemExit(f"no such mutant: {', '.join(sorted(unknown))}")
    survived = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for m, caught, seconds, tail in pool.map(lambda m: run(m, args.suite, args.timeout),
                                                 chosen):
            print(f"{'caught  ' if caught else 'SURVIVED'} {m.name:34} {seconds:6.1f}s  "
                  f"{m.why}", flush=True)
            print("    " + tail.replace("\n", "\n    ")[:600], flush=True)
            if not caught:
                survived.append(m.name)
    print(f"{len(chosen) - len(survived)} of {len(chosen)} mutants caught"
          + (f"; survived: {', '.join(survived)}" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
