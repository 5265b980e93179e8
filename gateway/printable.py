"""Text made safe to show: every character that could act on a terminal, rather than be seen, is escaped.

Who calls it: every text rendering of what the gateway stores or was sent (``countersign audit
tail``, the ``keys`` commands), and the key store, which refuses such characters in a subject
outright. An agent chooses tool names and arguments, so anything it wrote may hold a newline that
forges a line, an ANSI or OSC sequence that drives the operator's terminal, or a bidi control
that reorders what is shown.

What counts: every character `str.isprintable` rejects, i.e. the C0 and C1 controls, DEL, format
characters (bidi embeddings, overrides, isolates and marks among them), surrogates, private-use
and unassigned code points, the line and paragraph separators, and every space separator except
the ASCII space. It is deliberately not a list of known escapes: a terminal may act on any of these.
"""

from __future__ import annotations

__all__ = ["escape_unprintable", "is_printable"]


def is_printable(text: str) -> bool:
    """Whether `text` shows as what it is: no character of the module docstring's list."""
    return text.isprintable()


def escape_unprintable(text: str) -> str:
    r"""`text` on one line with nothing a terminal acts on: each such character as ``\xNN``, ``\uNNNN``
    or ``\UNNNNNNNN``, and a backslash as ``\\``, so an escaped form cannot be forged either.

    The result is printable (`is_printable` holds) and tells apart any two different inputs.
    """
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    if ch.isprintable():
        return ch
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
