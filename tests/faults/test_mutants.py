"""The fast mutants (tests/faults/mutants.py) run on every change: each planted bug must
make its tests fail. The whole set: `.venv/bin/python tests/faults/mutate.py`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .mutants import MUTANTS, Mutant
from .mutate import close, run


@pytest.fixture(scope="session", autouse=True)
def _runner() -> Iterator[None]:
    """The runner's fork servers and template, made at its first mutant, last the session
    and go with it (a test process may end without running exit handlers)."""
    yield
    close()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", [m.name for m in MUTANTS if m.fast])
def test_the_fault_suite_catches_the_planted_bug(name: str) -> None:
    [mutant] = [m for m in MUTANTS if m.name == name]
    _, caught, seconds, tail = run(mutant, suite=False, timeout_s=600)
    assert caught, f"mutant {name} survived ({mutant.why}) in {seconds:.0f}s:\n{tail}"


def test_every_mutant_still_applies() -> None:
    """A mutant whose text the code no longer has would silently test nothing."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for m in MUTANTS:
        assert (root / m.path).read_text().count(m.old) == 1, m.name


@pytest.mark.slow
def test_a_mutant_that_changes_nothing_survives() -> None:
    """The runner itself: a run that failed for its own reasons (a plugin that broke, the
    copy importing the wrong code) would report every mutant caught."""
    [real] = [m for m in MUTANTS if m.name == "progress-without-the-fence"]
    noop = Mutant("changes-nothing", "none", real.path, real.old, real.old, real.tests)
    _, caught, seconds, tail = run(noop, suite=False, timeout_s=300)
    assert not caught, f"a mutant that changes nothing was caught in {seconds:.0f}s:\n{tail}"
    _, caught, _, tail = run(real, suite=False, timeout_s=300)
    assert caught, tail
