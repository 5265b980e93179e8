"""A policy set naming a registered adapter's tools, through real gateways: it starts once the adapter is pinned,
decides its tools, and ``policy explain`` explains them; a re-registration that breaks it leaves it in force."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends.expenses import expenses_manifest
from backends.serve import serve_app_in_thread
from gateway.cli.main import main
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from tests.cedar.test_engine import EXAMPLE
from tests.support.agents import agent, payload
from tests.support.registration import register_and_accept
from tests.support.services import Backend, gateway_settings
from tests.support.signing import signing_key_before_start

pytestmark = pytest.mark.anyio

EXPENSES = """
@id("staff-submits-expenses-up-to-100") @approval("1")
permit (principal in Role::"staff", action == Action::"expenses_submit", resource)
when { context.arguments.amount_cents <= 10000 };
"""


@pytest.fixture(scope="module", name="redis_url")
def registered_database(redis_server_url: str) -> str:
    """A database of its own: this module's gateways are the only ones on it."""
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/13"))


def _readyz(base: str) -> dict[str, Any]:
    policies: dict[str, Any] = httpx.get(f"{base}/readyz", timeout=5).json()["policies"]
    return policies


async def test_a_set_naming_a_registered_tool_starts_decides_it_and_explains_it(
    redis: Redis,
    redis_url: str,
    backends: dict[str, Backend],
    expenses: Backend,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The expenses adapter is registered and accepted; a gateway started with a set that names its write tool
    (validated only once the pinned adapter is read) lists it for staff, files its card with one approval in the
    policy's name, and ``policy explain`` on the same store says so."""
    await anyio.to_thread.run_sync(signing_key_before_start, redis_url)
    settings = gateway_settings(redis_url, backends, expenses=expenses)
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        await register_and_accept(f"{base}/mcp", redis, expenses_manifest(expenses.url), "expenses")
    policies = tmp_path / "policies.cedar"
    policies.write_text(EXAMPLE + EXPENSES)
    with serve_app_in_thread(create_app(dataclasses.replace(settings, policies=policies)), lifespan=True) as base:
        status = await anyio.to_thread.run_sync(_readyz, base)
        assert "refused" not in status and status["active"].startswith(f"{policies}@sha256:")
        token, record = await KeyStore(redis).create(
            kind=KeyKind.AGENT, subject="sam@acme.example", org="acme", roles=("staff",)
        )
        async with agent(f"{base}/mcp", token) as client:
            assert "expenses_submit" in {tool.name for tool in (await client.list_tools()).tools}
            submitted = {"title": "Train", "amount_cents": 5_000, "currency": "USD"}
            receipt = payload(await client.call_tool("expenses_submit", submitted))
        assert receipt["status"] == "PENDING" and receipt["said"] == "waiting for approval (0 of 1)"
        events = await RedisStreamAuditSink(redis).recent(50)
        [proposed] = [e for e in events if e.action == "card.propose" and e.extra.get("card_id") == receipt["card_id"]]
        assert proposed.extra["policies"] == "staff-submits-expenses-up-to-100"
    call = '{"title": "Train", "amount_cents": 5000, "currency": "USD"}'
    argv = ["policy", "explain", "--key", record.key_id, "--tool", "expenses_submit", "--policies", str(policies)]
    environ = {"COUNTERSIGN_MODE": "demo", "COUNTERSIGN_REDIS_URL": redis_url}
    capsys.readouterr()
    assert await anyio.to_thread.run_sync(main, [*argv, "--args", call], environ) == 0
    explained = capsys.readouterr().out
    assert "listed: yes" in explained and "approve: 1 approver(s)" in explained
    assert "deciding policies: staff-submits-expenses-up-to-100\n" in explained


async def test_a_re_registration_the_set_no_longer_validates_against_keeps_it_in_force(
    redis: Redis, redis_url: str, backends: dict[str, Backend], expenses: Backend, tmp_path: Path
) -> None:
    """The running gateway's set reads the expenses amount as a number; the adapter is registered again with the
    amount as text: the catalog changes, the set is refused against it with Cedar's message in /readyz, and the
    set in force stays."""
    await anyio.to_thread.run_sync(signing_key_before_start, redis_url)
    settings = gateway_settings(redis_url, backends, expenses=expenses)
    manifest = expenses_manifest(expenses.url)
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        await register_and_accept(f"{base}/mcp", redis, manifest, "expenses")
    policies = tmp_path / "policies.cedar"
    policies.write_text(EXAMPLE + EXPENSES)
    with serve_app_in_thread(create_app(dataclasses.replace(settings, policies=policies)), lifespan=True) as base:
        active = (await anyio.to_thread.run_sync(_readyz, base))["active"]
        retyped = copy.deepcopy(manifest)
        [submit] = [tool for tool in retyped["tools"] if tool["name"] == "expenses_submit"]
        submit["input_schema"]["properties"]["amount_cents"] = {"type": "string", "maxLength": 12}
        await register_and_accept(f"{base}/mcp", redis, retyped, "expenses")
        with anyio.fail_after(10):
            while "refused" not in (status := await anyio.to_thread.run_sync(_readyz, base)):
                await anyio.sleep(0.1)
        assert status["active"] == active and "staff-submits-expenses-up-to-100" in status["refused"]
