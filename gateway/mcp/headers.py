"""The header lines of an MCP request, read once for every layer of the edge that looks at them.

Who uses it: the edge's header checks (`gateway.mcp.edge.HeaderChecks`), its body and session checks
(`gateway.mcp.edge.MessageChecks`) and the budget front (`gateway.mcp.budget_front.BudgetFront`).
Each used to walk ``scope["headers"]`` itself; `mcp_headers(scope)` walks them once and keeps what it
found in the scope, for as long as ``scope["headers"]`` is the same list: a layer that replaces the
list (the header checks, trimming ``Mcp-*`` values) makes the next reader walk the new one.

Two readings, as the layers have always read them: the checks on repeated lines, ``Host``, ``Origin``
and ``Authorization`` compare names lowercased (an ASGI server that does not lowercase must not slip a
second line past them), while the values the later layers and the SDK act on (the session, the
protocol version, the declared length, the routing headers) are taken from lowercase names only,
as Starlette's `Headers`, which the SDK reads them through, finds them.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from starlette.types import Scope

__all__ = ["OWS", "SINGLE", "McpHeaders", "mcp_headers"]

_MCP_PREFIX: Final = b"mcp-"
_SCOPE_KEY: Final = "countersign.mcp_headers"
_AUTHORIZATION, _HOST, _ORIGIN, _SESSION, _VERSION, _METHOD, _NAME, _LENGTH = range(8)
_KINDS: Final = {
    b"authorization": _AUTHORIZATION,
    b"host": _HOST,
    b"origin": _ORIGIN,
    b"mcp-session-id": _SESSION,
    b"mcp-protocol-version": _VERSION,
    b"mcp-method": _METHOD,
    b"mcp-name": _NAME,
    b"content-length": _LENGTH,
}
"""The names read here (lowercase), each to a small number: one dict lookup sorts a line."""
OWS: Final = b" \t"
"""What RFC 9110 calls optional whitespace around a field value: SP and HTAB."""

SINGLE: Final = {
    b"authorization": "Authorization",
    b"host": "Host",
    b"origin": "Origin",
    b"mcp-session-id": "Mcp-Session-Id",
    b"mcp-protocol-version": "MCP-Protocol-Version",
    b"mcp-method": "Mcp-Method",
    b"mcp-name": "Mcp-Name",
}
"""Headers a request may carry once: the checks here and the SDK behind could each read a different
one of two lines (a Host this gateway admits, and one it does not)."""


class McpHeaders(NamedTuple):
    """What one walk over a request's header lines found (the last line wins where a name repeats)."""

    source: list[tuple[bytes, bytes]]
    """The header list this was read from."""
    authorizations: int
    """``Authorization`` lines, any casing."""
    duplicated: bytes
    """The first name of `SINGLE` (lowercased) seen on a second line; empty when none was."""
    host: bytes
    """``Host``, any casing; empty when absent."""
    origin: bytes
    """``Origin``, any casing; empty when absent."""
    padded: bool
    """Whether an ``Mcp-*`` value (any casing) starts or ends with SP or HTAB."""
    session: bool
    """Whether an ``mcp-session-id`` line is present."""
    version: bytes | None
    """``mcp-protocol-version``; None when absent (so are the three below)."""
    length: bytes | None
    """``content-length``."""
    method: bytes | None
    """``mcp-method``."""
    name: bytes | None
    """``mcp-name``."""


def mcp_headers(scope: Scope) -> McpHeaders:
    """The header facts of the request `scope` describes, read at most once per header list."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    known: McpHeaders | None = scope.get(_SCOPE_KEY)
    if known is not None and known.source is headers:
        return known
    authorizations = 0
    duplicated = host = origin = b""
    padded = session = False
    version = length = method = tool = None
    seen = 0  # a bit per kind of `SINGLE` header met so far
    for raw_name, value in headers:
        name = raw_name.lower()  # ASGI servers lowercase names; a server that does not must not slip past
        kind = _KINDS.get(name)
        if kind is None:  # most lines: one lookup, and for an Mcp-Param-* line the whitespace check
            if name.startswith(_MCP_PREFIX) and value and (value[0] in OWS or value[-1] in OWS):
                padded = True
            continue
        if kind != _LENGTH:
            if seen & (1 << kind):
                duplicated = duplicated or name
            seen |= 1 << kind
        if kind == _AUTHORIZATION:
            authorizations += 1
        elif kind == _HOST:
            host = value
        elif kind == _ORIGIN:
            origin = value
        else:
            if kind != _LENGTH and value and (value[0] in OWS or value[-1] in OWS):
                padded = True
            if raw_name != name:
                continue
            if kind == _LENGTH:
                length = value
            elif kind == _VERSION:
                version = value
            elif kind == _SESSION:
                session = True
            elif kind == _METHOD:
                method = value
            else:
                tool = value
    facts = scope[_SCOPE_KEY] = McpHeaders(
        headers, authorizations, duplicated, host, origin, padded, session, version, length, method, tool
    )
    return facts
