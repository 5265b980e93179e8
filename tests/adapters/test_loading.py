"""Adapters load by name: built-in ones, and installed packages found through an entry point."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters import ENTRY_POINT_GROUP, load_adapter


@pytest.fixture
def installed_adapter(tmp_path: Path) -> Iterator[str]:
    """A real distribution on sys.path: a module exporting TOOLS and a dist-info announcing it."""
    (tmp_path / "acme_tickets.py").write_text(
        textwrap.dedent(
            """
            from pydantic import BaseModel, ConfigDict
            from gateway.tools.declarations import Access, Mode, Tool

            class NoArgs(BaseModel):
                model_config = ConfigDict(extra="forbid")

            class Out(BaseModel):
                count: int

            async def _count(args, ctx):
                return {"count": 0}

            TOOLS = (
                Tool(name="tickets_count", adapter="tickets", description="Count open tickets.", mode=Mode.READ,
                     arguments=NoArgs, output=Out, access=Access.roles("staff"), execute=_count),
            )
            """
        )
    )
    dist = tmp_path / "acme_tickets-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tickets\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ntickets = acme_tickets\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield "tickets"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("acme_tickets", None)


def test_an_installed_adapter_is_found_by_its_entry_point_when_named(installed_adapter: str) -> None:
    """Naming the adapter imports the package and returns its declared tools."""
    assert "acme_tickets" not in sys.modules  # installed, but nothing imported it yet
    [tool] = load_adapter(installed_adapter)
    assert tool.name == "tickets_count" and tool.adapter == "tickets"


def test_an_unknown_adapter_name_is_a_lookup_error() -> None:
    """A name that no built-in or installed adapter has is refused."""
    with pytest.raises(LookupError):
        load_adapter("nonexistent")


def test_built_in_adapters_load_by_name() -> None:
    """rooms and orders are built in; their tools all belong to them."""
    for name in ("rooms", "orders", "approvals"):
        assert {tool.adapter for tool in load_adapter(name)} == {name}
