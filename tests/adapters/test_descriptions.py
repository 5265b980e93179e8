"""Every input property of a built-in tool says what it is: a model fills arguments from the words it is shown."""

from __future__ import annotations

from typing import Any

import pytest

from adapters import approvals, orders, rooms
from gateway.tools.declarations import Tool

BUILT_IN: list[Tool] = [*approvals.TOOLS, *orders.TOOLS, *rooms.TOOLS]


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    return properties


@pytest.mark.parametrize("tool", BUILT_IN, ids=lambda tool: tool.name)
def test_every_input_property_of_a_built_in_tool_has_a_description(tool: Tool) -> None:
    """A property without a description (``approvals_mine.limit`` had none) fails here, by name."""
    schema = tool.arguments.model_json_schema()
    undescribed = [name for name, prop in _properties(schema).items() if not prop.get("description")]
    assert undescribed == [], f"{tool.name}: {undescribed}"
