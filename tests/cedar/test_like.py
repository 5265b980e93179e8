"""Cedar's ``like`` answered in Python: the same answer as Cedar's for every generated pattern and string."""

from __future__ import annotations

import json
from typing import Any

import cedarpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cedar.like import Pattern, cedar_string
from tests.support.examples import examples
from tests.support.like_patterns import SURROGATE, Element, cedar_literal, cedar_pattern, like_strings, patterns

_REQUEST = {"principal": 'P::"p"', "action": 'A::"a"', "resource": 'R::"r"'}


def _policy(pattern: str) -> str:
    return f"permit (principal, action, resource) when {{ context.s like {pattern} }};"


def _parsed(pattern: str) -> Pattern | None:
    """The pattern as the engine reads it: from Cedar's JSON form of a policy holding it."""
    body = json.loads(cedarpy.policies_to_json_str(_policy(pattern)))["staticPolicies"]["policy0"]
    return Pattern.from_json(body["conditions"][0]["body"]["like"]["pattern"])


def _cedar(pattern: str, text: str) -> cedarpy.AuthzResult:
    return cedarpy.is_authorized({**_REQUEST, "context": {"s": text}}, _policy(pattern), [])


@settings(database=None, deadline=None, max_examples=examples(500))
@given(data=st.data(), pattern=patterns())
def test_a_pattern_matches_exactly_the_strings_cedar_finds_like_it(data: Any, pattern: tuple[Element, ...]) -> None:
    """Strings built to match the pattern and to just miss it (a character dropped, added, replaced) get Cedar's
    answer; one holding a lone surrogate is not taken for a string Cedar can match (it refuses the request)."""
    written = cedar_pattern(pattern)
    parsed = _parsed(written)
    assert parsed is not None
    for _ in range(4):
        text = data.draw(st.one_of(like_strings(pattern), st.text(alphabet=st.sampled_from("ab*\\é"), max_size=4)))
        cedar = _cedar(written, text)
        if SURROGATE in text:
            assert not cedar_string(text) and not cedar.allowed and cedar.diagnostics.errors
            continue
        assert cedar_string(text) and not cedar.diagnostics.errors
        assert parsed.matches(text) is cedar.allowed, (written, text)


@pytest.mark.parametrize(
    ("pattern", "text", "like"),
    [
        (r'"a\*b"', "a*b", True),
        (r'"a\*b"', "axb", False),  # an escaped star is a star, not a wildcard
        (r'"a*b"', "a*b", True),
        (r'"\\*"', "\\", True),  # a backslash, then a wildcard
        (r'"\\*"', "x\\", False),
        ('""', "", True),
        ('""', "a", False),
        ('"***"', "", True),
        ('"a*a"', "a", False),  # the first and last runs may not overlap
        ('"ab*ba"', "aba", False),
        ('"ab*ba"', "abba", True),
        ('"*a*a*"', "aa", True),
        ('"*a*a"', "a", False),  # a middle run may not reach into the last one
        ('"*a*ba"', "ba", False),
        ('"*ab*ab"', "abab", True),
        ('"é*"', "e\u0301", False),  # no normalisation: a combining accent is another string
        ('"*😀"', "a😀", True),
        ('"ord-9*"', "ORD-9", False),  # no case folding
    ],
)
def test_like_answers_as_cedar_on_the_edges(pattern: str, text: str, like: bool) -> None:
    """Escapes, empty runs, overlapping runs, Unicode: each answer is Cedar's (checked here too)."""
    parsed = _parsed(pattern)
    assert parsed is not None
    assert _cedar(pattern, text).allowed is like
    assert parsed.matches(text) is like


@pytest.mark.parametrize(
    "elements", ["*", [{"Literal": 1}], [{"Literal": "a", "x": 1}], ["Star"], [None], {"Literal": "a"}]
)
def test_a_pattern_in_a_form_cedar_does_not_give_is_not_answered(elements: Any) -> None:
    """Anything but Cedar's JSON form is refused, so the engine keys such an argument by its value."""
    assert Pattern.from_json(elements) is None


def test_a_literal_string_is_written_as_cedar_reads_it() -> None:
    """The support module's literal writer, which the engine's property test relies on, round-trips."""
    text = 'a"b\\c*é😀'
    policy = f"permit (principal, action, resource) when {{ context.s == {cedar_literal(text)} }};"
    assert cedarpy.is_authorized({**_REQUEST, "context": {"s": text}}, policy, []).allowed
