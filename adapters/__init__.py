"""Adapters: one package per backend, each exporting ``TOOLS: tuple[Tool, ...]``.

Nothing registers itself on import. The composition root asks `load_adapter(name)` for the
adapters the configuration enables, and only those modules are imported.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from gateway import Tool

__all__ = ["ALWAYS_ON", "BUILTIN_ADAPTERS", "ENTRY_POINT_GROUP", "load_adapter"]

BUILTIN_ADAPTERS: dict[str, str] = {
    "rooms": "adapters.rooms",
    "orders": "adapters.orders",
    "approvals": "adapters.approvals",
}
"""Adapter name -> module exporting its TOOLS."""

ALWAYS_ON = frozenset({"approvals"})
"""Adapters every gateway serves to every org: they call no backend (the caller's own cards)."""


ENTRY_POINT_GROUP = "countersign.adapters"
"""Installed adapter packages announce themselves here (``name = "package.module"``); they are
imported only when the configuration names them, never merely because they are installed."""


def load_adapter(name: str) -> tuple[Tool, ...]:
    """The declared tools of adapter `name`: a built-in one, or an installed package's.

    Raises:
        LookupError: when no adapter has that name.
        TypeError: when the module's TOOLS is not a tuple of `Tool`.
    """
    module_name = BUILTIN_ADAPTERS.get(name)
    if module_name is None:
        found = entry_points(group=ENTRY_POINT_GROUP, name=name)
        if not found:
            raise LookupError(name)
        module_name = next(iter(found)).value.split(":")[0]
    tools = importlib.import_module(module_name).TOOLS
    if not isinstance(tools, tuple) or not all(isinstance(tool, Tool) for tool in tools):
        raise TypeError(f"adapter {name}: TOOLS must be a tuple of Tool")
    if any(tool.adapter != name for tool in tools):
        raise TypeError(f"adapter {name}: every tool must declare adapter={name!r}")
    return tools
