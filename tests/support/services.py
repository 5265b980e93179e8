"""Demo backends, gateway settings and an in-process gateway, shared by end-to-end fixtures and tests."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette
from starlette.datastructures import Secret

from backends.orders import create_orders_app
from backends.rooms import create_rooms_app
from backends.serve import serve_app_in_thread
from gateway.config.settings import BUILTIN, AdapterSettings, Settings
from gateway.principal import Principal
from gateway.runtime.app import Gateway, build_gateway, tools_for
from gateway.signing.identity import IdentityHeaders
from gateway.tools.declarations import Tool


@dataclass(frozen=True)
class Backend:
    """A demo backend running under uvicorn for the whole session."""

    url: str
    token: str
    app: Starlette
    signing_key: str
    """The key the backend verifies callers' signed identity with (the gateway signs with it)."""

    def control(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {self.token}"}, timeout=5)

    def set_faults(self, **spec: object) -> None:
        with self.control() as client:
            client.put("/_faults", json=spec).raise_for_status()

    def clear_faults(self) -> None:
        with self.control() as client:
            client.delete("/_faults").raise_for_status()


@contextmanager
def serve_backends() -> Iterator[dict[str, Backend]]:
    """The rooms and orders services with their demo data, each with its own credential and identity signing key."""
    with ExitStack() as stack:
        started = {}
        for name, factory in (("rooms", create_rooms_app), ("orders", create_orders_app)):
            token, key = secrets.token_urlsafe(16), secrets.token_urlsafe(32)
            app = factory(service_token=token, signing_key=key)
            url = stack.enter_context(serve_app_in_thread(app))
            started[name] = Backend(url=url, token=token, app=app, signing_key=key)
        yield started


BACKEND_TIMEOUT_SECONDS = 1.0
"""Short backend deadline in tests, so "slow past the deadline" takes about a second."""


TEST_SIGNING_KEY = "test-signing-key-for-backend-tests-0123456789"
"""The key backend tests sign callers' identity with, and their backends verify it with."""

EXPENSES_SIGNING_KEY = "test-signing-key-for-expenses-0123456789"
"""The key the gateway signs identity headers for the registered expenses adapter with."""

NOTES_SIGNING_KEY = "test-signing-key-for-notes-0123456789abcd"
"""The key the registry-test gateway signs identity headers for the registered notes adapter with."""

TEST_AUDIT_SECRET = "test-audit-chain-secret-0123456789abcdef"
"""The key of the audit chain of test gateways and of the sinks tests record through."""


def gateway_settings(redis_url: str, backends: dict[str, Backend], *, expenses: Backend | None = None) -> Settings:
    """Settings for a test gateway: rooms and orders configured, expenses only by registration."""
    secrets = {"EXPENSES_SIGNING_KEY": EXPENSES_SIGNING_KEY}
    if expenses is not None:
        secrets["EXPENSES_BACKEND_TOKEN"] = expenses.token
    settings = Settings(
        redis_url=redis_url,
        secrets=secrets,
        registry_poll_seconds=0.2,
        audit_secret=Secret(TEST_AUDIT_SECRET),
        # Demo mode changes nothing create_app builds but the console's sign-in: a pasted admin key (key links).
        demo=True,
        adapters={
            name: AdapterSettings(
                name=name,
                url=b.url,
                token=Secret(b.token),
                signing_key=Secret(b.signing_key),
                timeout_seconds=BACKEND_TIMEOUT_SECONDS,
            )
            for name, b in backends.items()
        },
    )
    return with_generated_policies(settings, tools_for(settings))


GENERATED_POLICIES = "COUNTERSIGN_TEST_POLICIES"
"""Set to ``builtin``, the test gateways decide with the built-in rules printed as Cedar (`countersign policy show`)
in place of the built-in rules themselves: ``COUNTERSIGN_TEST_POLICIES=builtin pytest tests/executor``."""


def with_generated_policies(settings: Settings, tools: Sequence[Tool]) -> Settings:
    """`settings` as they are, or with `GENERATED_POLICIES` set, deciding with their own built-in rules printed
    as Cedar (``policies = "builtin"``, which follows the catalog as adapters are registered)."""
    if os.environ.get(GENERATED_POLICIES) != "builtin" or settings.policies is not None:
        return settings
    return dataclasses.replace(settings, policies=BUILTIN)


@asynccontextmanager
async def in_process_gateway(settings: Settings, tools: Sequence[Tool] | None = None) -> AsyncIterator[Gateway]:
    """The gateway's parts wired by `build_gateway` in this event loop, with no server and no background
    loops (`tools`, or what `settings` configure), closed afterwards: for tests that drive the executor,
    the ledger or the worker step by step."""
    served = tools_for(settings) if tools is None else tools
    gateway = build_gateway(with_generated_policies(settings, served), served)
    try:
        yield gateway
    finally:
        await gateway.aclose()


def signed_identity(subject: str, org: str, *, audience: str, key: str, ttl_seconds: int = 86_400) -> dict[str, str]:
    """The identity headers the gateway sends `audience`'s backend for this caller, signed with `key`.

    Valid for a day by default, so module-level constants outlive any test session.
    """
    caller = Principal(subject=subject, org=org, roles=frozenset())
    return IdentityHeaders({audience: key}, ttl_seconds=ttl_seconds)(caller, audience)
