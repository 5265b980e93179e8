"""Who may see and call a tool. The catalog and the executor both call `decide_access`."""

from __future__ import annotations

from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.decision import Decision
from gateway.principal import KeyKind, Principal
from gateway.tools.declarations import Tool

__all__ = ["decide_access"]


def decide_access(tool: Tool, principal: Principal, org_adapters: OrgAdapters) -> Decision:
    """Whether `principal` may see and call `tool`.

    Allowed exactly when the caller holds an agent key, the caller's org has the tool's adapter
    enabled, and the tool's `Access` admits the caller (public, or one of its roles). The
    `reason` of a denial names what was missing, for the audit trail only.
    """
    if principal.kind is not KeyKind.AGENT:
        return Decision.deny(Code.PERMISSION_DENIED, f"{principal.kind} keys cannot call tools")
    if not org_adapters.enabled(principal.org, tool.adapter):
        return Decision.deny(Code.PERMISSION_DENIED, f"adapter {tool.adapter} is not enabled for org {principal.org}")
    if tool.access.is_public:
        return Decision.allow("public")
    matched = tool.access.any_of_roles & principal.roles
    if not matched:
        return Decision.deny(Code.PERMISSION_DENIED, "caller holds none of the roles the tool requires")
    return Decision.allow(f"role {min(matched)}")
