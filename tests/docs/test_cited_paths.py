"""Every file or folder of the repository the docs cite (`scheduler/...`, `tests/...`,
`bench/...`) exists: code moves, and a page that names where it was sends a reader nowhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_CITED = re.compile(r"\b((?:scheduler|tests|bench)/[A-Za-z0-9_./-]*[A-Za-z0-9_])")
# Made by the benches when they run (git-ignored), not kept in the repository.
_GENERATED = ("bench/out", "bench/.peers")


def test_every_path_the_docs_cite_exists() -> None:
    missing = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for path in sorted(set(_CITED.findall(page.read_text()))):
            if not path.startswith(_GENERATED) and not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)
