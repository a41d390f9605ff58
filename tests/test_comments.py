"""Comments say why, briefly, and stay true: the rules a grep can hold.

(a) No diary words in any tracked text file: "session" followed by a number or after
    this/last/previous, "issue" followed by a number or `#N`, "round N". The console's HTTP
    session, pytest's session scope and a Redis round trip are other words and pass.
(b) In scheduler/, comment lines holding a measured figure stay under 0.2% of comment lines.
    A figure (`FIGURE`) is a number with a unit of time, rate, size or ratio ("14 us",
    "~28%", "1.2x", "3,000 jobs/s", "0.5 ms"); a limit, a default or a version floor is a
    contract, not a measurement, and the rule leaves it alone when it reads as one
    ("timeout_s=30", "every 5 s", "at most 100 ms"). Numbers belong in docs/benchmarks.md with
    the command that produced them; a comment names the command ("bench burndown").
(c) A file a comment or docstring in scheduler/ cites (`name.py`, `dir/name.lua`, ...) exists:
    the cited path must be the tail of a tracked file's path, whole components
    ("keys.py" is scheduler/core/keys.py, "lua/claim.lua" scheduler/scripts/lua/claim.lua).
(d) Nothing cites a file outside the repository (DESIGN.md, STYLE.md, a seed or notes file).

Comment lines are counted as a reader meets them: Python `#` comments (tokenize) and
docstrings (ast: module, class and function, every physical line), Lua `--` and `--[[ ]]`
lines and SQL `--` lines. `python tests/test_comments.py` prints the counts and every figure
line, the measurement the rule is held to.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (a) the diary words
DIARY = re.compile(
    r"\bsession[\s_-]*\d+"                                        # session 17, session17
    r"|\b(?:this|last|previous|next|earlier|later)\s+session\b"    # "the last session"
    r"|\bsession'?s\s+(?:box|machine|numbers)\b"                   # "session 17's box"
    r"|\bissues?[\s_-]*#?\d+"                                      # issue 18, issue #18
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


def tracked_files() -> list[Path]:
    """The repository's tracked regular files (links such as the top-level `cli` and `lua`
    are not files of their own)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a checkout: every file but the venv
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if not {".git", ".venv", "__pycache__"} & set(p.relative_to(ROOT).parts)]
    paths = [ROOT / n for n in names]
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
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            doc = node.body[0].value
            text = source.splitlines()
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


def comment_lines(path: Path) -> list[Line]:
    rel = str(path.relative_to(ROOT))
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return python_comments(rel, source)
    if path.suffix in (".lua", ".sql"):
        return dash_comments(rel, source)
    return []


def scheduler_comment_lines() -> list[Line]:
    return [line for p in tracked_files() if p.is_relative_to(ROOT / "scheduler")
            for line in comment_lines(p)]


def figure_lines(lines: list[Line]) -> list[tuple[Line, list[str]]]:
    return [(line, f) for line in lines if (f := figures(line.text))]


FIGURE_SHARE = 0.002


# ---- (c) and (d): cited files --------------------------------------------------------------

CITED = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|lua|sql|md|toml|ya?ml|sh|html|"
                   r"css|js|json|cfg|ini|txt))\b(?![\w(])")
OUTSIDE = re.compile(r"\b(?:DESIGN|STYLE|NOTES|HANDOFF|TODO)\.md\b|\bseeds?/|/work/|~/\.",
                     re.IGNORECASE)


def cited_missing(lines: list[Line], tracked: list[Path]) -> list[tuple[Line, str]]:
    names = {"/" + str(p.relative_to(ROOT)) for p in tracked}
    missing = []
    for line in lines:
        for m in CITED.finditer(line.text):
            cited = m.group(1)
            if not any(n.endswith("/" + cited) for n in names):
                missing.append((line, cited))
    return missing


# ---- the tests ------------------------------------------------------------------------------

def _diary(files: list[Path]) -> list[str]:
    hits = []
    for path in files:
        text = text_of(path)
        if text is None or path == Path(__file__).resolve():  # its examples are the rule's
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if DIARY.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    return hits


def test_no_diary_words_in_the_repository() -> None:
    hits = _diary(tracked_files())
    assert not hits, f"{len(hits)} lines name a session, issue or round:\n" + "\n".join(hits)


def test_few_comment_lines_in_scheduler_hold_a_measured_figure() -> None:
    lines = scheduler_comment_lines()
    held = figure_lines(lines)
    assert len(lines) > 1000, "the comment reader found too few lines to judge"
    assert len(held) < FIGURE_SHARE * len(lines), (
        f"{len(held)} of {len(lines)} comment lines hold a measured figure (at most "
        f"{FIGURE_SHARE:.1%}); move the numbers to docs/benchmarks.md and name the bench "
        "command instead:\n" + "\n".join(f"{ln.path}:{ln.number}: {f} | {ln.text.strip()}"
                                         for ln, f in held))


def test_every_file_a_comment_cites_exists() -> None:
    missing = cited_missing(scheduler_comment_lines(), tracked_files())
    assert not missing, "comments cite files that are not in the repository:\n" + "\n".join(
        f"{ln.path}:{ln.number}: {name}" for ln, name in missing)


def test_nothing_cites_a_file_outside_the_repository() -> None:
    hits = []
    for path in tracked_files():
        text = text_of(path)
        if text is None or path == Path(__file__).resolve():
            continue
        hits += [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
                 for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, "lines cite files outside the repository (state what they say):\n" + \
        "\n".join(hits)


# ---- the rules, watched firing --------------------------------------------------------------

@pytest.mark.parametrize("line, diary", [
    ("(bench/RESULTS.md, issue 18 session 11)", True),
    ("measured in session17", True),
    ("as the last session found", True),
    ("on session 17's box", True),
    ("see issue #33", True),
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
    """Print the measurement: comment lines in scheduler/, the figure lines among them, the
    diary lines and missing citations of the repository."""
    lines = scheduler_comment_lines()
    held = figure_lines(lines)
    for ln, found in held:
        print(f"figure {ln.path}:{ln.number}: {found} | {ln.text.strip()}")
    for ln, name in cited_missing(lines, tracked_files()):
        print(f"missing {ln.path}:{ln.number}: {name}")
    for hit in _diary(tracked_files()):
        print(f"diary {hit}")
    print(f"{len(held)} of {len(lines)} comment lines in scheduler/ hold a measured figure "
          f"({len(held) / max(len(lines), 1):.2%}; the rule: under {FIGURE_SHARE:.1%})")


if __name__ == "__main__":
    sys.exit(main())
