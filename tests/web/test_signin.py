"""In headless Chromium: an approver signs in through a real OpenID provider, registers a passkey with the
browser's virtual authenticator (user verification on), and approves a card from its link with it; the write
runs, and the receipt the backend received carries an assertion that verifies against the registered key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt
import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.passkeys.assertion import public_key_bytes, verify_approval_assertion
from gateway.principal import KeyKind
from gateway.signing.receipts import RECEIPT_HEADER
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.passkeys import PasskeyStore
from tests.support.agents import agent, make_key, payload
from tests.support.browser import Page, browser
from tests.support.cards import settled
from tests.support.oidc_provider import APPROVER, signin_gateway
from tests.support.services import Backend

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module", name="console")
def console_with_signin(
    redis_url: str, backends: dict[str, Backend], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    log = tmp_path_factory.mktemp("oidc") / "provider.log"
    with signin_gateway(redis_url, backends, log, host="localhost") as origin:
        yield origin


async def _until(page: Page, expression: str, *, seconds: float = 15) -> Any:
    """`Page.until` across navigations: an evaluation whose page is being replaced is tried again."""
    with anyio.fail_after(seconds):
        while True:
            try:
                value = await page.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            await anyio.sleep(0.1)


async def _sign_in(page: Page, link: str) -> None:
    await page.send("Page.navigate", {"url": link})
    await _until(page, "!document.querySelector('#sso-box').hidden")
    assert await page.evaluate("document.querySelector('#sign-in-form').hidden"), "no key paste outside demo mode"
    await page.evaluate("document.querySelector('#sso').click()")
    await _until(page, "document.querySelector('input[name=login]') !== null")
    await page.evaluate(
        f"document.querySelector('input[name=login]').value = '{APPROVER}';"
        "document.querySelector('input[name=password]').value = 'any';"
        "document.querySelector('input[name=login]').form.submit()"
    )


async def test_in_a_browser_an_approver_signs_in_registers_a_passkey_and_approves_a_card_with_it(
    console: str, redis: Redis, backends: dict[str, Backend], tmp_path: Path
) -> None:
    agent_key = await make_key(redis, subject="alice@acme.example", roles=("staff",))
    slot = {"room_id": "room-eos", "date": "2026-12-28", "start": "11:00", "end": "11:30", "title": "Passkey review"}
    async with agent(f"{console}/mcp", agent_key) as client:
        receipt = payload(await client.call_tool("rooms_book", slot))
    card_id = receipt["card_id"]
    rooms = backends["rooms"].app.state.service
    mark = rooms.received

    async with browser(tmp_path / "profile") as page:
        await page.send("WebAuthn.enable", {"enableUI": False})
        options = {"protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
                   "hasUserVerification": True, "isUserVerified": True}  # fmt: skip
        await page.send("WebAuthn.addVirtualAuthenticator", {"options": options})
        # The card's notification link; the console sends the approver to the provider and back to the card.
        await _sign_in(page, f"{console}/admin/#/cards/{card_id}")
        await _until(page, "document.querySelector('#approve-button') !== null")
        assert await page.evaluate("document.querySelector('#key-hint').textContent") == f"signed in as {APPROVER}"
        assert await page.evaluate("document.cookie") == "", "the session cookie is HttpOnly"

        await page.evaluate("location.hash = '#/passkeys'")
        await _until(page, "document.querySelector('#passkey-add-button') !== null")
        await page.evaluate(
            "document.querySelector('#passkey-name').value = 'virtual';"
            "document.querySelector('#passkey-add-button').click()"
        )
        await _until(page, "document.querySelector('#passkey-list li') !== null")

        await page.evaluate(f"location.hash = '#/cards/{card_id}'")
        await _until(page, "document.querySelector('#approve-button') !== null")
        await page.evaluate("document.querySelector('#approve-button').click()")
        result = await _until(page, "document.querySelector('#action-result')?.textContent")
        assert "APPROVED" in result or "EXECUTING" in result or "SUCCEEDED" in result, result
        shown = await _until(page, "document.querySelector('#card-detail')?.textContent")
        assert f"signed with a passkey by {APPROVER}" in shown

    card = await settled(redis, card_id)
    assert card.state is CardState.SUCCEEDED
    stored = await RedisLedger(redis).get(card_id)
    assert stored is not None and len(stored.passkeys) == 1
    [registered] = await PasskeyStore(redis).list("acme", APPROVER)
    writes = [r for r in rooms.since(mark) if r.method == "POST" and r.path == "/bookings"]
    assert writes, "the write reached the backend"
    token = writes[-1].headers[RECEIPT_HEADER]
    claims = jwt.decode(token, options={"verify_signature": False})
    [assertion] = claims["passkeys"]
    assert assertion["approver"] == APPROVER and assertion["card_id"] == card_id
    verify_approval_assertion(
        assertion,
        public_key=public_key_bytes({"public_key": registered.public_key}),
        card_id=card_id,
        args_hash=card.args_hash,
        rp_id="localhost",
        origin=console,
    )

    # The same kind of card approved with the approver's API key alone is refused, and nothing is sent.
    async with agent(f"{console}/mcp", agent_key) as client:
        second = payload(await client.call_tool("rooms_book", slot | {"start": "12:00", "end": "12:30"}))
    key = await make_key(redis, kind=KeyKind.ADMIN, subject=APPROVER, roles=("approver",))
    pending = await RedisLedger(redis).get(second["card_id"])
    assert pending is not None
    async with httpx.AsyncClient(base_url=console, headers={"authorization": f"Bearer {key}"}) as http:
        body = {"version": pending.version, "args_hash": pending.args_hash}
        refused = await http.post(f"/admin/api/cards/{pending.card_id}/approve", json=body)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "PASSKEY_REQUIRED"
    after = await RedisLedger(redis).get(pending.card_id)
    assert after is not None and after.state is CardState.PENDING
