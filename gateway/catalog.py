"""The per-caller catalog: which tools a principal sees, and their schemas.

Who calls it: the MCP surface for ``tools/list``. It filters with `policies.access.decide_access`,
the same function the executor enforces with, so a tool is listed exactly when calling it is
allowed. Listing is presentation; the executor is the enforcement.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.grants import Grants
from gateway.principal import Principal
from gateway.tool import Tool
from gateway.toolbox import Toolbox
from policies.access import decide_access

__all__ = ["Catalog"]


class Catalog:
    """Tools as each principal may see them. Schemas are computed once, at construction."""

    def __init__(self, tools: Toolbox, grants: Grants) -> None:
        self._tools = tools
        self._grants = grants
        self._schemas: Mapping[str, Mapping[str, Any]] = MappingProxyType(
            {name: tool.arguments.model_json_schema() for name, tool in tools.items()}
        )

    def visible_to(self, principal: Principal) -> list[Tool]:
        """The tools `principal` may call, in declaration order."""
        return [tool for tool in self._tools.values() if decide_access(tool, principal, self._grants).allowed]

    def input_schema(self, name: str) -> Mapping[str, Any]:
        """The JSON Schema of a tool's arguments: generated from the model the executor validates with."""
        return self._schemas[name]
