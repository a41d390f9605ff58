"""The Lua scripts' text as Redis runs it: read from `lua/`, `--- @include "_lib.lua"`
replaced by that file's text, and each `R.NAME` (reply code) and `DEFAULT.name` (job-field
default) by its value (with_constants). scripts.py loads and calls them by SHA."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from .models import JOB_FIELD_DEFAULTS
from .replies import Code

NAMES = ("submit", "claim", "complete", "fail", "release", "promote", "heartbeat", "reclaim",
         "cancel", "replay", "purge", "once", "requeue", "materialize", "lease", "stats",
         "trim_history", "retire", "restore", "history_read", "sweep", "delete_job", "trigger",
         "redefine", "acquire")
_INCLUDE = re.compile(r'^--- @include "([\w.]+)"$', re.M)


def read_source(name: str) -> str:
    text = resources.files("scheduler").joinpath("lua", f"{name}.lua").read_text()
    return _INCLUDE.sub(lambda m: read_source(m.group(1).removesuffix(".lua")), text)


def header_keys(name: str) -> int:
    """How many KEYS the script's header documents (a test compares it with the wrappers)."""
    header = read_source(name).split("]]", 1)[0]
    return len(set(re.findall(r"KEYS\[(\d+)\]", header)))


@dataclass(frozen=True)
class _Source:
    name: str
    text: str
    sha: str


def with_constants(source: str) -> str:
    """The text Redis runs: each `R.NAME` (a reply code, replies.Code) and `DEFAULT.name` (a
    job-field default, models.JOB_FIELD_DEFAULTS: a field equal to its default is not
    stored, so a script reading it must know the default) replaced by its value, so Lua and
    Python read one table each at no cost per call (a Lua table built on every call costs
    Redis ~0.5 us). A name neither table has fails here, at import, not as a nil in Lua."""
    def code(m: re.Match[str]) -> str:
        return str(int(Code[m.group(1)]))

    def default(m: re.Match[str]) -> str:
        value = JOB_FIELD_DEFAULTS[m.group(1)]
        if not isinstance(value, int | float):
            raise KeyError(f"DEFAULT.{m.group(1)} is not a number")
        return repr(value)

    return _DEFAULT.sub(default, _CODE.sub(code, source))


_CODE = re.compile(r"\bR\.([A-Z_]+)\b")
_DEFAULT = re.compile(r"\bDEFAULT\.([a-z_]+)\b")

SOURCES = {
    n: _Source(n, t, hashlib.sha1(t.encode()).hexdigest())
    for n, t in ((n, with_constants(read_source(n))) for n in NAMES)
}
