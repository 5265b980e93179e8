"""Who may see and call a tool. The catalog and the executor both call `decide_access`.

With an operator's policy set (a `PolicyEngine`), the policies take the place of each tool's
built-in `Access` rule; the structural checks stay in front of any policy: only an agent key calls
tools, and only tools of an adapter its org has enabled. `decide_call` is the executor's second
question, once the arguments are validated: the same policies, now with the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.codes import Code
from gateway.config.org_adapters import OrgAdapters
from gateway.decision import Decision
from gateway.principal import KeyKind, Principal
from gateway.tools.declarations import Tool
from policies.engine import PolicyAnswer, PolicyEngine

__all__ = ["decide_access", "decide_call"]


def decide_access(tool: Tool, principal: Principal, org_adapters: OrgAdapters, engine: PolicyEngine | None) -> Decision:
    """Whether `principal` may see and call `tool` (with some arguments).

    Allowed exactly when the caller holds an agent key, the caller's org has the tool's adapter
    enabled, and either `engine` (the operator's policies; None: the built-in rules) may permit the
    call, or, without an engine, the tool's `Access` admits the caller (public, or one of its roles).
    The `reason` of a denial names what was missing, for the audit trail only.
    """
    refused = _structural(tool, principal, org_adapters)
    if refused is not None:
        return refused
    if engine is not None:
        return engine.decide(tool, principal, None, tainted=False).decision
    if tool.access.is_public:
        return Decision.allow("public")
    matched = tool.access.any_of_roles & principal.roles
    if not matched:
        return Decision.deny(Code.PERMISSION_DENIED, "caller holds none of the roles the tool requires")
    return Decision.allow(f"role {min(matched)}")


def decide_call(
    tool: Tool,
    principal: Principal,
    org_adapters: OrgAdapters,
    engine: PolicyEngine | None,
    arguments: Mapping[str, Any],
    *,
    tainted: bool,
) -> PolicyAnswer:
    """The verdict on this call with its validated `arguments`: `decide_access`, then the policies with them.

    For a write, allowed means the call may be *proposed*; the answer's approval fields say what the
    card needs (None: the tool's own approval). Without an engine the built-in rules do not read
    arguments, so the answer is `decide_access`'s.
    """
    if engine is None:
        return PolicyAnswer(decision=decide_access(tool, principal, org_adapters, None))
    refused = _structural(tool, principal, org_adapters)
    if refused is not None:
        return PolicyAnswer(decision=refused)
    # Cedar answers with the arguments directly, naming the policies that decided. Its listing answer is
    # sound (hidden only when no arguments could be allowed), so this never allows what listing hid.
    return engine.decide(tool, principal, arguments, tainted=tainted)


def _structural(tool: Tool, principal: Principal, org_adapters: OrgAdapters) -> Decision | None:
    """The checks no policy replaces: an agent key, and an adapter the caller's org has enabled."""
    if principal.kind is not KeyKind.AGENT:
        return Decision.deny(Code.PERMISSION_DENIED, f"{principal.kind} keys cannot call tools")
    if not org_adapters.enabled(principal.org, tool.adapter):
        return Decision.deny(Code.PERMISSION_DENIED, f"adapter {tool.adapter} is not enabled for org {principal.org}")
    return None
