"""The contracts the Lua scripts share with Python, each declared once and checked here: the
event types they write (scheduler/core/events.py) and the key suffixes they append to a shard's
prefix (scheduler/core/keys.py) and the reply codes they answer (scheduler/scripts/replies.py)."""

from __future__ import annotations

import inspect
import re

import pytest

from scheduler.core.events import FINAL_STATUS, SLOT_ONLY, EventType
from scheduler.core.keys import SHARD_SUFFIXES, Keys
from scheduler.core.models import JOB_FIELD_DEFAULTS
from scheduler.scripts import source as sources
from scheduler.scripts.replies import ANSWERS, Code

SOURCES = {name: sources.read_source(name) for name in (*sources.NAMES, "_lib")}
EMIT = re.compile(r"emit\(\s*\w+\s*,\s*\w+\s*,\s*\w+\s*,\s*'([a-z_]+)'")
XADD_TYPE = re.compile(r"'type',\s*'([a-z_]+)'")
EMIT_ANY = re.compile(r"(?<!function )\bemit\(")
SUFFIX = re.compile(r"(?:prefix|KEYS\[1\])\s*\.\.\s*'([A-Za-z_:]+)'")


def _without_comments(source: str) -> str:
    source = re.sub(r"--\[\[.*?\]\]", "", source, flags=re.S)
    return re.sub(r"--[^\n]*", "", source)


def _written_types() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, source in SOURCES.items():
        code = _without_comments(source)
        found = set(EMIT.findall(code)) | set(XADD_TYPE.findall(code))
        # every emit( names its type literally, so this test sees them all
        calls = len(EMIT_ANY.findall(code))
        assert calls == len(EMIT.findall(code)), f"{name}.lua: an emit() without a literal type"
        for kind in found:
            out.setdefault(kind, set()).add(name)
    return out


def test_every_event_type_a_script_writes_is_declared_and_every_declared_one_is_written() -> None:
    written = _written_types()
    assert set(written) - set(EventType) == set(), {k: written[k] for k in
                                                    set(written) - set(EventType)}
    assert set(EventType) - set(written) == set()


def test_the_snapshotter_and_the_store_know_every_event_type() -> None:
    """A type missing from SLOT_ONLY makes the snapshotter copy the job again (harmless but
    costly); one that ends a slot must be in FINAL_STATUS for a slot whose hash is gone."""
    job_events = {EventType.SUBMITTED, EventType.MATERIALIZED, EventType.MISSED,
                  EventType.OWNER, EventType.DELETED, EventType.TRIGGERED,
                  EventType.REDEFINED, EventType.NOT_RUN}
    assert set(EventType) == SLOT_ONLY | job_events and not SLOT_ONLY & job_events
    assert {EventType.SUCCEEDED, EventType.DEAD, EventType.CANCELLED,
            EventType.LOST} <= set(FINAL_STATUS)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_key_a_script_builds_has_a_declared_suffix(name: str) -> None:
    used = set(SUFFIX.findall(_without_comments(SOURCES[name])))
    assert used <= SHARD_SUFFIXES, f"{name}.lua appends undeclared suffixes {used - SHARD_SUFFIXES}"


def test_every_shard_key_keys_builds_has_a_declared_suffix() -> None:
    keys = Keys("ns")
    prefix = keys.prefix(3)
    built = []
    for name, method in inspect.getmembers(keys, inspect.ismethod):
        params = list(inspect.signature(method).parameters)
        if not params or params[0] != "shard" or name == "prefix":
            continue
        key = method(3, *(["x"] * (len(params) - 1)))
        assert key.startswith(prefix), name
        rest = key[len(prefix):]
        assert any(rest == s or (s.endswith(":") and rest.startswith(s))
                   for s in SHARD_SUFFIXES), f"Keys.{name} builds {key!r}"
        built.append(name)
    assert len(built) >= 13


CODE_NAME = re.compile(r"\bR\.([A-Z_]+)")
# A reply slot or a return given a bare number where a code belongs.
BARE_CODE = re.compile(r"reply\[[^\]]+\]\s*=\s*\{?\s*-?\d|return\s*(\{\s*-?\d+\s*[,}]|-?\d+\s*(end\b|$))",
                       re.M)


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_script_answers_exactly_the_codes_declared_for_it(name: str) -> None:
    """A misspelt `R.NAME` is nil in Lua: the reply array would end early, silently."""
    code = _without_comments(SOURCES[name])
    used = set(CODE_NAME.findall(code))
    assert used <= set(Code.__members__), f"{name}.lua uses unknown codes {used - set(Code.__members__)}"
    assert used == {c.name for c in ANSWERS[name]}, name
    assert not BARE_CODE.search(code), f"{name}.lua answers a bare number: {BARE_CODE.search(code)}"


def test_scripts_without_codes_use_none() -> None:
    for name in set(SOURCES) - set(ANSWERS) - {"_lib"}:
        assert not CODE_NAME.search(_without_comments(SOURCES[name])), name


def test_each_code_has_one_number_and_lua_runs_it() -> None:
    assert len({int(c) for c in Code}) == len(Code) and 0 not in {int(c) for c in Code}
    for name in ANSWERS:
        loaded = _without_comments(sources.SOURCES[name].text)
        assert not CODE_NAME.search(loaded) and "DEFAULT." not in loaded, name
    assert sources.with_constants("x = R.STALE, DEFAULT.jitter") == "x = 2, 0.2"
    with pytest.raises(KeyError):
        sources.with_constants("return R.STAEL")  # a misspelt code fails at import


DEFAULT_NAME = re.compile(r"\bDEFAULT\.(\w+)")
BARE_DEFAULT = re.compile(r"tonumber\(job\[\d+\]\)\s+or\s+-?[\d.]+")


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_job_field_defaults_come_from_models(name: str) -> None:
    """job_fields stores no field equal to its default: a script must read the default from
    the one table (DEFAULT, models.JOB_FIELD_DEFAULTS), not write it again."""
    code = _without_comments(SOURCES[name])
    assert set(DEFAULT_NAME.findall(code)) <= set(JOB_FIELD_DEFAULTS), name
    assert not BARE_DEFAULT.search(code), f"{name}.lua: {BARE_DEFAULT.search(code)}"


_LIB_FUNCTIONS = set(re.findall(r"^local function (\w+)\(", SOURCES["_lib"], re.M))


@pytest.mark.parametrize("name", sources.NAMES)
def test_a_script_inlines_the_lib_functions_it_calls_and_no_others(name: str) -> None:
    text = sources.read_source(name)
    defined = set(re.findall(r"^local function (\w+)\(", text, re.M)) & _LIB_FUNCTIONS
    code = _without_comments(text)
    called = {f for f in _LIB_FUNCTIONS
              if re.search(rf"(?<!function )\b{f}\(", code)}
    assert called <= defined, f"{name}.lua calls {sorted(called - defined)} without them"
    assert defined <= called, f"{name}.lua inlines {sorted(defined - called)}, never called"
    for f in defined:  # each defined before its first call, as Lua locals must be
        assert code.index(f"local function {f}(") < re.search(
            rf"(?<!function )\b{f}\(", code).start()
