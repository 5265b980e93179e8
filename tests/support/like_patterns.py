"""Cedar ``like`` patterns, and strings built to match them and to just miss them, for property tests.

A pattern is drawn as a tuple of elements: None for a wildcard, a one-character string for a literal character.
The characters include the two Cedar's syntax escapes (``*`` and ``\\``), a precomposed accent and a character
outside the Basic Multilingual Plane; wildcards fall at the start, in the middle, at the end and next to each
other, and a pattern may be empty or all literal.
"""

from __future__ import annotations

from hypothesis import strategies as st

Element = str | None
"""One element of a drawn pattern: None is a wildcard, a string one literal character."""

CHARS = ("a", "b", "é", "😀", "*", "\\")
"""The characters patterns and strings are made of."""
SURROGATE = "\ud800"
"""A lone surrogate: Python holds it in a string, Cedar refuses a request whose context holds it."""


def patterns() -> st.SearchStrategy[tuple[Element, ...]]:
    return st.lists(st.one_of(st.none(), st.sampled_from(CHARS)), max_size=6).map(tuple)


def cedar_literal(text: str) -> str:
    """`text` as a Cedar string literal, quotes included."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cedar_pattern(pattern: tuple[Element, ...]) -> str:
    """`pattern` as the right operand of ``like``: a wildcard is ``*``, a literal star ``\\*``."""
    return '"' + "".join("*" if element is None else _ESCAPED.get(element, element) for element in pattern) + '"'


_ESCAPED = {"*": "\\*", "\\": "\\\\", '"': '\\"'}
"""How a literal character is written in a pattern when it is not itself."""


@st.composite
def like_strings(draw: st.DrawFn, pattern: tuple[Element, ...], *, surrogates: bool = True) -> str:
    """A string made from `pattern`, with each wildcard filled with up to two characters, so it matches; as often
    as not the pattern is first changed in one place (a literal character dropped or replaced, a character or, with
    `surrogates`, a lone surrogate added), so the string may just miss it."""
    elements = list(pattern)
    change = draw(st.sampled_from(("none", "none", "none", "drop", "add", "replace", "replace", "surrogate")))
    literals = [index for index, element in enumerate(elements) if element is not None]
    if change in ("drop", "replace") and literals:
        index = draw(st.sampled_from(literals))
        if change == "drop":
            del elements[index]
        else:
            elements[index] = draw(st.sampled_from([char for char in CHARS if char != elements[index]]))
    elif change == "add" or (change == "surrogate" and surrogates):
        added = SURROGATE if change == "surrogate" else draw(st.sampled_from(CHARS))
        elements.insert(draw(st.integers(min_value=0, max_value=len(elements))), added)
    filler = st.text(alphabet=st.sampled_from(CHARS), max_size=2)
    return "".join(draw(filler) if element is None else element for element in elements)
