"""Adapters: one package per backend, each exporting ``TOOLS: tuple[Tool, ...]``.

Nothing registers itself on import. The composition root asks `load_adapter(name)` for the
adapters the configuration enables, and only those modules are imported.
"""

from __future__ import annotations

import importlib

from gateway.tool import Tool

__all__ = ["ALWAYS_ON", "BUILTIN_ADAPTERS", "load_adapter"]

BUILTIN_ADAPTERS: dict[str, str] = {
    "rooms": "adapters.rooms",
    "orders": "adapters.orders",
    "approvals": "adapters.approvals",
}
"""Adapter name -> module exporting its TOOLS."""

ALWAYS_ON = frozenset({"approvals"})
"""Adapters every gateway serves to every org: they call no backend (the caller's own cards)."""


def load_adapter(name: str) -> tuple[Tool, ...]:
    """The declared tools of adapter `name`.

    Raises:
        LookupError: when no adapter has that name.
    """
    module_name = BUILTIN_ADAPTERS.get(name)
    if module_name is None:
        raise LookupError(name)
    tools: tuple[Tool, ...] = importlib.import_module(module_name).TOOLS
    return tools
