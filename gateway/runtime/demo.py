"""What only demo mode has: its backends, its expenses service, and its keys.

Called by `gateway.runtime.serve` when `Settings.demo` is set, and never otherwise: production starts no
backend and creates no key (the operator creates the first admin with ``countersign keys create``).
The demo backends keep their data in ``<data_dir>/backends/<name>.json`` (`backends._persist`), so
after a restart a SUCCEEDED card still points at a booking that exists. Each gets a fresh service
token and signing key per start: the gateway starts the backend, so it may make up the key both
sides share. The demo keys are created once and kept in the data directory (0600), and the first
signing key of the gateway's own key set (`ensure_signing_key`) is made when there is none.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends._persist import StateFileError
from backends.expenses import create_expenses_app, expenses_manifest
from backends.orders import create_orders_app
from backends.rooms import create_rooms_app
from backends.serve import serve_app
from gateway.errors import ConfigError
from gateway.outbound.backend_client import AiohttpUpstream
from gateway.principal import KeyKind
from gateway.signing.signer import OVERLAP_SECONDS
from gateway.store.keys import KeyStore
from gateway.store.signing_keys import SigningKeyStore

__all__ = [
    "DEMO_ADMIN_KEY_FILE",
    "DEMO_BACKENDS",
    "DEMO_KEY_FILE",
    "DEMO_SERVICE_KEY_FILE",
    "DemoBackend",
    "DemoKeys",
    "demo_keys",
    "ensure_demo_key",
    "ensure_signing_key",
    "register_demo_manifest",
    "start_backend",
]

DEMO_KEY_FILE = "demo-agent.key"
DEMO_ADMIN_KEY_FILE = "demo-admin.key"
DEMO_SERVICE_KEY_FILE = "demo-service.key"
BACKENDS_DIR = "backends"

DEMO_BACKENDS: dict[str, Callable[..., Any]] = {"rooms": create_rooms_app, "orders": create_orders_app}
"""The configured adapters a demo backend can stand in for."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DemoBackend:
    """A demo backend running in this process, and the credentials the gateway shares with it."""

    url: str
    token: str
    signing_key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DemoKeys:
    """The demo's keys, as printed at startup."""

    agent: str
    admin: str
    service: str


@contextlib.asynccontextmanager
async def start_backend(
    name: str, data_dir: Path, *, port: int = 0, jwks_url: str | None = None
) -> AsyncIterator[DemoBackend]:
    """Run demo backend `name` (``expenses`` too) with its state in the data directory.

    `port` is tried first when given; taken, any free port will do (the expenses manifest then
    changes, and is quarantined again). With `jwks_url` (the gateway's published keys) the backend
    refuses every write without the gateway's approval receipt for it.

    Raises:
        ConfigError: there is no demo backend of that name, or its state file cannot be read.
    """
    factories = {**DEMO_BACKENDS, "expenses": create_expenses_app}
    if name not in factories:
        raise ConfigError(f"adapter {name} has no url and no demo backend")
    token, signing_key = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    state_file = data_dir / BACKENDS_DIR / f"{name}.json"
    try:
        app = factories[name](service_token=token, signing_key=signing_key, state_file=state_file, jwks_url=jwks_url)
    except StateFileError as error:
        raise ConfigError(f"demo backend {name}: {error} (remove it to start from the seed data)") from error
    async with _serve_on(app, port) as url:
        yield DemoBackend(url=url, token=token, signing_key=signing_key)


@contextlib.asynccontextmanager
async def _serve_on(app: Any, port: int) -> AsyncIterator[str]:
    async with contextlib.AsyncExitStack() as stack:
        try:
            base = await stack.enter_async_context(serve_app(app, port=port))
        except OSError:  # taken: any free port will do
            base = await stack.enter_async_context(serve_app(app))
        yield base


async def ensure_signing_key(store: SigningKeyStore) -> None:
    """The demo's first signing key, when the store has none (production waits for an operator's
    ``countersign signing-keys rotate``). A race with another starting process is lost harmlessly."""
    if (await store.load()).active_kid is None:
        await store.rotate(overlap_ms=OVERLAP_SECONDS * 1000, expected_active=None)


async def demo_keys(keys: KeyStore, data_dir: Path) -> DemoKeys:
    """The demo agent, admin and service keys of acme, each reused while it is live."""
    return DemoKeys(
        agent=await ensure_demo_key(keys, data_dir),
        admin=await ensure_demo_key(
            keys,
            data_dir,
            file=DEMO_ADMIN_KEY_FILE,
            kind=KeyKind.ADMIN,
            subject="root@acme.example",
            roles=("approver", "registry"),
        ),
        service=await ensure_demo_key(
            keys, data_dir, file=DEMO_SERVICE_KEY_FILE, kind=KeyKind.SERVICE, subject="expenses-svc", roles=()
        ),
    )


async def ensure_demo_key(
    keys: KeyStore,
    data_dir: Path,
    *,
    file: str = DEMO_KEY_FILE,
    kind: KeyKind = KeyKind.AGENT,
    subject: str = "demo@acme.example",
    roles: tuple[str, ...] = ("staff", "support"),
) -> str:
    """A demo key: the one saved in `data_dir/file` while it is live, else a new one (saved 0600)."""
    path = data_dir / file
    if path.exists():
        token = path.read_text().strip()
        if await keys.resolve(token) is not None:
            return token
    token, _record = await keys.create(kind=kind, subject=subject, org="acme", roles=roles)
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


async def register_demo_manifest(gateway_url: str, service_key: str, expenses_url: str) -> str:
    """Register the demo expenses service by manifest over HTTP, as any service would."""
    client = AiohttpUpstream(gateway_url, service="registry", credential=service_key)
    manifest = expenses_manifest(expenses_url)
    try:
        answer = await client.request("PUT", "/registry/api/adapters/expenses", json=manifest)
    finally:
        await client.aclose()
    body = answer.json()
    if answer.status not in (200, 202):
        return f"registration refused ({answer.status}): {body}"
    adapter = body["adapter"]
    if adapter["state"] == "active":
        return "registered by manifest; accepted and served"
    return f"registered by manifest; quarantined until accepted (proposed {adapter['proposed_hash']})"
