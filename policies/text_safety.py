"""Detectors of text that speaks to a model or hides from a person. Pure functions.

Two readers need them: the manifest review (a registered tool's descriptions reach the model
verbatim, `policies.manifest_safety`) and the approval card (an agent's own argument values reach an
approver, `policies.provenance`). Both flag with these functions, so one spelling of a trick is
caught, or missed, the same way in both places.

Text is matched as a model reads it: tag characters decoded to the ASCII they spell, other hidden
characters removed, NFKC-normalised (so ``ｉｇｎｏｒｅ`` and ``ig\\u200bnore`` count), and the Cyrillic and
Greek letters that look like Latin ones (``іgnоrе`` with Cyrillic і, о, е) read as those Latin letters.
The patterns are heuristics tuned to stay quiet on ordinary API prose; paraphrase, other languages and
rarer homoglyphs can pass them, which is why a person reads the text too. No I/O.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["EXCERPT_MAX", "Flag", "FlagCode", "review_text", "review_texts", "strings_in"]

EXCERPT_MAX = 80
"""Longest excerpt a flag carries, escapes included."""


class FlagCode(StrEnum):
    HIDDEN_UNICODE = "hidden_unicode"
    """Characters a person does not see and a model reads: categories Cf and Cc except newline and tab (so
    zero-width characters and bidi overrides), tag characters U+E0000-E007F (which can spell a whole hidden
    sentence), variation selectors U+E0100-E01EF, and the invisible fillers in ``_INVISIBLE_FILLERS``."""
    INSTRUCTION_TO_MODEL = "instruction_to_model"
    """Text addressed to the model instead of describing the tool; see ``_INSTRUCTIONS``."""
    CALLS_OTHER_TOOLS = "calls_other_tools"
    """Names another adapter's tool, or says "call/use the X tool" for an X that is not the manifest's own."""
    SECRET_REQUEST = "secret_request"
    """Asks for keys, tokens, passwords or credentials, or names a key file (``~/.ssh``, ``.env``)."""


@dataclass(frozen=True, slots=True)
class Flag:
    """Something in a manifest's text that an admin should look at before accepting it."""

    code: FlagCode
    field: str
    """Where the text is, e.g. ``tools[2].input_schema.properties.amount.description``."""
    excerpt: str
    """At most ``EXCERPT_MAX`` characters around the finding, hidden characters spelled ``\\u200b``."""


_INVISIBLE_FILLERS = frozenset("\u034f\u115f\u1160\u3164\uffa0")

# Cyrillic and Greek letters a reader takes for Latin ones (Unicode's confusables for the Latin
# lowercase and capitals the patterns spell); NFKC keeps them apart, so they are folded explicitly.
_CONFUSABLES = str.maketrans(
    "аеорсхуіјѕԁһӏԛԝꙅвкмнтАВЕКМНОРСТХУІЈЅαεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcxyijsdhlqwsbkmhtABEKMHOPCTXYIJSaeikvoptuxABEZHIKMNOPTYX",
)

# Each alternative is a way text speaks to the model: "ignore (all) previous instructions", "disregard",
# "you must", "new instructions:", "from now on", "system:" opening a line or sentence (not "operating
# system: linux"), "do not tell the user", <important>-style tags, chat-template markers.
_INSTRUCTIONS = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+(?:(?:all|any|the|your)\s+)*"
    r"(?:previous|prior|above|earlier|preceding|system)\s+(?:instructions?|prompts?|rules|directions|messages)\b"
    r"|\bdisregard\b|\byou\s+(?:must|are\s+required\s+to|are\s+now)\b"
    r"|\b(?:new|updated|real|hidden)\s+instructions?\s*:|\bfrom\s+now\s+on\b"
    r"|(?:^|(?<=[.!?;]))\s*(?:system|assistant|developer)\s*:"
    r"|\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention|reveal|show|alert|notify|let)\b[^.\n]{0,40}?"
    r"\b(?:users?|humans?|operators?|approvers?|admins?)\b"
    r"|\bwithout\s+(?:telling|informing|notifying|asking|alerting)\s+(?:the\s+)?(?:users?|humans?|approvers?)\b"
    r"|<\s*/?\s*(?:important|system|instructions?|admin|secret|hidden|critical|priority)\b[^>]*>"
    r"|\[\s*/?\s*(?:system|inst)\s*\]|<<\s*/?\s*sys\s*>>|<\|im_(?:start|end)\|>"
    # Addressed to the approver: "approve (this) immediately", "no need to review", "pre-approved".
    r"|\b(?:approve|accept|sign\s+off|authori[sz]e)\b[^.\n]{0,20}?"
    r"\b(?:immediately|right\s+away|at\s+once|asap|without\s+(?:review|reviewing|checking|reading|question))\b"
    r"|\bno\s+need\s+to\s+(?:review|check|verify|read|confirm)\b|\b(?:pre|auto)[\s-]?approved?\b",
    re.IGNORECASE | re.MULTILINE,
)
_CALL_THE_TOOL = re.compile(
    r"\b(?:call|use|invoke|run|execute|trigger)\s+(?:the\s+)?[`'\"]?([a-z][\w.\-]*)[`'\"]?\s+(?:tool|function)\b",
    re.IGNORECASE,
)
_NOT_A_TOOL_NAME = frozenset({"this", "that", "same", "above", "following", "appropriate"})

_SECRET = (
    r"(?:api[\s_-]?keys?|access[\s_-]?tokens?|refresh[\s_-]?tokens?|bearer[\s_-]?tokens?|session[\s_-]?(?:tokens?|cookies?)"
    r"|auth(?:entication|orization)?[\s_-]?(?:tokens?|headers?|codes?)|secret[\s_-]?keys?|private[\s_-]?keys?"
    r"|client[\s_-]?secrets?|ssh[\s_-]?keys?|passwords?|passphrases?|passwd|credentials?"
    r"|one[\s-]time[\s-](?:codes?|passwords?)|otp|(?:2fa|mfa)[\s_-]codes?|(?:seed|recovery)[\s_-]phrases?)"
    # "password reset", "credential rotation": talk about the thing, not a request for it.
    r"(?![\s_-]*(?:reset|polic|strength|expir|rotat|change|length|hash|manager))"
)
_SECRET_REQUEST = re.compile(
    r"\b(?:provide|include|send|pass|enter|supply|paste|give|share|attach|append|forward|reveal|copy|fetch"
    rf"|retrieve|collect|insert|output|print|leak)\b[^.\n]{{0,40}}?\b{_SECRET}\b|\byour\s+(?:own\s+)?{_SECRET}\b"
    r"|~/\.ssh|\bid_(?:rsa|ed25519|ecdsa)\b|\.aws/credentials|(?<![\w.])\.env\b|\.netrc\b",
    re.IGNORECASE,
)


def review_text(
    tool_name: str, text: str, *, other_tool_names: frozenset[str], own_tool_names: frozenset[str] = frozenset()
) -> tuple[Flag, ...]:
    """Flag what in ``text`` (said by or about tool ``tool_name``) an admin should read before accepting it.

    ``other_tool_names`` are tools of other adapters: naming one is ``calls_other_tools``.
    ``own_tool_names`` are the manifest's own tools, which its texts may mention and point to freely.
    Each flag's ``field`` is ``tool_name``; at most one flag per code, excerpting the first finding, in
    :class:`FlagCode` order.
    """
    return _review(tool_name, text, others=other_tool_names - own_tool_names - {tool_name}, own=own_tool_names)


def review_texts(
    texts: Sequence[tuple[str, str]], *, own_tool_names: frozenset[str], other_tool_names: frozenset[str]
) -> tuple[Flag, ...]:
    """Review every ``(location, text)`` of one manifest that reaches the model or an approver.

    ``own_tool_names`` are the manifest's own tools, which its texts may mention freely; names in
    ``other_tool_names`` that are also its own (a re-registration) count as its own. Each flag's
    ``field`` is the text's location.
    """
    others = other_tool_names - own_tool_names
    return tuple(flag for field, text in texts for flag in _review(field, text, others=others, own=own_tool_names))


def strings_in(where: str, node: Any) -> list[tuple[str, str]]:
    """``(location, string)`` for each key and each string value anywhere under `node` (a JSON document: a tool's
    schema or whole definition), for `review_texts`: property names, ``pattern``, ``format``, ``enum``, ``title``,
    ``description`` and unknown keywords alike, since a model reads all of them.

    A location reads like ``where.properties.amount.description``; a key that is not a plain ASCII identifier is
    quoted as JSON (``properties["\\u200bamount"]``), and the location of a key itself ends in `` (key)``.
    """
    if isinstance(node, str):
        return [(where, node)]
    if isinstance(node, Mapping):
        found: list[tuple[str, str]] = []
        for key, value in node.items():
            at = (
                f"{where}.{key}"
                if str(key).isidentifier() and str(key).isascii()
                else f"{where}[{json.dumps(str(key))}]"
            )
            found.append((f"{at} (key)", str(key)))
            found += strings_in(at, value)
        return found
    if isinstance(node, list | tuple):
        return [text for index, item in enumerate(node) for text in strings_in(f"{where}[{index}]", item)]
    return []


def _review(field: str, text: str, *, others: frozenset[str], own: frozenset[str]) -> tuple[Flag, ...]:
    flags: list[Flag] = []
    hidden = _first_hidden(text)
    if hidden is not None:
        flags.append(Flag(FlagCode.HIDDEN_UNICODE, field, _excerpt(text, hidden)))
    read = _as_read(text)
    worded = _has_words(read)  # a date, a time, an amount has none: most argument values
    if worded:
        # As written, and with identifiers read as their words (tool names are looked for as written only).
        for seen in dict.fromkeys((read, _spelled_out(read))):
            if found := _INSTRUCTIONS.search(seen):
                flags.append(Flag(FlagCode.INSTRUCTION_TO_MODEL, field, _excerpt(seen, found.start())))
                break
    if (at := _other_tool_at(read, others, own, worded=worded)) is not None:
        flags.append(Flag(FlagCode.CALLS_OTHER_TOOLS, field, _excerpt(read, at)))
    if worded and (found := _SECRET_REQUEST.search(read)):
        flags.append(Flag(FlagCode.SECRET_REQUEST, field, _excerpt(read, found.start())))
    return tuple(flags)


_ASCII_LETTER = re.compile(r"[A-Za-z]")
_JOINER = re.compile(r"(?<=[A-Za-z0-9])[_.\-](?=[A-Za-z])")
_HUMP = re.compile(r"(?<=[a-z])(?=[A-Z][a-z])")


def _spelled_out(read: str) -> str:
    """`read` with identifiers read as the words they spell, as a model reads them: ``IGNORE_PREVIOUS_RULES``,
    ``you-must-call.x`` and ``youMustCall`` say what their words say (one space per joiner or hump)."""
    if "_" not in read and "-" not in read and "." not in read and not _HUMP.search(read):
        return read
    return _HUMP.sub(" ", _JOINER.sub(" ", read))


def _has_words(read: str) -> bool:
    """Whether `_INSTRUCTIONS`, `_CALL_THE_TOOL` or `_SECRET_REQUEST` could match `read` at all.

    Every alternative of the three spells a word, so ASCII text without an ASCII letter matches none
    of them (tests/policies/test_text_safety.py holds the patterns to it), and is not searched. Only
    ASCII text is let off: under IGNORECASE a pattern's letter also matches a few other characters
    (``ı``, ``ſ``, the Kelvin sign).
    """
    return not read.isascii() or _ASCII_LETTER.search(read) is not None


def _is_hidden(char: str) -> bool:
    code = ord(char)
    if 0xE0000 <= code <= 0xE007F or 0xE0100 <= code <= 0xE01EF:
        return True
    return char not in "\n\t" and (unicodedata.category(char) in ("Cf", "Cc") or char in _INVISIBLE_FILLERS)


_ASCII_HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""The hidden characters ASCII has: its controls (category Cc) but newline and tab. ASCII has no Cf
character, no tag, selector or filler, nothing NFKC changes and no look-alike: for ASCII text, this
is all `_is_hidden` and `_as_read` can find (`tests/policies/test_text_safety.py` checks they agree)."""


def _first_hidden(text: str) -> int | None:
    """The position of the first character of `text` a person does not see, or None."""
    if text.isascii():  # argument values mostly are: one C-level scan instead of a category per character
        found = _ASCII_HIDDEN.search(text)
        return found.start() if found is not None else None
    return _first_hidden_any(text)


def _first_hidden_any(text: str) -> int | None:
    return next((i for i, char in enumerate(text) if _is_hidden(char)), None)


def _as_read(text: str) -> str:
    """What a model reads: tag characters as ASCII, other hidden ones gone, NFKC, look-alikes as Latin."""
    return _ASCII_HIDDEN.sub("", text) if text.isascii() else _as_read_any(text)


def _as_read_any(text: str) -> str:
    out: list[str] = []
    in_tags = False
    for char in text:
        code = ord(char)
        if 0xE0020 <= code <= 0xE007E:
            # A space where a smuggled run starts, so its first word is a word of its own.
            out.append(("" if in_tags else " ") + chr(code - 0xE0000))
            in_tags = True
        elif not _is_hidden(char):
            out.append(char)
            in_tags = False
    return unicodedata.normalize("NFKC", "".join(out)).translate(_CONFUSABLES)


def _other_tool_at(text: str, others: frozenset[str], own: frozenset[str], *, worded: bool) -> int | None:
    """Where `text` first names a tool of `others` or says to call one not `own`; `worded`: see `_has_words`
    (a tool's name needs no letter: it is looked for either way)."""
    positions = [
        found.start()
        for name in others
        if (found := re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE)) is not None
    ]
    for found in _CALL_THE_TOOL.finditer(text) if worded else ():
        named = found.group(1).lower()
        if named not in own and named not in _NOT_A_TOOL_NAME:
            positions.append(found.start())
    return min(positions, default=None)


def _escape(char: str) -> str:
    if char.isprintable() and not _is_hidden(char):
        return char
    code = ord(char)
    return {"\n": "\\n", "\t": "\\t"}.get(char) or (f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")


def _excerpt(text: str, at: int) -> str:
    """Up to ``EXCERPT_MAX`` characters from a little before ``at``, every invisible character spelled out."""
    begin = max(0, at - 20)
    out = "…" if begin else ""
    for char in text[begin:]:
        piece = _escape(char)
        if len(out) + len(piece) > EXCERPT_MAX - 1:
            return out + "…"
        out += piece
    return out
