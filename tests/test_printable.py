"""Escaping for terminals, as properties over generated text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.printable import escape_unprintable, is_printable
from tests.support.hostile_text import CONTROL_CHARACTERS, hostile_text


@given(text=st.one_of(hostile_text, st.text()))
def test_escaped_text_is_one_printable_line_and_unchanged_when_plain(text: str) -> None:
    """Whatever goes in comes out printable; printable text without a backslash comes out as it went in."""
    escaped = escape_unprintable(text)
    assert is_printable(escaped)
    if text.isprintable() and "\\" not in text:
        assert escaped == text


@given(first=st.one_of(hostile_text, st.text()), second=st.one_of(hostile_text, st.text()))
def test_different_texts_never_escape_to_the_same_line(first: str, second: str) -> None:
    """Escaping is one to one, so an agent cannot write text that reads as an escaped form of another."""
    if first != second:
        assert escape_unprintable(first) != escape_unprintable(second)


@pytest.mark.parametrize("ch", CONTROL_CHARACTERS)
def test_every_control_separator_and_bidi_character_is_not_printable(ch: str) -> None:
    """Each character a terminal may act on is escaped and refused in subjects."""
    assert not is_printable(ch) and escape_unprintable(ch).startswith("\\")
