"""Every write tool of the in-process adapters declares a preview, and a preview is for writes only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from adapters import orders, rooms
from gateway import Mode, Preview, Tool, ToolDeclarationError

WRITES = [tool for tool in (*rooms.TOOLS, *orders.TOOLS) if tool.mode is Mode.WRITE]
READ = next(tool for tool in rooms.TOOLS if tool.mode is Mode.READ)


async def _preview(args: Any, ctx: Any) -> Preview:
    return Preview(lines=("nothing",))


async def _preflight(args: Any, ctx: Any) -> None:
    return None


@pytest.mark.parametrize("tool", WRITES, ids=lambda tool: tool.name)
def test_every_write_tool_declares_a_preview(tool: Tool) -> None:
    """An approver always sees what the write will change, and the worker has a precondition to check."""
    assert tool.preview is not None and tool.preflight is None


def test_a_read_tool_cannot_declare_a_preview() -> None:
    """A preview belongs to a write; on a read it is a declaration error, as a summary is."""
    with pytest.raises(ToolDeclarationError) as refused:
        dataclasses.replace(READ, preview=_preview)
    assert refused.value.code == "stray_write"


def test_a_write_declares_a_preview_or_a_preflight_not_both() -> None:
    """The preview checks the target itself: a second read beside it would be one read too many."""
    with pytest.raises(ToolDeclarationError) as refused:
        dataclasses.replace(WRITES[0], preflight=_preflight)
    assert refused.value.code == "stray_write"
