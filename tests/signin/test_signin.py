"""Approvers sign in to the console through a real OpenID provider (npm ``oidc-provider``), on a real gateway.

The browser here is an httpx client with a cookie jar that follows the provider's redirects and posts its
login form, as a browser would; tests/web/test_signin.py drives the same flow in Chromium.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from gateway.cards.card import CardState
from gateway.cli.main import main
from gateway.principal import KeyKind
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.console_sessions import SessionStore
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.passkeys import PasskeyStore, StoredPasskey
from tests.support.cards import PROPOSAL
from tests.support.oidc_provider import APPROVER, CLIENT_ID, signin_gateway
from tests.support.services import TEST_AUDIT_SECRET, Backend

pytestmark = pytest.mark.anyio

COOKIE = "countersign_session"
"""The session cookie's name on a plain-HTTP loopback console (``__Host-`` prefixed, and Secure, elsewhere)."""


@pytest.fixture(scope="module", name="signin_gateway")
def gateway_with_signin(
    redis_url: str, backends: dict[str, Backend], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A gateway whose console signs approvers in through a running oidc-provider; its base URL."""
    with signin_gateway(redis_url, backends, tmp_path_factory.mktemp("oidc") / "provider.log") as base:
        yield base


@contextlib.asynccontextmanager
async def signed_in(base: str, user: str = APPROVER) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.Response]]:
    """A browser-like client signed in as `user`, and the gateway's answer to the provider's callback."""
    async with httpx.AsyncClient(base_url=base, timeout=15) as http:
        started = await http.get("/admin/signin")
        assert started.status_code == 302, started.text
        page = await http.get(started.headers["location"], follow_redirects=True)
        action = re.search(r'<form autocomplete="off" action="([^"]+)"', page.text)
        assert action is not None, page.text
        form = {"prompt": "login", "login": user, "password": "any"}
        login = await http.post(str(page.url.join(action.group(1))), data=form)
        answer = login
        while answer.status_code in (302, 303) and "/admin/signin/callback" not in answer.headers["location"]:
            answer = await http.get(str(answer.url.join(answer.headers["location"])))
        assert answer.status_code in (302, 303), answer.text
        callback = await http.get(answer.headers["location"])
        yield http, callback


def _cookie(callback: httpx.Response) -> str:
    [header] = [value for value in callback.headers.get_list("set-cookie") if value.startswith(f"{COOKIE}=")]
    return header


async def test_an_approver_signs_in_and_the_session_is_an_httponly_strict_cookie(signin_gateway: str) -> None:
    """The provider's subject, org and roles become the admin; the cookie is HttpOnly and SameSite=Strict."""
    async with signed_in(signin_gateway) as (http, callback):
        assert callback.status_code == 303 and callback.headers["location"] == "/admin/"
        cookie = _cookie(callback)
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/admin" in cookie
        session = (await http.get("/admin/session")).json()
        assert session["signed_in"] is True
        assert (session["subject"], session["org"], session["roles"]) == (APPROVER, "acme", ["approver"])
        assert session["sign_in"] == {"provider": True, "admin_key": False}
        cards = await http.get("/admin/api/cards")
    assert cards.status_code == 200


async def test_the_subject_is_normalised_like_every_other(signin_gateway: str) -> None:
    """``Mallory@ACME.example`` at the provider is ``mallory@acme.example`` here, as a key's subject would be."""
    async with signed_in(signin_gateway, "Mallory@ACME.example") as (http, _):
        session = (await http.get("/admin/session")).json()
    assert session["subject"] == "mallory@acme.example"


async def _pending_card(redis: Redis) -> str:
    created = await RedisLedger(redis).propose(replace(PROPOSAL, dedupe_key="signin"))
    assert created.card is not None
    return created.card.card_id


async def test_a_cross_site_post_with_the_cookie_is_refused_and_changes_nothing(
    signin_gateway: str, redis: Redis
) -> None:
    """Another origin, or no CSRF token: CSRF_REFUSED, the card untouched, audited; the console's own request passes."""
    card_id = await _pending_card(redis)
    body = {"reason": "no", "version": 1, "args_hash": PROPOSAL.args_hash}
    async with signed_in(signin_gateway) as (http, _):
        csrf = (await http.get("/admin/session")).json()["csrf"]
        path = f"/admin/api/cards/{card_id}/reject"
        forged = await http.post(path, json=body, headers={"origin": "http://evil.example", "x-csrf-token": csrf})
        tokenless = await http.post(path, json=body, headers={"origin": signin_gateway})
        cross = await http.post(path, json=body, headers={"sec-fetch-site": "cross-site", "x-csrf-token": csrf})
        card = await RedisLedger(redis).get(card_id)
        assert card is not None and card.state is CardState.PENDING
        own = await http.post(path, json=body, headers={"origin": signin_gateway, "x-csrf-token": csrf})
    assert [r.status_code for r in (forged, tokenless, cross)] == [403, 403, 403]
    assert {r.json()["error"]["code"] for r in (forged, tokenless, cross)} == {"CSRF_REFUSED"}
    assert own.status_code == 200 and own.json()["card"]["state"] == "REJECTED"
    refusals = [e for e in await RedisStreamAuditSink(redis).recent(100) if e.action == "session.reject"]
    assert [e.code for e in refusals] == ["CSRF_REFUSED"] * 3 and refusals[0].subject == APPROVER


def _cli(redis_url: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(args), {"COUNTERSIGN_AUDIT_SECRET": TEST_AUDIT_SECRET, "COUNTERSIGN_REDIS_URL": redis_url})
    return status, out.getvalue()


async def test_a_session_revoked_from_the_cli_cannot_decide(signin_gateway: str, redis: Redis, redis_url: str) -> None:
    """``countersign sessions revoke`` ends every session of the approver at once; the next request is 401."""
    card_id = await _pending_card(redis)
    async with signed_in(signin_gateway) as (http, _):
        csrf = (await http.get("/admin/session")).json()["csrf"]
        status, out = await anyio.to_thread.run_sync(
            lambda: _cli(redis_url, "sessions", "revoke", "--org", "acme", "--subject", APPROVER)
        )
        assert status == 0 and "ended 1 console session" in out
        body = {"reason": "no", "version": 1, "args_hash": PROPOSAL.args_hash}
        refused = await http.post(f"/admin/api/cards/{card_id}/reject", json=body, headers={"x-csrf-token": csrf})
        session = (await http.get("/admin/session")).json()
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHENTICATED"
    assert session["signed_in"] is False
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING
    revoked = [e for e in await RedisStreamAuditSink(redis).recent(100) if e.action == "session.revoke"]
    assert revoked and revoked[0].extra["approver"] == APPROVER


async def test_an_expired_session_cannot_decide(redis: Redis) -> None:
    """Past its absolute end (by the Redis clock) a session resolves to nothing, however recently it was used."""
    sessions = SessionStore(redis)
    token, session = await sessions.open(
        subject=APPROVER, org="acme", roles=["approver"], idle_ms=60_000, absolute_ms=1_500
    )
    assert (await sessions.resolve(token, idle_ms=60_000)) == session
    with anyio.fail_after(15):
        while await sessions.resolve(token, idle_ms=60_000) is not None:
            await anyio.sleep(0.05)
    assert await redis.exists(f"countersign:session:{{{session.session_hash}}}") == 0


async def test_an_idle_session_ends(redis: Redis) -> None:
    """Unused for its idle window, a session is gone though its absolute end is hours away."""
    sessions = SessionStore(redis)
    token, _ = await sessions.open(subject=APPROVER, org="acme", roles=[], idle_ms=1_000, absolute_ms=3_600_000)
    with anyio.fail_after(15):
        while await redis.exists(f"countersign:session:{{{hashlib.sha256(token.encode()).hexdigest()}}}"):
            await anyio.sleep(0.05)
    assert await sessions.resolve(token, idle_ms=1_000) is None


async def test_signing_out_ends_the_session_here_and_points_at_the_provider(signin_gateway: str) -> None:
    async with signed_in(signin_gateway) as (http, _):
        csrf = (await http.get("/admin/session")).json()["csrf"]
        refused = await http.post("/admin/signout", headers={"origin": "http://evil.example", "x-csrf-token": csrf})
        assert refused.status_code == 403
        out = await http.post("/admin/signout", headers={"origin": signin_gateway, "x-csrf-token": csrf})
        assert out.status_code == 200
        provider = out.json()["provider_logout"]
        assert "/session/end" in provider and f"client_id={CLIENT_ID}" in provider and "id_token_hint=" in provider
        assert f"{COOKIE}=;" in out.headers["set-cookie"] or "Max-Age=0" in out.headers["set-cookie"]
        assert (await http.get("/admin/api/cards")).status_code == 401


async def test_a_callback_this_browser_did_not_start_is_refused_and_audited(signin_gateway: str, redis: Redis) -> None:
    async with httpx.AsyncClient(base_url=signin_gateway, timeout=10) as http:
        answer = await http.get("/admin/signin/callback", params={"code": "x", "state": "forged"})
    assert answer.status_code == 400 and "not started in this browser" in answer.text
    refusals = [e for e in await RedisStreamAuditSink(redis).recent(50) if e.action == "session.open"]
    assert refusals and refusals[0].outcome == "deny"


async def test_an_admin_key_still_opens_the_api_for_scripts(signin_gateway: str, redis: Redis) -> None:
    """REST and CLI callers keep their keys; the session is the console's way in, not the only one."""
    token, _ = await KeyStore(redis).create(
        kind=KeyKind.ADMIN, subject="ops@acme.example", org="acme", roles=["approver"]
    )
    async with httpx.AsyncClient(base_url=signin_gateway, headers={"authorization": f"Bearer {token}"}) as http:
        assert (await http.get("/admin/api/cards")).status_code == 200


async def test_with_a_key_alone_a_passkey_card_is_refused_through_rest_and_a_batch_and_no_passkey_registers(
    signin_gateway: str, redis: Redis, backends: dict[str, Backend]
) -> None:
    """Bob registered a passkey (from the console): his key can neither approve (single or batch) nor register one."""
    token, _ = await KeyStore(redis).create(
        kind=KeyKind.ADMIN, subject="bob@acme.example", org="acme", roles=["approver"]
    )
    passkey = StoredPasskey(credential_id="cred", public_key="pk", sign_count=0, name="laptop", created_ms=1)
    await PasskeyStore(redis).add("acme", "bob@acme.example", passkey)
    card_id = await _pending_card(redis)
    reviewed = {"version": 1, "args_hash": PROPOSAL.args_hash}
    rooms = backends["rooms"].app.state.service
    mark = rooms.received
    async with httpx.AsyncClient(base_url=signin_gateway, headers={"authorization": f"Bearer {token}"}) as http:
        single = await http.post(f"/admin/api/cards/{card_id}/approve", json=reviewed)
        batch = await http.post(
            "/admin/api/cards/decisions", json={"decisions": [{"card_id": card_id, "decision": "approve", **reviewed}]}
        )
        register = await http.post("/admin/api/passkeys/registration", json={})
    assert single.status_code == 403 and single.json()["error"]["code"] == "PASSKEY_REQUIRED"
    assert batch.status_code == 200 and [r["code"] for r in batch.json()["results"]] == ["PASSKEY_REQUIRED"]
    assert register.status_code == 403 and register.json()["error"]["code"] == "PERMISSION_DENIED"
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and (card.state, card.version) == (CardState.PENDING, 1)
    assert [r for r in rooms.since(mark) if r.headers.get("idempotency-key") == card.idempotency_key] == []


async def test_an_approvers_passkeys_are_listed_as_stored_field_for_field(signin_gateway: str, redis: Redis) -> None:
    """``GET /admin/api/passkeys`` shows each of the approver's own passkeys with what a backend verifies an
    assertion with (its public key and counter), and another approver's not at all."""
    token, _ = await KeyStore(redis).create(
        kind=KeyKind.ADMIN, subject="carol@acme.example", org="acme", roles=["approver"]
    )
    mine = StoredPasskey(credential_id="c1", public_key="pk1", sign_count=3, name="laptop", created_ms=7, aaguid="a")
    await PasskeyStore(redis).add("acme", "carol@acme.example", mine)
    theirs = StoredPasskey(credential_id="c2", public_key="pk2", sign_count=0, name="phone", created_ms=9)
    await PasskeyStore(redis).add("acme", "dave@acme.example", theirs)
    async with httpx.AsyncClient(base_url=signin_gateway, headers={"authorization": f"Bearer {token}"}) as http:
        listed = await http.get("/admin/api/passkeys")
    assert listed.status_code == 200
    shown = {"credential_id": "c1", "name": "laptop", "public_key": "pk1", "sign_count": 3, "created_ms": 7}
    assert listed.json() == {"passkeys": [shown | {"aaguid": "a"}]}


async def test_sign_ins_started_past_the_address_budget_are_refused_audited_and_keep_no_state(
    signin_gateway: str, redis: Redis
) -> None:
    """Anyone may start a sign-in, and each start keeps state in Redis: past the address's budget of
    unauthenticated requests (burst 60) a start is 429 with Retry-After, audited, and stores nothing."""
    async with httpx.AsyncClient(base_url=signin_gateway, timeout=10) as http:
        answers = [await http.get("/admin/signin") for _ in range(90)]
        kept = [key async for key in redis.scan_iter(match="countersign:signin:*")]
        with anyio.fail_after(15):  # the budget refills (10 per second): later sign-ins of this module start again
            while (await http.get("/admin/signin")).status_code != 302:
                await anyio.sleep(0.2)
    started = [answer for answer in answers if answer.status_code == 302]
    refused = [answer for answer in answers if answer.status_code == 429]
    assert refused and len(started) + len(refused) == len(answers)
    assert int(refused[0].headers["retry-after"]) >= 1 and "try again in" in refused[0].text
    assert len(kept) == len(started)  # a refused start made no state
    denials = [e for e in await RedisStreamAuditSink(redis).recent(200) if e.code == "RATE_LIMITED"]
    assert denials and all(e.action == "session.open" and e.outcome == "deny" for e in denials)
