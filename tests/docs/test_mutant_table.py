"""The docs' table of the mutants is the list itself: a mutant added, renamed or reworded in
tests/faults/mutants.py without the table (or the reverse) fails here. The table is
`tests/faults/mutate.py --table`, pasted in docs/internals/invariants.md."""

from __future__ import annotations

from pathlib import Path

from faults.mutate import table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "internals" / "invariants.md"


def test_the_invariants_page_lists_every_mutant_as_the_list_has_it() -> None:
    assert table() in PAGE.read_text(), (
        "docs/internals/invariants.md's table of mutants differs from tests/faults/mutants.py: "
        "paste the output of `.venv/bin/python tests/faults/mutate.py --table` over it")
