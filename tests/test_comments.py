"""Comments say why, briefly, and stay true: the rules a grep can hold.

(a) No diary words in any tracked text file: "session" followed by a number or after
    this/last/previous, "issue" followed by a number or `#N`, "round N". The console's HTTP
    session, pytest's session scope and a Redis round trip are other words and pass.
(b) In scheduler/, comment lines holding a measured figure stay under 0.2% of comment lines.
    A figure (`figures`) is a number with a unit of time, rate, size or ratio, or any "~N".
    Microseconds, percentages, ratios ("1.2x", "4x slower") and rates ("3,000 jobs/s")
    always count. Milliseconds and fractional seconds count unless a bound comes before
    them ("at most 100 ms", "+ 1 ms", "= 0.5 s"); whole seconds, minutes and sizes only on
    a line with a mark of measurement ("~", "against", "vs", "faster", "costs", "measured",
    a percentage ...). So a limit, a default or a version floor ("timeout_s=30", "every 5 s",
    "capped at 64 MB", "h11 0.16"), a contract, passes. Numbers belong in docs/benchmarks.md
    with the command that produced them; a comment names the command ("bench burndown").
(c) A file a comment or docstring in scheduler/ cites (`name.py`, `dir/name.lua`, ...) exists:
    the cited path must be the tail of a tracked file's path, whole components
    ("keys.py" is scheduler/core/keys.py, "lua/claim.lua" scheduler/scripts/lua/claim.lua),
    or a user's file shown as an example (`EXAMPLES`).
(d) Nothing cites a file outside the repository (DESIGN.md, STYLE.md, a seed or notes file).

Comment lines are counted as a reader meets them: Python `#` comments (tokenize) and
docstrings (ast: module, class and function, every physical line), Lua `--` and `--[[ ]]`
lines and SQL `--` lines. `python tests/test_comments.py` prints the counts and every figure
line, the measurement the rule is held to.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (a) the diary words. The examples below spell them in two pieces, so that this file does
# not hold the words it forbids.
SESSION, ISSUE = "sess" "ion", "iss" "ue"
DIARY = re.compile(
    r"\bsession[\s_-]*\d+"                                        # the word and a number
    r"|\b(?:this|last|previous|next|earlier|later)\s+session\b"    # "the last session"
    r"|\bsession'?s\s+(?:box|machine|numbers)\b"                   # "<word> N's box"
    r"|\bissues?[\s_-]*#?\d+"                                      # with or without a #
    r"|\bthe issue(?:'s\b| asks)|\(issue\b"                         # "the issue's check"
    r"|\bround[\s_-]+\d+\b(?!\s*(?:trip|-trip))",                  # round 4 (not "round 2 trips")
    re.IGNORECASE)

# (b) a measured figure: a number (optionally "~", thousands commas, decimals) and a unit.
_NUM = r"~?\d[\d,]*(?:\.\d+)?(?:-\d[\d,]*(?:\.\d+)?)?"
_UNIT = (r"(?:µs|us|ns|ms|s|sec|seconds?|minutes?|min|h|%|x|×|[kKMG]B|[kKMG]iB|bytes?"
         r"|(?:jobs?|exec(?:utions)?|ops|calls?|entries|slots|submits?|runs?|claims?|msgs?)/s"
         r"|/s|k/s|kB/s|MB/s)")
FIGURE_ANY = re.compile(rf"(?<![\w.=/\"'`+-])({_NUM})\s?({_UNIT})(?![\w/])")
# a number that is a contract, not a measurement: an assignment or default, a bound, a period
_CONTRACT_BEFORE = re.compile(
    r"(?:[=<>+]|\b(?:at most|at least|up to|under|over|every|each|after|within|past|beyond|"
    r"below|above|than|default(?:s| is)?|limit(?:ed)? to|capped at|floor|max(?:imum)?|"
    r"min(?:imum)?|of|by|per|in|waits?|sleeps?|blocks?|lasts?|timeout|lease|grace|"
    r"interval|TTL|ttl|window|period|expires?(?: in)?|older than|keeps?|holds?|to)\s*)$")
# ... unless it has the marks of a measurement around it
_MEASURED = re.compile(
    r"~\d|\b\d[\d,.]*\s?(?:µs|us|ns)(?![\w/])|\b\d[\d,]*\.\d+x\b|\b\d[\d.]*\s?%|\bagainst\b|\bvs\.?\b"
    r"|\b(?:measured|faster|slower|costs?|took|saved?|saves|cut|median|p\d\d|mean)\b"
    r"|/s\b", re.IGNORECASE)

_ABOUT = re.compile(r"(?<![\w.])~\d[\d,]*(?:\.\d+)?")


def figures(line: str) -> list[str]:
    """The measured figures on one comment line (empty: none, or only contracts)."""
    found = []
    for m in FIGURE_ANY.finditer(line):
        number, unit = m.group(1), m.group(2)
        before = line[:m.start()]
        if unit in ("x", "×") and (re.search(r"\dx\d", line[m.start():m.end() + 1]) or (
                " " in m.group(0) and not re.search(r"\.\d|~", number))):
            continue  # "2x3" dimensions, "10 x rate" a product: not a ratio
        if unit in ("s", "h", "min", "minutes", "minute", "sec", "second", "seconds", "ms") \
                and not number.startswith("~") and _CONTRACT_BEFORE.search(before.rstrip()) \
                and not _MEASURED.search(line):
            continue
        if unit in ("s", "h", "min", "minute", "minutes", "sec", "second", "seconds") \
                and "." not in number and not _MEASURED.search(line):
            continue  # whole seconds and minutes in a plain sentence are periods and bounds
        if unit in ("KB", "MB", "GB", "kB", "KiB", "MiB", "GiB", "byte", "bytes") \
                and not _MEASURED.search(line):
            continue  # a size with no mark of measurement is a limit
        found.append(m.group(0))
    # "~N" with no unit is an estimate too ("a commit per ~25 outcomes")
    found += [m.group(0) for m in _ABOUT.finditer(line)
              if not any(m.group(0) in f for f in found)]
    return found


# ---- reading comment lines ------------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    path: str     # relative to ROOT
    number: int   # 1-based
    text: str


def tracked_files(root: Path = ROOT) -> list[Path]:
    """The repository's tracked regular files (links such as the top-level `cli` and `lua`
    are not files of their own); outside a checkout, every file but caches and the venv."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                             check=True).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(root)) for p in root.rglob("*")
                 if not {".git", ".venv", "__pycache__"} & set(p.relative_to(root).parts)]
    paths = [root / n for n in names]
    return sorted(p for p in paths if p.is_file() and not p.is_symlink())


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def python_comments(rel: str, source: str) -> list[Line]:
    lines: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            lines[tok.start[0]] = tok.string
    text = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            doc = node.body[0].value
            for n in range(doc.lineno, (doc.end_lineno or doc.lineno) + 1):
                lines.setdefault(n, text[n - 1])
    return [Line(rel, n, t) for n, t in sorted(lines.items())]


_LONG_OPEN = re.compile(r"--\[(=*)\[")


def dash_comments(rel: str, source: str) -> list[Line]:
    """Lua's and SQL's comment lines: `--` to the end of a line, and Lua's `--[[ ... ]]`
    (any number of `=`) over every line it spans. Strings are skipped on the way."""
    out: dict[int, str] = {}
    text = source.splitlines()
    n, i = 0, 0
    while n < len(text):
        line = text[n]
        quote = None
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\":
                    i += 2
                    continue
                if c == quote:
                    quote = None
            elif c in "'\"":
                quote = c
            elif line.startswith("--", i):
                m = _LONG_OPEN.match(line, i)
                if not m:
                    out[n + 1] = line
                    break
                close = "]" + m.group(1) + "]"
                start = n
                end_at = line.find(close, m.end())
                while end_at < 0 and n + 1 < len(text):
                    n += 1
                    end_at = text[n].find(close)
                for k in range(start, n + 1):
                    out[k + 1] = text[k]
                line, i = text[n], end_at + len(close)
                continue
            i += 1
        n, i = n + 1, 0
    return [Line(rel, k, t) for k, t in sorted(out.items())]


def comment_lines(path: Path, root: Path = ROOT) -> list[Line]:
    stat = path.stat()
    return _comment_lines(path, str(path.relative_to(root)), stat.st_mtime_ns, stat.st_size)


@functools.cache
def _comment_lines(path: Path, rel: str, mtime_ns: int, size: int) -> list[Line]:
    """Read once per version of a file: several checks walk the same lines."""
    if path.suffix not in (".py", ".lua", ".sql"):
        return []
    source = path.read_text(encoding="utf-8")
    return python_comments(rel, source) if path.suffix == ".py" else dash_comments(rel, source)


def scheduler_comment_lines(root: Path = ROOT) -> list[Line]:
    return [line for p in tracked_files(root) if p.is_relative_to(root / "scheduler")
            for line in comment_lines(p, root)]


def figure_lines(lines: list[Line]) -> list[tuple[Line, list[str]]]:
    return [(line, f) for line in lines if (f := figures(line.text))]


FIGURE_SHARE = 0.002


# ---- (c) and (d): cited files --------------------------------------------------------------

CITED = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|lua|sql|md|toml|ya?ml|sh|html|"
                   r"css|js|json|cfg|ini|txt))\b(?![\w(])")
OUTSIDE = re.compile(r"\b(?:DESIGN|STYLE|NOTES|HANDOFF|TODO)\.md\b|\bseeds?/|/work/",
                     re.IGNORECASE)
# Files of a user's own project, named as examples (`sched worker --app tasks:registry`).
EXAMPLES = frozenset({"tasks.py"})


def cited_missing(lines: list[Line], tracked: list[Path],
                  root: Path = ROOT) -> list[tuple[Line, str]]:
    names = {"/" + str(p.relative_to(root)) for p in tracked}
    missing = []
    for line in lines:
        for m in CITED.finditer(line.text):
            cited = m.group(1)
            if cited not in EXAMPLES and not any(n.endswith("/" + cited) for n in names):
                missing.append((line, cited))
    return missing


# ---- the checks, on any tree (the tests plant a violation of each in a copy) ----------------

# This file's examples are the rules' own, and no diary.
_SELF = "tests/test_comments.py"


def diary_lines(root: Path = ROOT) -> list[str]:
    """Every tracked path and text line holding a diary word."""
    hits = []
    for path in tracked_files(root):
        rel = str(path.relative_to(root))
        if DIARY.search(rel):
            hits.append(f"{rel}: the file's name")
        text = text_of(path)
        if text is None or rel == _SELF or not DIARY.search(text):
            continue
        hits += [f"{rel}:{n}: {line.strip()[:120]}"
                 for n, line in enumerate(text.splitlines(), 1) if DIARY.search(line)]
    return hits


def figure_report(root: Path = ROOT) -> tuple[int, list[str]]:
    """(comment lines in scheduler/, the figure lines among them)."""
    lines = scheduler_comment_lines(root)
    return len(lines), [f"{ln.path}:{ln.number}: {f} | {ln.text.strip()}"
                        for ln, f in figure_lines(lines)]


def missing_citations(root: Path = ROOT) -> list[str]:
    return [f"{ln.path}:{ln.number}: {name}" for ln, name in
            cited_missing(scheduler_comment_lines(root), tracked_files(root), root)]


def outside_citations(root: Path = ROOT) -> list[str]:
    hits = []
    for path in tracked_files(root):
        rel = str(path.relative_to(root))
        text = text_of(path)
        if text is None or rel == _SELF or not OUTSIDE.search(text):
            continue
        hits += [f"{rel}:{n}: {line.strip()[:120]}"
                 for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    return hits


def test_no_diary_words_in_the_repository() -> None:
    hits = diary_lines()
    assert not hits, f"{len(hits)} lines name a session, issue or round:\n" + "\n".join(hits)


def test_few_comment_lines_in_scheduler_hold_a_measured_figure() -> None:
    total, held = figure_report()
    assert total > 1000, "the comment reader found too few lines to judge"
    assert len(held) < FIGURE_SHARE * total, (
        f"{len(held)} of {total} comment lines hold a measured figure (at most "
        f"{FIGURE_SHARE:.1%}); move the numbers to docs/benchmarks.md and name the bench "
        "command instead:\n" + "\n".join(held))


def test_every_file_a_comment_cites_exists() -> None:
    missing = missing_citations()
    assert not missing, "comments cite files that are not in the repository:\n" + \
        "\n".join(missing)


def test_nothing_cites_a_file_outside_the_repository() -> None:
    hits = outside_citations()
    assert not hits, "lines cite files outside the repository (state what they say):\n" + \
        "\n".join(hits)


def test_a_planted_violation_of_each_rule_is_found(tmp_path: Path) -> None:
    """A copy of part of the tree (no .git: every file counts), one violation of each rule
    planted in it: each check reports what it reported on the copy before, and the plant."""
    for path in tracked_files():
        rel = path.relative_to(ROOT)
        if rel.parts[:2] in (("scheduler", "core"), ("scheduler", "scripts")):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(path.read_bytes())
    before = (set(diary_lines(tmp_path)), figure_report(tmp_path),
              set(missing_citations(tmp_path)), set(outside_citations(tmp_path)))
    total, held = before[1]
    plants = "".join(f"# planted {i}: a read costs ~{i}.5 us\n"
                     for i in range(int(FIGURE_SHARE * total) + 1))
    planted = tmp_path / "scheduler" / "core" / "planted.py"
    planted.write_text(f'"""Measured in {SESSION} 9 (see {ISSUE} 12)."""\n' + plants
                       + "# keys.py and lua/claim.lua, then sdk_core.py (STYLE.md item 1)\n")
    diary = set(diary_lines(tmp_path)) - before[0]
    assert diary == {"scheduler/core/planted.py:1: " + planted.read_text().splitlines()[0]}
    total_after, held_after = figure_report(tmp_path)
    assert len(held_after) - len(held) == int(FIGURE_SHARE * total) + 1
    assert len(held_after) >= FIGURE_SHARE * total_after  # the rule fails on the plants alone
    missing = set(missing_citations(tmp_path)) - before[2]
    last = len(planted.read_text().splitlines())
    assert missing == {f"scheduler/core/planted.py:{last}: sdk_core.py",
                       f"scheduler/core/planted.py:{last}: STYLE.md"}
    outside = set(outside_citations(tmp_path)) - before[3]
    assert outside == {f"scheduler/core/planted.py:{last}: " + planted.read_text().splitlines()[-1]}


# ---- the rules, watched firing --------------------------------------------------------------

@pytest.mark.parametrize("line, diary", [
    (f"(bench/RESULTS.md, {ISSUE} 18 {SESSION} 11)", True),
    (f"measured in {SESSION}17", True),
    ("as the last session found", True),
    (f"on {SESSION} 17's box", True),
    (f"see {ISSUE} #33", True),
    ("The issue's check: 3 workers", True),
    ("from round 4 on", True),
    ("the session cookie's Max-Age", False),
    ('@pytest.fixture(scope="session")', False),
    ("a session's own field, from its own page", False),
    ("one round trip per batch", False),
    ("every issue the linter raises", False),
])
def test_diary_rule(line: str, diary: bool) -> None:
    assert bool(DIARY.search(line)) == diary


@pytest.mark.parametrize("line, figure", [
    ("# a trim costs ~10 us whatever it drops", True),
    ("the HMGET was ~28% of this script per slot", True),
    ("the burn-down runs ~1.2x faster so", True),
    ("members: 3.4 against 0.5 ms", True),
    ("16 against 24-36 us of Postgres per job", True),
    ("ours 57,633 vs BullMQ 17,241 executions/s", True),
    ("saved ~3 us of Postgres per job", True),
    ("the snapshotter collected for 0.36 s a minute, not 4.7", True),
    ("~0.06 round trips per job (a commit per ~25 outcomes)", True),
    ("a count over any 10 s stays within a few percent of 10 x rate", False),
    ("restores 'last fire + 1 ms', or a", False),
    ("a sixth of the lease, at least 0.5 s", False),
    ("# timeout_s=30 unless the job says otherwise", False),
    ("the lease lasts 30 s unless renewed", False),
    ("every 5 s the heartbeat writes", False),
    ("block at most 100 ms on XREADGROUP", False),
    ("Floors past the published fixes: Starlette 1.3.1, h11 0.16", False),
    ("a batch of at most 500 entries", False),
    ("capped at 64 MB", False),
])
def test_figure_rule(line: str, figure: bool) -> None:
    assert bool(figures(line)) == figure, figures(line)


def test_comment_readers_see_every_kind(tmp_path: Path) -> None:
    py = 'def f():\n    """Why.\n\n    More."""\n    x = "# not a comment"  # a comment\n'
    assert [line.number for line in python_comments("f.py", py)] == [2, 3, 4, 5]
    lua = ('--[[ head\n  body ]]\nlocal s = "-- not"\nlocal t = 1 -- tail\n'
           '--[==[ long\n]==] local u = 2\n')
    assert [line.number for line in dash_comments("f.lua", lua)] == [1, 2, 4, 5, 6]


def test_cited_files_rule() -> None:
    tracked = [ROOT / "scheduler/core/keys.py", ROOT / "scheduler/scripts/lua/claim.lua"]
    lines = [Line("x.py", 1, "# keys.py and lua/claim.lua and scripts/lua/claim.lua"),
             Line("x.py", 2, "# sdk_core.py, scheduler/keys.py, script_stream.py")]
    assert [name for _, name in cited_missing(lines, tracked)] == \
        ["sdk_core.py", "scheduler/keys.py", "script_stream.py"]
    assert OUTSIDE.search("(DESIGN.md invariant 6)") and OUTSIDE.search("STYLE.md item 11")
    assert not OUTSIDE.search("docs/benchmarks.md")


def main() -> None:
    """Print the measurement: comment lines in scheduler/ and the figure lines among them,
    then the diary lines and the missing or outside citations of the repository."""
    total, held = figure_report()
    for line in held:
        print(f"figure {line}")
    for line in missing_citations():
        print(f"missing {line}")
    for line in outside_citations():
        print(f"outside {line}")
    for line in diary_lines():
        print(f"diary {line}")
    print(f"{len(held)} of {total} comment lines in scheduler/ hold a measured figure "
          f"({len(held) / max(total, 1):.2%}; the rule: under {FIGURE_SHARE:.1%})")


if __name__ == "__main__":
    sys.exit(main())
