"""Countersign: an MCP gateway where agents read freely and every write waits for a human.

This package root exports the vocabulary adapters and policies need, and nothing else: an adapter
package declares its tools (`Tool`, `Access`, `Approval`, `WriteContract`), receives a
`ToolContext`, and calls its backend (`request_json`, `fill_path`, `keyed_contract`) with nothing
but `gateway`. It deliberately does not import the composition root, any layer, or any I/O
library (no Redis, aiohttp or Starlette), so `adapters/` and `policies/` can import `gateway`
without a cycle and without a server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.cards.views import AgentCard
    from gateway.codes import Code
    from gateway.config.org_adapters import OrgAdapters
    from gateway.decision import Decision
    from gateway.envelope import Envelope
    from gateway.errors import (
        AuthError,
        ConfigError,
        GatewayError,
        PathArgumentError,
        StoreUnavailableError,
        ToolDeclarationError,
        UpstreamError,
        UpstreamNotFoundError,
        UpstreamProtocolError,
        UpstreamRateLimitedError,
        UpstreamRefusedError,
        UpstreamTimeoutError,
        UpstreamUnavailableError,
    )
    from gateway.principal import KeyKind, Principal
    from gateway.tools.backend_http import fill_path, keyed_contract, lookup_by_key, request_json, status_by_key
    from gateway.tools.context import CallerCards, ToolContext
    from gateway.tools.declarations import (
        Access,
        Approval,
        Escalation,
        Mode,
        StatusLookup,
        Tool,
        WriteContract,
        WriteStatus,
    )
    from gateway.tools.preview import Preview, PreviewRead
    from gateway.tools.upstream import UpstreamClient, UpstreamResponse
    from gateway.untrusted import WITHHELD, ShownUntrusted, Untrusted

__all__ = [
    "Access",
    "AgentCard",
    "Approval",
    "AuthError",
    "CallerCards",
    "Code",
    "ConfigError",
    "Decision",
    "Envelope",
    "Escalation",
    "GatewayError",
    "KeyKind",
    "Mode",
    "OrgAdapters",
    "PathArgumentError",
    "Preview",
    "PreviewRead",
    "Principal",
    "ShownUntrusted",
    "StatusLookup",
    "StoreUnavailableError",
    "Tool",
    "ToolContext",
    "ToolDeclarationError",
    "Untrusted",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamNotFoundError",
    "UpstreamProtocolError",
    "UpstreamRateLimitedError",
    "UpstreamRefusedError",
    "UpstreamResponse",
    "UpstreamTimeoutError",
    "UpstreamUnavailableError",
    "WITHHELD",
    "WriteContract",
    "WriteStatus",
    "fill_path",
    "keyed_contract",
    "lookup_by_key",
    "request_json",
    "status_by_key",
]

_HOMES: dict[str, str] = {
    "Access": "gateway.tools.declarations",
    "AgentCard": "gateway.cards.views",
    "Approval": "gateway.tools.declarations",
    "AuthError": "gateway.errors",
    "CallerCards": "gateway.tools.context",
    "Code": "gateway.codes",
    "ConfigError": "gateway.errors",
    "Decision": "gateway.decision",
    "Envelope": "gateway.envelope",
    "Escalation": "gateway.tools.declarations",
    "GatewayError": "gateway.errors",
    "KeyKind": "gateway.principal",
    "Mode": "gateway.tools.declarations",
    "OrgAdapters": "gateway.config.org_adapters",
    "PathArgumentError": "gateway.errors",
    "Preview": "gateway.tools.preview",
    "PreviewRead": "gateway.tools.preview",
    "Principal": "gateway.principal",
    "StatusLookup": "gateway.tools.declarations",
    "StoreUnavailableError": "gateway.errors",
    "Tool": "gateway.tools.declarations",
    "ToolContext": "gateway.tools.context",
    "ToolDeclarationError": "gateway.errors",
    "ShownUntrusted": "gateway.untrusted",
    "Untrusted": "gateway.untrusted",
    "UpstreamClient": "gateway.tools.upstream",
    "UpstreamError": "gateway.errors",
    "UpstreamNotFoundError": "gateway.errors",
    "UpstreamProtocolError": "gateway.errors",
    "UpstreamRateLimitedError": "gateway.errors",
    "UpstreamRefusedError": "gateway.errors",
    "UpstreamResponse": "gateway.tools.upstream",
    "UpstreamTimeoutError": "gateway.errors",
    "UpstreamUnavailableError": "gateway.errors",
    "WITHHELD": "gateway.untrusted",
    "WriteContract": "gateway.tools.declarations",
    "WriteStatus": "gateway.tools.declarations",
    "fill_path": "gateway.tools.backend_http",
    "keyed_contract": "gateway.tools.backend_http",
    "lookup_by_key": "gateway.tools.backend_http",
    "request_json": "gateway.tools.backend_http",
    "status_by_key": "gateway.tools.backend_http",
}
"""Where each exported name is defined. Imported on first use (PEP 562), so `import gateway`, which every
module of the package runs first, costs nothing: the command line starts without loading pydantic."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
