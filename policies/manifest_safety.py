"""Review of what a manifest says to the model, and of where it points the gateway. Pure functions.

A registered tool's descriptions reach the model verbatim in ``tools/list``, so a hostile or careless
service could steer every agent through them. `review_texts` returns :class:`Flag` values for
the admin deciding whether to accept a manifest (the registry hands it the manifest's texts with their
locations, `gateway.registry.manifest.model_facing_texts`); it refuses nothing itself. :func:`check_base_url` is
the egress rule for the URL the gateway will call, so a manifest cannot aim it at its own network.

Text is matched as a model reads it: tag characters decoded to the ASCII they spell, other hidden
characters removed, NFKC-normalised (so ``ｉｇｎｏｒｅ`` and ``ig\\u200bnore`` count). The patterns are
heuristics tuned to stay quiet on ordinary API prose; paraphrase, other languages and homoglyphs can
pass them, which is why an admin reads the manifest too. No I/O and no DNS.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

__all__ = ["Flag", "FlagCode", "check_base_url", "review_text", "review_texts"]

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
    r"|\[\s*/?\s*(?:system|inst)\s*\]|<<\s*/?\s*sys\s*>>|<\|im_(?:start|end)\|>",
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


def _review(field: str, text: str, *, others: frozenset[str], own: frozenset[str]) -> tuple[Flag, ...]:
    flags: list[Flag] = []
    hidden = next((i for i, char in enumerate(text) if _is_hidden(char)), None)
    if hidden is not None:
        flags.append(Flag(FlagCode.HIDDEN_UNICODE, field, _excerpt(text, hidden)))
    read = _as_read(text)
    if found := _INSTRUCTIONS.search(read):
        flags.append(Flag(FlagCode.INSTRUCTION_TO_MODEL, field, _excerpt(read, found.start())))
    if (at := _other_tool_at(read, others, own)) is not None:
        flags.append(Flag(FlagCode.CALLS_OTHER_TOOLS, field, _excerpt(read, at)))
    if found := _SECRET_REQUEST.search(read):
        flags.append(Flag(FlagCode.SECRET_REQUEST, field, _excerpt(read, found.start())))
    return tuple(flags)


def _is_hidden(char: str) -> bool:
    code = ord(char)
    if 0xE0000 <= code <= 0xE007F or 0xE0100 <= code <= 0xE01EF:
        return True
    return char not in "\n\t" and (unicodedata.category(char) in ("Cf", "Cc") or char in _INVISIBLE_FILLERS)


def _as_read(text: str) -> str:
    """What a model reads: tag characters as the ASCII they spell, other hidden ones gone, NFKC."""
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
    return unicodedata.normalize("NFKC", "".join(out))


def _other_tool_at(text: str, others: frozenset[str], own: frozenset[str]) -> int | None:
    positions = [
        found.start()
        for name in others
        if (found := re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE)) is not None
    ]
    for found in _CALL_THE_TOOL.finditer(text):
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


# ---- base URLs ----------------------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_NAME = re.compile(r"(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)")
_METADATA_NAMES = frozenset({"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"})
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_base_url(url: str, *, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """Problems with ``url`` as an adapter's base URL; empty means the gateway may call it.

    ``allowed`` holds the operator's ``scheme://host:port`` patterns, matched part by part with
    :func:`fnmatch.fnmatchcase` (``https://*.internal.example:*``, ``http://[::1]:8080``; no port means the
    scheme's default). An empty allowlist allows nothing. Loopback and ``localhost``, link-local, cloud
    metadata, unspecified, private and other non-global addresses and multicast pass only when a matching
    entry names that exact host: ``http://127.0.0.1:*`` allows a demo, ``http://*:*`` does not open
    loopback. Credentials, query, fragment, other schemes, non-ASCII hosts and numeric hosts in
    non-standard forms (``2130706433``, ``127.1``) are refused.
    """
    if any(char.isspace() or not char.isprintable() for char in url):
        return ("base URL contains whitespace or control characters",)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ("base URL cannot be parsed (host or port)",)
    scheme = parts.scheme
    problems: list[str] = []
    if scheme not in _DEFAULT_PORTS:
        problems.append(f"scheme must be http or https, not {scheme!r}")
    if parts.username is not None or parts.password is not None:
        problems.append("base URL must not carry credentials (user:pass@); use credential.secret_env")
    if "?" in url:
        problems.append("base URL must not have a query string")
    if "#" in url:
        problems.append("base URL must not have a fragment")
    host = (parts.hostname or "").rstrip(".")
    address = _address(host)
    if not host:
        problems.append("base URL has no host")
    elif address is None and not _HOST_NAME.fullmatch(host):
        problems.append(f"host {host!r} is not an IP address or an ASCII host name (use punycode)")
    elif address is None and _NUMERIC_LABEL.fullmatch(host.rsplit(".", 1)[-1]):
        problems.append(f"host {host!r} is a numeric address in a non-standard form")
    if problems:
        return tuple(problems)
    port = _DEFAULT_PORTS[scheme] if port is None else port
    shown = f"[{host}]" if address is not None and address.version == 6 else host
    matches = {_match(pattern, scheme, host, address, port) for pattern in allowed} - {None}
    if not matches:
        problems.append(f"{scheme}://{shown}:{port} matches no entry of the allowlist")
    risk = _risk(host, address)
    if risk is not None and "exact" not in matches:
        problems.append(f"host {shown} is {risk}; it is allowed only by an allowlist entry naming it exactly")
    return tuple(problems)


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None


def _split_pattern(pattern: str) -> tuple[str, str, str] | None:
    scheme, sep, rest = pattern.strip().lower().partition("://")
    rest = rest.rstrip("/")
    if not sep or not rest:
        return None
    if rest.startswith("["):
        host, bracket, after = rest[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            return None
        port = after[1:]
    else:
        host, _, port = rest.partition(":")
    return scheme, host.rstrip("."), port or str(_DEFAULT_PORTS.get(scheme, ""))


def _match(pattern: str, scheme: str, host: str, address: Address | None, port: int) -> str | None:
    """``"exact"`` when the entry names this very host, ``"wildcard"`` when its pattern covers it, else None."""
    parts = _split_pattern(pattern)
    if parts is None or not (fnmatchcase(scheme, parts[0]) and fnmatchcase(str(port), parts[2])):
        return None
    if parts[1] == host or (address is not None and _address(parts[1]) == address):
        return "exact"
    return "wildcard" if fnmatchcase(host if address is None else str(address), parts[1]) else None


def _risk(host: str, address: Address | None) -> str | None:
    if address is None:
        if host == "localhost" or host.endswith(".localhost"):
            return "loopback"
        return "a cloud metadata host" if host in _METADATA_NAMES else None
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and (inner := _risk(str(embedded), embedded)) is not None:
            return f"{inner} (embedded IPv4)"
    kinds = (
        ("a cloud metadata address", address in _METADATA_ADDRESSES),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("a private or reserved address", not address.is_global),
    )
    return next((kind for kind, hit in kinds if hit), None)
