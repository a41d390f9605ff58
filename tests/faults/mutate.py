"""Run the planted bugs of tests/faults/mutants.py: each is applied to a fresh copy of the
code and its tests run there; a mutant the tests do not catch is a failure of the suite.

    .venv/bin/python tests/faults/mutate.py [--fast] [--suite] [--jobs N] [NAME ...]

--fast runs only the mutants marked fast (what CI runs), --suite runs the whole fault suite
against each mutant instead of the tests named for it, NAME picks mutants by name. Prints
one line per mutant and exits 1 if any survived.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from faults.mutants import MUTANTS, Mutant  # noqa: E402

# docs/, scripts/ and mkdocs.yml: tests/docs builds the site (scripts/griffe_drives.py feeds
# its API reference).
COPIED = ("scheduler", "tests", "pyproject.toml", "docs", "scripts", "mkdocs.yml")


def copy_with(m: Mutant) -> Path:
    """A copy of the code with the mutant applied; the replaced text must occur once."""
    where = Path(tempfile.mkdtemp(prefix=f"sched-mutant-{m.name}-"))
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, where / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, where / name)
    target = where / m.path
    text = target.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutant {m.name}: the text to replace occurs {text.count(m.old)} "
                         f"times in {m.path}; update tests/faults/mutants.py")
    target.write_text(text.replace(m.old, m.new))
    return where


def run(m: Mutant, suite: bool, timeout_s: float) -> tuple[Mutant, bool, float, str]:
    """(mutant, caught, seconds, the last lines pytest printed)."""
    where = copy_with(m)
    started = time.monotonic()
    tests = ["tests/faults"] if suite else list(m.tests)
    env = {**os.environ, "PYTHONPATH": str(where), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
             "--timeout", str(int(timeout_s)), *tests],
            cwd=where, env=env, capture_output=True, text=True, timeout=timeout_s + 60)
        # Exit 4 or 5 (a test id that does not exist, nothing collected) is no catch: a
        # mutant naming a renamed test would otherwise pass for caught.
        caught, out = done.returncode not in (0, 4, 5), done.stdout
        if done.returncode in (4, 5):
            out += f"\nno test ran (pytest exit {done.returncode}): does {tests} exist?"
    except subprocess.TimeoutExpired as exc:
        caught, out = True, f"(timed out: {exc})"
    finally:
        shutil.rmtree(where, ignore_errors=True)
    lines = out.splitlines()
    # Caught: the first line saying why (so a reader can tell it failed for the right
    # reason); survived: how the run ended.
    why = [line.strip() for line in lines if line.startswith("E ")][:2]
    tail = "\n".join(why if caught and why else
                     [line for line in lines[-6:] if line.strip()])
    return m, caught, time.monotonic() - started, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--fast", action="store_true")
    parser.add_argument("--suite", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per mutant")
    args = parser.parse_args(argv)
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
