"""Countersign: an MCP gateway where agents read freely and every write waits for a human.

This package root exports the vocabulary adapters and policies need, and nothing else. It
deliberately does not import the composition root or any layer, so `adapters/` and
`policies/` can import `gateway` without a cycle.
"""

from gateway.context import ToolContext
from gateway.decision import Code, Decision
from gateway.envelope import Envelope
from gateway.errors import (
    AuthError,
    ConfigError,
    GatewayError,
    LedgerError,
    ToolDeclarationError,
    UpstreamError,
    UpstreamNotFoundError,
    UpstreamProtocolError,
    UpstreamRefusedError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
)
from gateway.grants import Grants
from gateway.principal import KeyKind, Principal
from gateway.tool import Access, Mode, StatusLookup, Tool, WriteContract, WriteStatus
from gateway.untrusted import WITHHELD, Untrusted

__all__ = [
    "Access",
    "AuthError",
    "Code",
    "ConfigError",
    "Decision",
    "Envelope",
    "GatewayError",
    "Grants",
    "KeyKind",
    "LedgerError",
    "Mode",
    "Principal",
    "StatusLookup",
    "Tool",
    "ToolContext",
    "ToolDeclarationError",
    "Untrusted",
    "UpstreamError",
    "UpstreamNotFoundError",
    "UpstreamProtocolError",
    "UpstreamRefusedError",
    "UpstreamTimeoutError",
    "UpstreamUnavailableError",
    "WITHHELD",
    "WriteContract",
    "WriteStatus",
]
