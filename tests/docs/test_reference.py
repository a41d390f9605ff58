"""The API reference (docs/reference/) lists every public name: each name of `scheduler.__all__`
and `scheduler.testing.__all__`, and the console's `create_app`, has its mkdocstrings
directive (`::: scheduler.Name`), and every directive names something that imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import scheduler
import scheduler.testing

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def _directives() -> dict[str, str]:
    """Dotted name -> the page whose directive documents it."""
    found: dict[str, str] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for name in _DIRECTIVE.findall(page.read_text()):
            assert name not in found, f"{name} is documented on {found[name]} and {page.name}"
            found[name] = page.name
    return found


def _wanted() -> list[str]:
    return ([f"scheduler.{n}" for n in scheduler.__all__]
            + [f"scheduler.testing.{n}" for n in scheduler.testing.__all__]
            + ["scheduler.web.create_app"])


def test_every_public_name_has_its_directive() -> None:
    documented = _directives()
    missing = [n for n in _wanted() if n not in documented]
    assert not missing, f"not in docs/reference/ (add `::: NAME` to a page): {missing}"


def test_every_directive_names_something_that_imports() -> None:
    for name in _directives():
        module, _, attr = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), f"::: {name} names nothing"


def test_every_reference_page_is_linked_from_the_index() -> None:
    index = (REFERENCE / "index.md").read_text()
    pages = sorted(p.name for p in REFERENCE.glob("*.md") if p.name != "index.md")
    unlinked = [p for p in pages if f"]({p})" not in index]
    assert not unlinked, f"docs/reference/index.md does not link {unlinked}"
