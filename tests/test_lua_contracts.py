"""The contracts the Lua scripts share with Python, each declared once and checked here: the
event types they write (scheduler/events.py) and the key suffixes they append to a shard's
prefix (scheduler/keys.py)."""

from __future__ import annotations

import inspect
import re

import pytest

from scheduler import scripts
from scheduler.events import FINAL_STATUS, SLOT_ONLY, EventType
from scheduler.keys import SHARD_SUFFIXES, Keys

SOURCES = {name: scripts.read_source(name) for name in (*scripts.NAMES, "_lib")}
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
                  EventType.OWNER}
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
