"""The public surface of `gateway` is deliberate: sorted, complete, and free of layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import gateway

ADAPTERS = Path(__file__).resolve().parents[2] / "adapters"


def test_all_is_sorted_and_every_name_exists() -> None:
    """`gateway.__all__` is sorted and each name resolves."""
    assert list(gateway.__all__) == sorted(gateway.__all__)
    for name in gateway.__all__:
        assert hasattr(gateway, name), name


def test_public_names_are_exactly_all() -> None:
    """Nothing public is exported by accident (names resolve on first use: `dir` lists them all)."""
    public = {name for name in dir(gateway) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(gateway, name)) is type(sys)}
    assert public - modules - {"annotations", "importlib", "TYPE_CHECKING", "Any"} == set(gateway.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        gateway.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


def test_importing_gateway_does_not_import_the_composition_root() -> None:
    """Adapters and policies import `gateway` without pulling in the app or the layers."""
    code = "import sys, gateway; print(any(m in sys.modules for m in ('gateway.runtime.app', 'gateway.executor')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_gateway_imports_no_server_or_store_library() -> None:
    """The vocabulary stays plain: `import gateway` loads no Redis, aiohttp, Starlette or MCP module."""
    code = (
        "import sys, gateway; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'redis', 'aiohttp', 'starlette', 'mcp', 'uvicorn'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_adapter_can_be_declared_from_the_public_api_alone() -> None:
    """Everything a third-party adapter needs is exported: tools, access, approval, contract, calls."""
    needed = {"Tool", "Access", "Approval", "Escalation", "Mode", "WriteContract", "ToolContext", "request_json",
              "fill_path", "keyed_contract", "Untrusted"}  # fmt: skip
    assert needed <= set(gateway.__all__)


def _private_gateway_imports(source: str) -> list[str]:
    """Every import in `source` that reaches `gateway` other than as `from gateway import <public name>`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "gateway"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "gateway":
            if node.module != "gateway":
                found.append(node.module or "")
            else:
                found += [f"gateway.{alias.name}" for alias in node.names if alias.name not in gateway.__all__]
    return found


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from gateway import Tool, request_json", []),
        ("from pydantic import BaseModel\nfrom . import rooms", []),
        ("from gateway.tools.declarations import Tool", ["gateway.tools.declarations"]),
        ("from gateway import tools", ["gateway.tools"]),
        ("import gateway", ["gateway"]),
        ("import gateway.errors as errors", ["gateway.errors"]),
        ("def f():\n    from gateway.untrusted import Untrusted", ["gateway.untrusted"]),
        ("if TYPE_CHECKING:\n    from gateway.tools.backend_http import fill_path", ["gateway.tools.backend_http"]),
    ],
)
def test_the_public_import_rule_tells_public_from_private(source: str, found: list[str]) -> None:
    """The rule below accepts only `from gateway import` of exported names, wherever the import stands."""
    assert _private_gateway_imports(source) == found


def test_built_in_adapters_import_gateway_only_through_its_public_names() -> None:
    """Every module in `adapters/` uses `from gateway import ...` of `gateway.__all__` and nothing deeper,
    so the built-in adapters prove a third-party adapter can be written from the public API alone."""
    modules = sorted(ADAPTERS.rglob("*.py"))
    assert {"rooms.py", "orders.py", "approvals.py"} <= {path.name for path in modules}
    private = {str(path.relative_to(ADAPTERS)): _private_gateway_imports(path.read_text()) for path in modules}
    assert {name: imports for name, imports in private.items() if imports} == {}
