"""Generated text that tries to act rather than show: control, separator and bidi characters."""

from __future__ import annotations

from hypothesis import strategies as st

CONTROL_CHARACTERS: tuple[str, ...] = (
    *map(chr, range(0x00, 0x20)),  # C0, newline and escape among them
    "\x7f",  # DEL
    *map(chr, range(0x80, 0xA0)),  # C1, including CSI (0x9b) and OSC (0x9d)
    "\u2028",  # line separator
    "\u2029",  # paragraph separator
    "\u061c",  # Arabic letter mark
    "\u200e",  # left-to-right mark
    "\u200f",  # right-to-left mark
    *map(chr, range(0x202A, 0x202F)),  # bidi embeddings and overrides
    *map(chr, range(0x2066, 0x206A)),  # bidi isolates
)
"""Every kind of character a terminal or a text viewer may act on, or that breaks a line."""

FORGED_LINE = "x\n2031-01-01 00:00:00.000Z  card.approve  ok  subject=root@acme.example  (approved)"
TERMINAL_ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\x9b31m"

hostile_text = (
    st.lists(st.one_of(st.sampled_from(CONTROL_CHARACTERS), st.text(min_size=1, max_size=4)), min_size=1, max_size=24)
    .map("".join)
    .filter(lambda text: any(ch in CONTROL_CHARACTERS for ch in text))
)
"""Short strings with at least one control character, mixed with any other text."""
