"""The per-caller catalog: which tools a principal sees, and their schemas.

Who calls it: the MCP surface for ``tools/list``. It filters with `policies.access.decide_access`,
the same function the executor enforces with, so a tool is listed exactly when calling it is
allowed. Listing is presentation; the executor is the enforcement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config.org_adapters import OrgAdapters
from gateway.principal import Principal
from gateway.tools.declarations import Tool
from gateway.tools.toolbox import Toolbox, ToolSource
from policies.access import decide_access
from policies.engine import PolicyEngine

__all__ = ["Catalog"]


class Catalog:
    """Tools as each principal may see them, from the tools served right now."""

    def __init__(self, tools: ToolSource, org_adapters: OrgAdapters, policy: PolicyEngine | None) -> None:
        self._tools = tools
        self._org_adapters = org_adapters
        self._policy = policy

    def current(self) -> Toolbox:
        return self._tools.current()

    def visible_to(self, principal: Principal, toolbox: Toolbox | None = None) -> list[Tool]:
        """The tools `principal` may call, in declaration order."""
        box = toolbox or self._tools.current()
        allowed = (decide_access(tool, principal, self._org_adapters, self._policy) for tool in box.values())
        return [tool for tool, decision in zip(box.values(), allowed, strict=True) if decision.allowed]

    def input_schema(self, name: str, toolbox: Toolbox | None = None) -> Mapping[str, Any]:
        """The JSON Schema of a tool's arguments: generated from the model the executor validates with."""
        return (toolbox or self._tools.current()).input_schema(name)
