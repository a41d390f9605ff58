"""SQL lives in `.sql` files under `<package>/sql/<dialect>/` (scheduler/history/'s, and
scheduler/outbox/'s): numbered migrations (a four-digit version, `_`, a name) and named
queries (`-- name: X` starts query X in `queries.sql`)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.M)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


@cache
def queries(dialect: str, file: str = "queries.sql",
            package: str = "scheduler.history") -> dict[str, str]:
    text = resources.files(package).joinpath("sql", dialect, file).read_text()
    parts = _NAME.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


@cache
def migrations(dialect: str, package: str = "scheduler.history") -> list[tuple[int, str]]:
    """(version, script) in version order."""
    out = []
    for entry in resources.files(package).joinpath("sql", dialect).iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            out.append((int(m.group(1)), entry.read_text()))
    return sorted(out)
