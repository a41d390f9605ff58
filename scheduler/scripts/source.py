"""The Lua scripts' text as Redis runs it: read from `lua/`, `--- @include "_lib.lua"`
replaced by that file's text, and each `R.NAME` (reply code) and `DEFAULT.name` (job-field
default) by its value (with_constants). calls.py builds the calls; the transport
(redis/transport.py) loads the scripts and calls them by SHA."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from scheduler.core.cron import LATEST_MS
from scheduler.core.ledger import FIRES_CAP
from scheduler.core.models import ENUM_FIELDS, JOB_FIELD_DEFAULTS, SUBMIT_FIELDS
from scheduler.scripts.replies import Code

NAMES = ("submit", "claim", "complete", "fail", "release", "promote", "heartbeat", "reclaim",
         "cancel", "replay", "purge", "once", "requeue", "materialize", "lease", "stats",
         "trim_history", "retire", "expire", "restore", "sweep", "delete_job", "trigger",
         "redefine", "acquire", "clean_lanes", "take",
         "key_stats", "forget")
_INCLUDE = re.compile(r'^--- @include "([\w.]+)"$', re.M)


def _text(name: str) -> str:
    return resources.files("scheduler.scripts").joinpath("lua", f"{name}.lua").read_text()


def read_source(name: str) -> str:
    """The script with each included file inlined: only the include's functions the script
    calls (and those they call), so a call does not define a dozen closures it never uses
    (bench script_ab)."""
    text = _text(name)
    code = _code(text)
    return _INCLUDE.sub(lambda m: _used(_text(m.group(1).removesuffix(".lua")), code), text)


_FUNCTION = re.compile(r"^(?:--[^\n]*\n)*local function (\w+)\(.*?^end\n", re.M | re.S)


def _code(text: str) -> str:
    """Lua text without its comments: what a script really calls."""
    return re.sub(r"--[^\n]*", "", re.sub(r"--\[\[.*?\]\]", "", text, flags=re.S))


def _used(lib: str, code: str) -> str:
    """`lib`'s top-level functions that `code` calls, directly or through each other, in
    their order (a function can only call those defined before it); the rest dropped."""
    found = list(_FUNCTION.finditer(lib))
    if not found:
        return lib
    # One scan per text for every name it calls, not one search per function and text: the
    # scripts are built at import, so this is part of every `sched` start.
    wanted = {m.group(1) for m in found} & _called(code)
    for m in reversed(found):
        if m.group(1) in wanted:
            wanted |= _called(_code(m.group(0)))
    return lib[:found[0].start()] + "".join(m.group(0) for m in found if m.group(1) in wanted)


_CALL = re.compile(r"\b(\w+)\(")


def _called(code: str) -> set[str]:
    """Every word of `code` right before a "(": the names it calls."""
    return set(_CALL.findall(code))


def header_keys(name: str) -> int:
    """How many KEYS the script's header documents (a test compares it with the wrappers)."""
    header = read_source(name).split("]]", 1)[0]
    return len(set(re.findall(r"KEYS\[(\d+)\]", header)))


@dataclass(frozen=True)
class _Source:
    name: str
    text: str
    sha: str


def _field_types() -> str:
    """JOB_FIELD_TYPES: each field submit.lua accepts, and what its value may be: "n" a
    whole number (a default that is an int), "f" a number (a float default), "s" a string,
    or a table of the values an enum field may hold (its default too)."""
    def kind(name: str) -> str:
        value = JOB_FIELD_DEFAULTS.get(name, "")
        if name in ENUM_FIELDS:
            allowed = sorted({*(v.value for v in ENUM_FIELDS[name]), str(value)})
            return "{" + ", ".join(f"['{v}'] = true" for v in allowed) + "}"
        return "'s'" if isinstance(value, str) else "'n'" if isinstance(value, int) else "'f'"

    return "{" + ", ".join(f"{name} = {kind(name)}" for name in SUBMIT_FIELDS) + "}"


# Names a script may use for a value of the Python side's (with_constants).
_NAMED = {"LATEST_MS": str(LATEST_MS), "JOB_FIELD_TYPES": _field_types(),
          "FIRES_CAP": str(FIRES_CAP)}


def with_constants(source: str) -> str:
    """The text Redis runs: each `R.NAME` (a reply code, replies.Code), `DEFAULT.name` (a
    job-field default, models.JOB_FIELD_DEFAULTS: a field equal to its default is not
    stored, so a script reading it must know the default) and each name of _NAMED replaced
    by its value, so Lua and Python read one table each at no cost per call (a Lua table
    built on every call costs Redis on every call: bench script_ab). A name neither table has
    fails here, at import, not as a nil in Lua."""
    def value(m: re.Match[str]) -> str:
        code, default, named = m.groups()
        if code is not None:
            return str(int(Code[code]))
        if default is not None:
            number = JOB_FIELD_DEFAULTS[default]
            if not isinstance(number, int | float):
                raise KeyError(f"DEFAULT.{default} is not a number")
            return repr(number)
        return _NAMED[named]

    return _CONSTANT.sub(value, source)


# One pass over the text for all three kinds: the scripts are built at import, so this is
# part of every `sched` start.
_CONSTANT = re.compile(r"\b(?:R\.([A-Z_]+)|DEFAULT\.([a-z_]+)|(" + "|".join(_NAMED) + r"))\b")

SOURCES = {
    n: _Source(n, t, hashlib.sha1(t.encode(), usedforsecurity=False).hexdigest())
    for n, t in ((n, with_constants(read_source(n))) for n in NAMES)
}
