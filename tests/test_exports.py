"""The public surface of `gateway` is deliberate: sorted, complete, and free of layers."""

from __future__ import annotations

import subprocess
import sys

import gateway


def test_all_is_sorted_and_every_name_exists() -> None:
    """`gateway.__all__` is sorted and each name resolves."""
    assert list(gateway.__all__) == sorted(gateway.__all__)
    for name in gateway.__all__:
        assert hasattr(gateway, name), name


def test_public_names_are_exactly_all() -> None:
    """Nothing public is exported by accident."""
    public = {name for name in vars(gateway) if not name.startswith("_")}
    modules = {name for name, value in vars(gateway).items() if type(value) is type(sys)}
    assert public - modules == set(gateway.__all__)


def test_importing_gateway_does_not_import_the_composition_root() -> None:
    """Adapters and policies import `gateway` without pulling in the app or the layers."""
    code = "import sys, gateway; print(any(m in sys.modules for m in ('gateway.app', 'gateway.executor')))"
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
