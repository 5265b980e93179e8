"""One walk over a request's header lines, shared by the layers of the MCP edge."""

from __future__ import annotations

from typing import Any

from gateway.mcp.headers import mcp_headers

LINES = [(b"host", b"127.0.0.1:8000"), (b"authorization", b"Bearer x"), (b"content-length", b"12"),
         (b"mcp-protocol-version", b"2026-07-28"), (b"mcp-method", b"tools/call"), (b"mcp-name", b"t"),
         (b"mcp-session-id", b"s1")]  # fmt: skip


def test_the_facts_of_one_header_list_are_read_once_and_a_replaced_list_is_read_again() -> None:
    """A layer that replaces ``scope["headers"]`` (trimming values) makes the next reader see the new lines."""
    scope: dict[str, Any] = {"headers": list(LINES)}
    first = mcp_headers(scope)
    assert mcp_headers(scope) is first
    assert (first.host, first.authorizations, first.length) == (b"127.0.0.1:8000", 1, b"12")
    assert (first.version, first.method, first.name, first.session) == (b"2026-07-28", b"tools/call", b"t", True)
    assert first.duplicated == b"" and not first.padded
    scope["headers"] = [*LINES[:-1], (b"mcp-name", b"u")]
    assert mcp_headers(scope).name == b"u"


def test_checks_read_names_in_any_casing_and_values_come_from_lowercase_names_only() -> None:
    """A second ``Host`` in capitals is still a duplicate; an ``MCP-Session-Id`` the SDK cannot find is no session."""
    facts = mcp_headers({"headers": [*LINES[:-1], (b"HOST", b"evil.example"), (b"MCP-Session-Id", b"s2"),
                                     (b"Mcp-Name", b" v ")]})  # fmt: skip
    assert facts.duplicated == b"host" and facts.host == b"evil.example"
    assert not facts.session
    assert facts.name == b"t" and facts.padded


def test_a_padded_mcp_value_is_noticed_and_other_values_are_left_alone() -> None:
    facts = mcp_headers({"headers": [(b"host", b" 127.0.0.1 "), (b"mcp-method", b"tools/call\t")]})
    assert facts.padded and facts.host == b" 127.0.0.1 " and facts.method == b"tools/call\t"
    assert not mcp_headers({"headers": [(b"host", b" 127.0.0.1 ")]}).padded
