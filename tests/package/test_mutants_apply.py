"""Every mutant of the opt-in mutation check (``python -m tests.support.mutants``) still applies.

The check itself takes minutes and is not part of the default run; this one only reads the
sources, so a change that moves a guarded line is noticed at once, with the entry to update.
"""

from __future__ import annotations

import pytest

from tests.support.mutants import MUTANTS, ROOT, Mutant


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mutant: mutant.name)
def test_the_mutant_still_applies(mutant: Mutant) -> None:
    source = (ROOT / mutant.path).read_text()
    assert source.count(mutant.find) == 1, f"update {mutant.name!r} in tests/support/mutants.py"
    assert mutant.replace != mutant.find
    for test_file in mutant.tests:
        assert (ROOT / test_file).is_file(), test_file


def test_mutant_names_are_unique() -> None:
    names = [mutant.name for mutant in MUTANTS]
    assert len(names) == len(set(names))
