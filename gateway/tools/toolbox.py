"""The set of tools one gateway serves: an immutable name -> `Tool` mapping.

It is also the one place that decides whether a set of tools can be served together: every tool the
gateway serves, declared in-process or registered by manifest, is in a `Toolbox`, and a `Toolbox`
refuses duplicate names and write tools whose send could outlast the worker's lease.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from gateway.errors import ToolDeclarationError
from gateway.tools.declarations import Tool, definition_hash
from gateway.tools.output_schema import output_schema

__all__ = ["LEASE_MARGIN_SECONDS", "ToolSource", "Toolbox"]

LEASE_MARGIN_SECONDS = 5.0
"""How much longer than a write tool's timeout the worker's lease must be: room for the binding
re-check and the durable DISPATCHED record between the claim and the send, and for a slow event loop
after the deadline fires."""


class ToolSource(Protocol):
    """Where the tools served right now come from: a fixed `Toolbox`, or the registry's `LiveToolSource` that swaps
    in a new `Toolbox` when an adapter is accepted or removed. Callers take one `current()` per
    operation, so a call never sees two different sets of tools."""

    def current(self) -> Toolbox: ...


class Toolbox(Mapping[str, Tool]):
    """Tools by name, in declaration order, served by workers that hold a card for `lease_seconds`.

    Raises:
        ToolDeclarationError: (code ``duplicate_name``) when two tools share a name. A duplicate
            is refused, not shadowed: which one would run would otherwise depend on ordering.
            (code ``timeout_exceeds_lease``) when a write tool's `timeout_seconds` plus
            `LEASE_MARGIN_SECONDS` is not shorter than `lease_seconds`: its send could outlast the
            lease, and another worker could then recover the card and resend the write while the
            first send is still in flight. (code ``schema_clash``) from `output_schema`.
    """

    __slots__ = ("_outputs", "_schemas", "_tools", "_versions")
    _tools: Mapping[str, Tool]
    _versions: Mapping[str, str]
    _schemas: Mapping[str, Mapping[str, Any]]
    _outputs: Mapping[str, Mapping[str, Any]]

    def __init__(self, tools: Iterable[Tool], *, lease_seconds: float, reuse: Iterable[Toolbox] = ()) -> None:
        """`reuse`: toolboxes built before, whose derived data (definition hash, input and output schema) is
        taken for every tool that is the very same object there rather than computed again: a `Tool` is
        frozen, so that data cannot differ, and deriving the schemas of a large registered adapter takes
        a while. The checks below run on every tool all the same."""
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in by_name:
                raise ToolDeclarationError(f"duplicate tool name {tool.name!r}", code="duplicate_name", tool=tool.name)
            if not tool.read_only and tool.timeout_seconds + LEASE_MARGIN_SECONDS >= lease_seconds:
                raise ToolDeclarationError(
                    f"write tool {tool.name!r} may run {tool.timeout_seconds:g} s, which the worker lease of "
                    f"{lease_seconds:g} s must outlast by more than {LEASE_MARGIN_SECONDS:g} s: lower its "
                    "timeout_seconds or raise [gateway] lease_seconds",
                    code="timeout_exceeds_lease",
                    tool=tool.name,
                )
            by_name[tool.name] = tool
        # By identity: each toolbox in `reuse` holds its tools, so no id is taken by another object meanwhile.
        known = {id(box[name]): box for box in reuse for name in box}
        versions: dict[str, str] = {}
        schemas: dict[str, Mapping[str, Any]] = {}
        outputs: dict[str, Mapping[str, Any]] = {}
        for name, tool in by_name.items():
            if (box := known.get(id(tool))) is not None:
                versions[name], schemas[name], outputs[name] = (
                    box._versions[name],
                    box._schemas[name],
                    box._outputs[name],
                )
            else:
                versions[name] = definition_hash(tool)
                schemas[name] = tool.arguments.model_json_schema()
                outputs[name] = output_schema(tool)
        self._tools = MappingProxyType(by_name)
        self._versions = MappingProxyType(versions)
        self._schemas = MappingProxyType(schemas)
        self._outputs = MappingProxyType(outputs)

    def current(self) -> Toolbox:
        """A fixed toolbox is its own `ToolSource`."""
        return self

    def input_schema(self, name: str) -> Mapping[str, Any]:
        """The JSON Schema of a tool's arguments: generated from the model the executor validates with."""
        return self._schemas[name]

    def output_schema(self, name: str) -> Mapping[str, Any]:
        """The ``outputSchema`` of a tool: every structured result it can answer (see `gateway.tools.output_schema`)."""
        return self._outputs[name]

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
