"""Canonical JSON: the bytes every hash is taken over."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.canonical import canonical_json
from tests.support.examples import examples

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None)
@given(_JSON)
def test_canonical_json_is_json_dumps_with_sorted_keys_and_no_whitespace(value: Any) -> None:
    """The one shared encoder writes exactly what `json.dumps` with the canonical options writes."""
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    assert canonical_json(value) == expected


def test_a_value_json_cannot_hold_is_written_as_its_str() -> None:
    """A date (or any value JSON has no type for) is its `str`, so hashing it never fails."""
    assert canonical_json({"b": date(2026, 12, 1), "a": "é"}) == '{"a":"é","b":"2026-12-01"}'
