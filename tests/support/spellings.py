"""Generated spellings of one identity: other case, compatibility forms, surrounding whitespace."""

from __future__ import annotations

from hypothesis import strategies as st

_WHITESPACE = " \t\n\u00a0\u2003\u3000"


def _forms(ch: str) -> list[str]:
    forms = {ch, ch.upper(), ch.lower()}
    for variant in (ch.lower(), ch.upper()):
        if "!" <= variant <= "~":
            forms.add(chr(ord(variant) + 0xFEE0))  # fullwidth: NFKC folds it back to ASCII
    if "a" <= ch.lower() <= "z":
        forms.add(chr(0x1D41A + ord(ch.lower()) - ord("a")))  # mathematical bold small letter
    if ch.lower() == "k":
        forms.add("\u212a")  # Kelvin sign
    return sorted(forms)


def spellings(subject: str) -> st.SearchStrategy[str]:
    """Strings that name `subject` for a person reading them, though they differ as raw strings."""
    letters = st.tuples(*(st.sampled_from(_forms(ch)) for ch in subject)).map("".join)
    padding = st.text(alphabet=_WHITESPACE, max_size=3)
    return st.tuples(padding, letters, padding).map("".join)
