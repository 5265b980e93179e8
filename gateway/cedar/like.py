"""Cedar's ``like`` operator answered in Python, so a call answer can be keyed by which patterns a string matches.

Who calls it: `gateway.cedar.engine`, which keys a remembered call answer by what of an argument its policies can
tell apart; for an argument they read with ``like``, that includes whether the value matches each pattern. A wrong
answer here would hand one string the remembered answer of another that Cedar decides differently, so this module
follows Cedar's own definition exactly (``cedar-policy-core``, ``ast/pattern.rs``, ``Pattern::wildcard_match``):

* a pattern is a sequence of characters and wildcards, matched against the WHOLE string;
* a wildcard matches any sequence of characters, the empty one included; every other element matches exactly its
  own character (no case folding, no Unicode normalisation: characters are Unicode scalar values, as Python's
  are for a string that holds no surrogate);
* ``\\*`` in the policy text is a literal star, which Cedar's JSON form (``cedarpy.policies_to_json_str``) already
  gives as ``{"Literal": "*"}``; a wildcard is the bare string ``"Wildcard"``.

Cedar refuses a request whose context holds a string with a lone surrogate (it is not a Unicode scalar value), so
such a string is decided by Cedar, never by its matches here (`cedar_string`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Pattern", "cedar_string"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def cedar_string(text: str) -> bool:
    """Whether Cedar takes `text` as the same string (every code point a Unicode scalar value)."""
    return text.isascii() or _SURROGATE.search(text) is None


@dataclass(frozen=True, slots=True)
class Pattern:
    """A ``like`` pattern, as the literal runs between its wildcards."""

    parts: tuple[str, ...]
    """The literal text before the first wildcard, between each two, and after the last (each possibly empty);
    a pattern with no wildcard is one part, which the string must equal."""

    @classmethod
    def from_json(cls, elements: Any) -> Pattern | None:
        """The pattern Cedar's JSON form gives as `elements` (``"Wildcard"`` or ``{"Literal": "<text>"}`` each);
        None for anything else, which the caller must not answer for Cedar."""
        if not isinstance(elements, Sequence) or isinstance(elements, str):
            return None
        parts = [""]
        for element in elements:
            if element == "Wildcard":
                parts.append("")
            elif isinstance(element, dict) and element.keys() == {"Literal"} and type(element["Literal"]) is str:
                parts[-1] += element["Literal"]
            else:
                return None
        if len(parts) > 2:
            # Consecutive wildcards match what one does: an empty run between two wildcards constrains nothing.
            parts = [parts[0], *(part for part in parts[1:-1] if part), parts[-1]]
        return cls(tuple(parts))

    def matches(self, text: str) -> bool:
        """Whether `text` (a `cedar_string`) is like this pattern, as Cedar answers it.

        The first run must start the string and the last end it, without overlapping; each run between them is
        taken at its leftmost place after the previous one. Taking it leftmost never loses a match (any match
        could slide that run left to the same place and keep the rest), so this is exact; each run is one
        `str.find`, so the cost grows with the string and the runs, never with the number of ways to place them.
        """
        parts = self.parts
        if len(parts) == 1:
            return text == parts[0]
        first, last = parts[0], parts[-1]
        end = len(text) - len(last)
        if end < len(first) or not text.startswith(first) or not text.endswith(last):
            return False
        start = len(first)
        for part in parts[1:-1]:
            found = text.find(part, start, end)
            if found < 0:
                return False
            start = found + len(part)
        return True
