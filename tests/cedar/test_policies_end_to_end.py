"""The example policy set of the README through a real gateway: a real MCP client, the admin API, Redis, backends."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.cli.main import main
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.cedar.test_engine import EXAMPLE
from tests.support.agents import agent, error_code, make_key, payload
from tests.support.cards import settled
from tests.support.services import gateway_settings, serve_backends

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", name="redis_url")
def policy_database(redis_server_url: str) -> str:
    """A database of its own: this module's gateway and worker are the only ones on it."""
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/7"))


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    policies = tmp_path_factory.mktemp("policies") / "refunds.cedar"
    policies.write_text(EXAMPLE)
    return policies


@pytest.fixture(scope="module")
def gateway_url(redis_url: str, policy_file: Path) -> Iterator[str]:
    """A gateway whose access and approvals the example policy set decides."""
    policies = policy_file
    with serve_backends() as backends:
        settings = dataclasses.replace(gateway_settings(redis_url, backends), policies=policies)
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            yield base


async def _agent(redis: Redis, *roles: str, subject: str = "sam@acme.example") -> tuple[str, str]:
    """A new agent key holding `roles`: its token and its key id."""
    token, record = await KeyStore(redis).create(kind=KeyKind.AGENT, subject=subject, org="acme", roles=roles)
    return token, record.key_id


def _explain(
    redis_url: str, policies: Path, key_id: str, cents: int, capsys: pytest.CaptureFixture[str], *says: str
) -> None:
    """``countersign policy explain`` for this key's refund of `cents`, on the gateway's store and set, prints each
    of `says` (its lines, the deciding policies among them)."""
    call = f'{{"order_id": "ord-1001", "amount_cents": {cents}, "reason": "damaged"}}'
    argv = ["policy", "explain", "--key", key_id, "--tool", "orders_refund_create", "--policies", str(policies)]
    capsys.readouterr()
    assert main([*argv, "--args", call], {"COUNTERSIGN_MODE": "demo", "COUNTERSIGN_REDIS_URL": redis_url}) == 0
    out = capsys.readouterr().out.splitlines()
    assert all(line in out for line in says), out


async def _refund(base: str, token: str, cents: int) -> Any:
    async with agent(f"{base}/mcp", token) as client:
        return await client.call_tool(
            "orders_refund_create", {"order_id": "ord-1001", "amount_cents": cents, "reason": "damaged"}
        )


async def test_a_small_refund_by_support_is_approved_by_its_policy_and_runs(
    redis: Redis, redis_url: str, gateway_url: str, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under 20.00: the auto policy approves as policy:<id>, the worker runs it, the audit names the policy, and
    ``policy explain`` names it too."""
    token, key_id = await _agent(redis, "support")
    receipt = payload(await _refund(gateway_url, token, 1_500))
    assert receipt["approved_by_policy"] is True
    card = await settled(redis, receipt["card_id"])
    assert card.state is CardState.SUCCEEDED and card.approvers == ("policy:small-refunds-by-support",)
    events = await RedisStreamAuditSink(redis).recent(200)
    [proposed] = [e for e in events if e.action == "card.propose" and e.extra.get("card_id") == card.card_id]
    assert proposed.extra["policies"] == "small-refunds-by-support"
    says = (
        "listed: yes",
        "approve: auto (as policy:small-refunds-by-support)",
        "deciding policies: small-refunds-by-support",
    )
    await anyio.to_thread.run_sync(_explain, redis_url, policy_file, key_id, 1_500, capsys, *says)


async def test_a_refund_between_needs_two_finance_approvers_through_the_admin_api(
    redis: Redis, redis_url: str, gateway_url: str, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From 20.00 to 500.00: two approvers holding finance; an approver without it is refused; the proposal's
    audit entry and ``policy explain`` name the same policy."""
    token, key_id = await _agent(redis, "support")
    receipt = payload(await _refund(gateway_url, token, 30_000))
    assert receipt["status"] == "PENDING" and receipt["said"] == "waiting for approval (0 of 2)"
    ledger = RedisLedger(redis)
    admins = {
        name: await make_key(redis, roles=roles, subject=f"{name}@acme.example", kind=KeyKind.ADMIN)
        for name, roles in (("ops", ("approver",)), ("fay", ("finance",)), ("fin", ("finance",)))
    }
    async with httpx.AsyncClient(base_url=gateway_url) as http:

        async def approve(who: str) -> httpx.Response:
            card = await ledger.get(receipt["card_id"])
            assert card is not None and card.approver_role == "finance"
            body = {"version": card.version, "args_hash": card.args_hash, "comment": "ok"}
            headers = {"authorization": f"Bearer {admins[who]}"}
            return await http.post(f"/admin/api/cards/{card.card_id}/approve", json=body, headers=headers)

        assert (await approve("ops")).status_code == 403
        assert (await approve("fay")).status_code == 200
        assert (await approve("fin")).status_code == 200
    card = await settled(redis, receipt["card_id"])
    assert card.state is CardState.SUCCEEDED and set(card.approvers) == {"fay@acme.example", "fin@acme.example"}
    events = await RedisStreamAuditSink(redis).recent(200)
    [proposed] = [e for e in events if e.action == "card.propose" and e.extra.get("card_id") == card.card_id]
    assert proposed.extra["policies"] == "refunds-need-two-finance"
    says = ("approve: 2 approver(s), approver role finance", "deciding policies: refunds-need-two-finance")
    await anyio.to_thread.run_sync(_explain, redis_url, policy_file, key_id, 30_000, capsys, *says)


async def test_a_refund_over_500_is_refused_to_anyone(
    redis: Redis, redis_url: str, gateway_url: str, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Over 500.00: PERMISSION_DENIED as data, no card, and the audit and ``policy explain`` name the forbidding
    policy."""
    token, key_id = await _agent(redis, "support", "finance", subject="sue@acme.example")
    result = await _refund(gateway_url, token, 50_001)
    assert result.is_error and error_code(result) == "PERMISSION_DENIED"
    events = await RedisStreamAuditSink(redis).recent(50)
    denied = [e for e in events if e.tool == "orders_refund_create" and e.outcome == "deny"]
    assert denied and denied[0].reason == "forbidden by policy refunds-over-500-forbidden"
    says = ("listed: yes", "deny", "deciding policies: refunds-over-500-forbidden")
    await anyio.to_thread.run_sync(_explain, redis_url, policy_file, key_id, 50_001, capsys, *says)


async def test_a_viewer_does_not_see_the_refund_tool_and_cannot_call_it(
    redis: Redis, redis_url: str, gateway_url: str, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The catalog hides it and the executor refuses it, as one access function decides; the refusal's audit entry
    and ``policy explain`` name the hiding policy."""
    token, key_id = await _agent(redis, "viewer", "support", subject="vic@acme.example")
    async with agent(f"{gateway_url}/mcp", token) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert "orders_refund_create" not in names and "orders_get" in names
    result = await _refund(gateway_url, token, 100)
    assert result.is_error and error_code(result) == "PERMISSION_DENIED"
    events = await RedisStreamAuditSink(redis).recent(50)
    [denied] = [e for e in events if e.tool == "orders_refund_create" and e.key_id == key_id]
    assert denied.outcome == "deny" and denied.reason == "forbidden by policy viewers-never-see-refunds"
    says = ("listed: no", "deny", "deciding policies: viewers-never-see-refunds")
    await anyio.to_thread.run_sync(_explain, redis_url, policy_file, key_id, 100, capsys, *says)


async def test_readyz_names_the_policy_set_in_force_and_keeps_it_when_a_bad_one_is_written(
    gateway_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """/readyz shows the set's source and digest; a wrong argument type leaves it in force and says why."""
    async with httpx.AsyncClient(base_url=gateway_url) as http:
        active = (await http.get("/readyz")).json()["policies"]["active"]
        assert active.endswith(".cedar@sha256:" + active.rsplit(":", 1)[1]) and "refunds.cedar" in active
        path = Path(active.split("@sha256:")[0])
        good = path.read_text()
        bad = 'permit (principal, action == Action::"orders_refund_create", resource)'
        path.write_text(good + f'\n@id("typo") {bad} when {{ context.arguments.amount_cents > "5" }};\n')
        try:
            with anyio.fail_after(10):
                while "refused" not in (status := (await http.get("/readyz")).json()["policies"]):
                    await anyio.sleep(0.1)
            assert status["active"] == active and "typo" in status["refused"]
        finally:
            path.write_text(good)
        with anyio.fail_after(10):
            while "refused" in (await http.get("/readyz")).json()["policies"]:
                await anyio.sleep(0.1)
