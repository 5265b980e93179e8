"""The reference agent is a client of the gateway: it reaches it over MCP and HTTP only, so it
imports nothing of the gateway, its adapters, backends, policies or store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent.parent / "countersign_agent"
FORBIDDEN = frozenset({"gateway", "adapters", "backends", "policies", "redis", "tests"})


def imported_tops(source: str) -> set[str]:
    """The top-level packages `source` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda path: path.name)
def test_the_agent_imports_nothing_of_the_gateway(path: Path) -> None:
    assert imported_tops(path.read_text()) & FORBIDDEN == set()


@pytest.mark.parametrize(
    "source", ["import gateway", "from gateway.cards.card import Card", "def f():\n    from redis import Redis"]
)
def test_the_rule_catches_a_gateway_import(source: str) -> None:
    assert imported_tops(source) & FORBIDDEN
