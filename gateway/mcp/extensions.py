"""Which MCP extensions (SEP-2133) the client of one request declared, in either protocol era.

A 2026-07-28 request carries its client's capabilities in its own ``_meta``; a 2025-11-25 session
declared them once, at initialize. Either way the answer is the extension's settings object as the
client sent it, or None when it did not declare the extension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp_types import CLIENT_CAPABILITIES_META_KEY

__all__ = ["declared_extension"]


def declared_extension(ctx: ServerRequestContext[Any, Any], name: str) -> Mapping[str, Any] | None:
    """The settings the client of this request declared for extension `name`, or None if it declared none."""
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = params.get("_meta")
    declared = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
    if isinstance(declared, Mapping) and isinstance(declared.get("extensions"), Mapping):
        settings = declared["extensions"].get(name)
        if settings is not None:
            return settings if isinstance(settings, Mapping) else {}
    capabilities = ctx.session.client_capabilities if ctx.session is not None else None
    extensions = (capabilities.extensions or {}) if capabilities is not None else {}
    settings = extensions.get(name)
    if settings is None:
        return None
    return settings if isinstance(settings, Mapping) else {}
