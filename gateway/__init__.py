"""Countersign: an MCP gateway where agents read freely and every write waits for a human.

This package root exports the vocabulary adapters and policies need, and nothing else: an adapter
package declares its tools (`Tool`, `Access`, `Approval`, `WriteContract`), receives a
`ToolContext`, and calls its backend (`request_json`, `fill_path`, `keyed_contract`) with nothing
but `gateway`. It deliberately does not import the composition root, any layer, or any I/O
library (no Redis, aiohttp or Starlette), so `adapters/` and `policies/` can import `gateway`
without a cycle and without a server.
"""

from gateway.adapter_http import fill_path, keyed_contract, lookup_by_key, request_json, status_by_key
from gateway.codes import Code
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
from gateway.org_adapters import OrgAdapters
from gateway.principal import KeyKind, Principal
from gateway.tool import Access, Approval, Escalation, Mode, StatusLookup, Tool, WriteContract, WriteStatus
from gateway.tool_context import CallerCards, ToolContext
from gateway.untrusted import WITHHELD, Untrusted
from gateway.upstream import UpstreamClient, UpstreamResponse

__all__ = [
    "Access",
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
    "Principal",
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
