"""The set of tools one gateway serves: an immutable name -> `Tool` mapping."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from gateway.errors import ToolDeclarationError
from gateway.tool import Tool, definition_hash

__all__ = ["ToolSource", "Toolbox"]


class ToolSource(Protocol):
    """Where the tools served right now come from: a fixed `Toolbox`, or the registry's `LiveToolSource` that swaps
    in a new `Toolbox` when an adapter is accepted or removed. Callers take one `current()` per
    operation, so a call never sees two different sets of tools."""

    def current(self) -> Toolbox: ...


class Toolbox(Mapping[str, Tool]):
    """Tools by name, in declaration order.

    Raises:
        ToolDeclarationError: (code ``duplicate_name``) when two tools share a name. A duplicate
            is refused, not shadowed: which one would run would otherwise depend on ordering.
    """

    __slots__ = ("_schemas", "_tools", "_versions")

    def __init__(self, tools: Iterable[Tool]) -> None:
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in by_name:
                raise ToolDeclarationError(f"duplicate tool name {tool.name!r}", code="duplicate_name", tool=tool.name)
            by_name[tool.name] = tool
        self._tools = MappingProxyType(by_name)
        self._versions = MappingProxyType({name: definition_hash(tool) for name, tool in by_name.items()})
        self._schemas = MappingProxyType({name: tool.arguments.model_json_schema() for name, tool in by_name.items()})

    def current(self) -> Toolbox:
        """A fixed toolbox is its own `ToolSource`."""
        return self

    def input_schema(self, name: str) -> Mapping[str, Any]:
        """The JSON Schema of a tool's arguments: generated from the model the executor validates with."""
        return self._schemas[name]

    def version(self, name: str) -> str:
        """The definition hash of tool `name` (see `definition_hash`)."""
        return self._versions[name]

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"Toolbox({list(self._tools)})"
