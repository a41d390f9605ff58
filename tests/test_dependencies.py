"""The dependency floors in pyproject.toml: past the published security fixes of what the
console parses and renders, so no install resolves to a release with a known hole in it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# The release with the last published fix each floor must reach (pyproject.toml says which).
FIXED = {
    "starlette": "1.3.1",  # form() limits for urlencoded bodies; 0.40.0: multipart DoS
    "python-multipart": "0.0.31",  # querystring and Content-Length DoS; 0.0.18: boundary DoS
    "jinja2": "3.1.6",  # sandbox escapes (3.1.5, 3.1.6)
    "h11": "0.16",  # uvicorn's HTTP/1.1 parser: chunked-encoding request smuggling
}


def _floors() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for text in [*project["dependencies"], *project["optional-dependencies"]["web"]]:
        req = Requirement(text)
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
        found[req.name.lower()] = max(lows) if lows else Version("0")
    return found


def test_the_console_dependencies_are_past_their_published_fixes() -> None:
    floors = _floors()
    late = {name: str(floors.get(name, "none")) for name, fixed in FIXED.items()
            if floors.get(name, Version("0")) < Version(fixed)}
    assert not late, f"floors below a published fix ({FIXED}): {late}"
