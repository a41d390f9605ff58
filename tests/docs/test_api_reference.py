"""The built API reference documents every public method: the site is built (`mkdocs build
--strict`, as scripts/test.sh does) and each public method or property of the classes a user
calls, found by introspecting them at runtime, must have an anchor on the site followed by a
non-empty docstring. mkdocstrings reads the source without importing it, so a docstring
attached at import time (the SDK's `_drives`) only reaches the site through
scripts/griffe_drives.py; a method without a docstring is left out of the site silently."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import click
import pytest

import scheduler
import scheduler.outbox
import scheduler.outbox.relay
import scheduler.testing
import scheduler.web
from scheduler.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))

from test_reference import _directives  # noqa: E402

# What a user calls: the clients, what a handler is given and registered with, the testing
# mode, and the outbox (its writer functions and its relay).
CLASSES = [scheduler.Client, scheduler.AsyncClient, scheduler.Registry, scheduler.Context,
           scheduler.SyncContext, scheduler.testing.TestScheduler, scheduler.testing.TestClient,
           scheduler.outbox.relay.OutboxRelay]
MODULES = [scheduler.outbox]


def public_members(cls: type) -> list[str]:
    """The public methods and properties a class's own entry must show: its own, and those it
    inherits from a private base only (`_Driver`); a public base's are on the base's entry."""
    public_bases = [c for c in cls.__mro__[1:]
                    if c is not object and not c.__name__.startswith("_")]
    names = []
    for name in dir(cls):
        if name.startswith("_") or (name not in cls.__dict__
                                    and any(name in base.__dict__ for base in public_bases)):
            continue
        owner = next(c for c in cls.__mro__ if name in c.__dict__)
        if owner is object:
            continue
        value = owner.__dict__[name]
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if inspect.isfunction(value) or isinstance(value, property):
            names.append(name)
    return names


def _documented_as(obj: object) -> str:
    """The dotted name of the reference's directive for `obj`."""
    for name in _directives():
        module, _, attr = name.rpartition(".")
        if getattr(importlib.import_module(module), attr, None) is obj:
            return name
    raise AssertionError(f"no `::: NAME` directive in docs/reference/ documents {obj!r}")


def wanted_anchors() -> list[str]:
    anchors = []
    for cls in CLASSES:
        where = _documented_as(cls)
        anchors += [f"{where}.{name}" for name in public_members(cls)]
    for module in MODULES:
        anchors += [_documented_as(getattr(module, name)) for name in module.__all__
                    if callable(getattr(module, name))]
    return anchors


class _Docstrings(HTMLParser):
    """Anchor id -> the text of the docstring rendered after it (mkdocstrings writes an
    object's heading with the id, then its signature, then a `doc-contents` div; a
    directive's own object has a bare `<a id>` instead of the heading)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, str] = {}
        self._heading: str | None = None
        self._depth = 0
        self._open: dict[int, str] = {}  # div depth -> the anchor whose contents it holds

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        ident, classes = attr.get("id") or "", (attr.get("class") or "").split()
        # A heading, or the bare anchor of a directive's own object (no root heading).
        if ident.startswith("scheduler.") and ("doc-heading" in classes
                                               or (tag == "a" and "href" not in attr)):
            self._heading = ident
            self.found.setdefault(ident, "")
        if tag == "div":
            self._depth += 1
            if "doc-contents" in classes and self._heading is not None:
                self._open[self._depth] = self._heading
                self._heading = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "div":
            self._open.pop(self._depth, None)
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        for anchor in self._open.values():
            self.found[anchor] += data


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
        text=True, timeout=300)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-3000:]}"
    parser = _Docstrings()
    for page in sorted((out / "reference").rglob("*.html")):
        parser.feed(page.read_text())
    return {anchor: " ".join(text.split()) for anchor, text in parser.found.items()}


def test_the_introspection_finds_what_a_user_calls() -> None:
    """The test's own net: it sees methods, properties, inherited ones, and the outbox's
    functions (an empty list would pass everything)."""
    anchors = wanted_anchors()
    for expected in ("scheduler.Client.submit", "scheduler.Client.shards",
                     "scheduler.Client.namespace", "scheduler.AsyncClient.result",
                     "scheduler.Registry.task", "scheduler.Context.once",
                     "scheduler.testing.TestScheduler.advance",
                     "scheduler.testing.TestClient.result", "scheduler.outbox.submit_many",
                     "scheduler.outbox.relay.OutboxRelay.run_once"):
        assert expected in anchors
    assert "scheduler.testing.TestClient.submit" not in anchors  # Client's page has it


# The site's build (mkdocs, the slowest setup of the fast set) happens in the full run, as
# scripts/test.sh's own build does; the introspection above stays in the fast set.
@pytest.mark.slow
def test_every_public_method_has_its_docstring_on_the_site(site: dict[str, str]) -> None:
    missing = [a for a in wanted_anchors() if a not in site]
    empty = [a for a in wanted_anchors() if a in site and not site[a]]
    assert not missing, (f"no anchor on the built reference (a docstring is missing, or the "
                         f"page's directive leaves it out): {missing}")
    assert not empty, f"an anchor with no docstring on the built reference: {empty}"


@pytest.mark.slow
def test_a_driven_method_shows_its_operations_docstring(site: dict[str, str]) -> None:
    """The text on the site is the operation's, the one help() shows."""
    for cls in (scheduler.Client, scheduler.AsyncClient):
        for name in ("submit", "result", "set_queue_limit", "shards"):
            member = inspect.getattr_static(cls, name)
            doc = inspect.getdoc(member.fget if isinstance(member, property) else member)
            assert doc, f"{cls.__name__}.{name} has no docstring at runtime"
            first_words = " ".join(doc.split()[:4]).replace("`", "")
            assert first_words in site[f"scheduler.{cls.__name__}.{name}"]


# A folder of the repository that an installed package does not have (scheduler/ it has).
REPO_ONLY = re.compile(r"\b(?:docs|tests|scripts|bench|deploy)/[\w./-]*|\bREADME\b")


def _public_docstrings() -> dict[str, str]:
    """What `help()` shows of the public API: each public module, name and member."""
    found: dict[str, str] = {}
    spaces = [(scheduler, scheduler.__all__), (scheduler.testing, scheduler.testing.__all__),
              (scheduler.outbox, scheduler.outbox.__all__),
              (scheduler.outbox.relay, ["OutboxRelay", "RelayConfig"]),
              (scheduler.web, ["create_app", "check_bind"])]
    for module, names in spaces:
        found[module.__name__] = module.__doc__ or ""
        for name in names:
            obj = getattr(module, name)
            found[f"{module.__name__}.{name}"] = getattr(obj, "__doc__", None) or ""
            if not inspect.isclass(obj):
                continue
            for member in ["__init__", *public_members(obj)]:
                value = inspect.getattr_static(obj, member)
                value = value.fget if isinstance(value, property) else value
                found[f"{module.__name__}.{name}.{member}"] = value.__doc__ or ""
    return found


def _cli_help(cmd: click.Command = cli, path: str = "sched") -> dict[str, str]:
    found = {path: cmd.help or ""}
    for param in cmd.params:
        if isinstance(param, click.Option):
            found[f"{path} {param.opts[0]}"] = param.help or ""
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            found.update(_cli_help(sub, f"{path} {name}"))
    return found


def test_no_help_text_points_at_a_path_an_installed_user_does_not_have() -> None:
    """help(), the reference and `sched ... --help` name the docs' pages, not repo files."""
    texts = {**_public_docstrings(), **_cli_help()}
    assert "scheduler.Client.submit" in texts and "sched db upgrade --outbox" in texts
    found = {where: REPO_ONLY.findall(text) for where, text in texts.items()}
    found = {where: paths for where, paths in found.items() if paths}
    assert not found, f"help text naming repository paths (name the docs' page): {found}"
