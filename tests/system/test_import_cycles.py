"""No import circle among the product's modules: what each module imports forms a tree.

A circle between two modules is two halves of one idea, or a layer that reaches up; either way the
tree stops saying what depends on what. An import under ``if TYPE_CHECKING:`` counts (a circle in the
types is a circle in the design); an import inside a function does not (the command line loads only
what a command uses, and ``gateway``'s lazy exports load on first use).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "policies", "adapters")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(tree: ast.Module) -> set[str]:
    """What a module imports outside its functions: at load time, and for its annotations (TYPE_CHECKING)."""
    found: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _graph() -> dict[str, set[str]]:
    paths = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    modules = {_module_name(path): path for path in paths}
    return {
        name: {target for target in _module_level_imports(ast.parse(path.read_text())) if target in modules} - {name}
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_product_is_in_an_import_circle() -> None:
    """The module-level imports of gateway/, policies/ and adapters/ have no circle."""
    assert cycles(_graph()) == []


def test_a_circle_is_found() -> None:
    """The check is not vacuous: a circle of three, beside a tree, is reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
