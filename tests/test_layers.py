"""Layer boundaries, read from the source with `ast`: each layer imports only what is below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Layer numbers follow ARCHITECTURE.md (1 = surfaces ... 5 = vocabulary; 0 = composition root).
# A module may import modules of its own layer or of a larger number (below it).
LAYERS: dict[str, int] = {
    # 5. vocabulary: plain data every layer imports
    "gateway.errors": 5,
    "gateway.principal": 5,
    "gateway.decision": 5,
    "gateway.grants": 5,
    "gateway.untrusted": 5,
    "gateway.tool": 5,
    "gateway.toolbox": 5,
    "gateway.context": 5,
    "gateway.backend": 5,
    "gateway.envelope": 5,
    "gateway.card": 5,
    "gateway.receipts": 5,
    "gateway": 5,
    "policies": 5,
    "policies.access": 5,
    "policies.manifest_safety": 5,
    # 4. state: audit, keys, embedded server
    "gateway.audit": 4,
    "gateway.keys": 4,
    "gateway.embedded": 4,
    "gateway.identity": 4,
    "gateway.registry": 5,
    "gateway.registry.manifest": 5,
    "gateway.registry.schema": 5,
    "gateway.registry.store": 4,
    "gateway.registry.service": 2,
    "gateway.registry.openapi_import": 2,
    "gateway.live": 1,
    "gateway.registry_api": 1,
    "gateway.ledger": 4,
    "gateway.ledger._lua": 4,
    "gateway.ledger.guard": 4,
    # 3. executor
    "gateway.executor": 3,
    # 2. catalog and the card service
    "gateway.catalog": 2,
    "gateway.cards": 2,
    # 1. surfaces and the composition root
    "gateway.auth": 1,
    "gateway.admin_api": 1,
    "gateway.console": 1,
    "gateway.worker": 1,
    "gateway.mcp_surface": 1,
    "gateway.settings": 1,
    "gateway.app": 0,
    "gateway.serve": 0,
    "gateway.cli": 0,
    "gateway.cli_adapters": 0,
    "gateway.__main__": 0,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _project_modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _project_modules("gateway"), ids=lambda p: p.name)
def test_gateway_modules_import_only_their_layer_or_below(path: Path) -> None:
    """The executor never imports a surface; the vocabulary never imports a layer."""
    name = _module_name(path)
    assert name in LAYERS, f"{name} has no declared layer"
    for imported in _imports(path):
        if imported in LAYERS:
            assert LAYERS[imported] >= LAYERS[name], f"{name} (layer {LAYERS[name]}) imports {imported}"


@pytest.mark.parametrize("path", _project_modules("policies"), ids=lambda p: p.name)
def test_policies_import_only_vocabulary(path: Path) -> None:
    """Policies are pure functions over vocabulary: no layers, no I/O libraries."""
    for imported in _imports(path):
        top = imported.split(".")[0]
        assert top not in {"redis", "httpx", "starlette", "mcp", "uvicorn", "aiohttp"}, imported
        if top == "gateway":
            assert LAYERS.get(imported) == 5, f"policy imports non-vocabulary {imported}"


@pytest.mark.parametrize("path", _project_modules("adapters"), ids=lambda p: p.name)
def test_adapters_import_only_vocabulary(path: Path) -> None:
    """Adapters see the gateway's vocabulary, never its layers."""
    for imported in _imports(path):
        if imported.split(".")[0] == "gateway":
            assert LAYERS.get(imported) == 5, f"adapter imports non-vocabulary {imported}"


def test_vocabulary_does_not_import_mcp_or_redis() -> None:
    """Plain data stays plain: the vocabulary needs no transport or store."""
    for name, layer in LAYERS.items():
        if layer != 5 or not name.startswith("gateway"):
            continue
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / name.replace(".", "/") / "__init__.py"
        tops = {imported.split(".")[0] for imported in _imports(path)}
        assert not tops & {"redis", "mcp", "starlette", "uvicorn"}, name
