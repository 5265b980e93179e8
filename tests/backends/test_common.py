"""The pieces every demo backend shares: how a new id is numbered and how another org's object goes missing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from backends._common import in_callers_org, next_free_id
from backends._http import Caller


@pytest.mark.parametrize(
    ("template", "first", "taken", "expected"),
    [
        ("bk-{:04d}", 1, set(), "bk-0001"),
        ("bk-{:04d}", 1, {"bk-0001", "bk-0002"}, "bk-0003"),
        ("ref-{}", 5001, {"ref-5001"}, "ref-5002"),
        ("exp-{}", 2001, {"exp-2001", "exp-2002", "exp-2003"}, "exp-2004"),
        # Seeds numbered otherwise: the count lands on a taken id, which is skipped.
        ("exp-{}", 2001, {"exp-2001", "exp-2003"}, "exp-2004"),
        ("exp-{}", 2001, {"exp-2003", "exp-2004"}, "exp-2005"),
    ],
)
def test_a_new_id_counts_the_taken_ones_and_skips_any_in_use(
    template: str, first: int, taken: set[str], expected: str
) -> None:
    """The next number is `first` plus how many ids are taken, moved on past any taken one."""
    assert next_free_id(template, first=first, taken=taken) == expected


@dataclass(frozen=True)
class _Thing:
    org: str


@pytest.mark.parametrize(
    ("object_id", "found"),
    [("mine", _Thing(org="acme")), ("theirs", None), ("missing", None)],
)
def test_an_object_of_another_org_is_missing_to_the_caller(object_id: str, found: _Thing | None) -> None:
    """Only the caller's own org's objects are found; another org's answers exactly as a missing one."""
    objects = {"mine": _Thing(org="acme"), "theirs": _Thing(org="globex")}
    assert in_callers_org(objects, Caller(subject="alice@acme.example", org="acme"), object_id) == found
