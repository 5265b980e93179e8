"""Signed approval receipts end to end: a real gateway (JWKS, worker), real Redis, real demo backends that
verify the gateway's identity tokens and receipts with its published keys and share no key with it."""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from backends.orders import create_orders_app
from backends.rooms import create_rooms_app
from backends.serve import serve_app, serve_app_in_thread
from gateway.audit.events import ListAuditSink
from gateway.cards.card import Card, CardState
from gateway.cli.commands import rotate_signing_key
from gateway.runtime.app import Gateway, create_app
from gateway.signing.identity import IDENTITY_HEADER
from gateway.signing.receipts import RECEIPT_HEADER, RECEIPT_TYPE, receipt_claims, request_hash, verify_receipt
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.signing_keys import SigningKeyStore, public_jwk
from tests.support.agents import make_key
from tests.support.cards import approved_card
from tests.support.services import TEST_AUDIT_SECRET, Backend, gateway_settings
from tests.support.signing import ensure_signing_key

pytestmark = pytest.mark.anyio

FINAL = {CardState.SUCCEEDED, CardState.FAILED, CardState.NEEDS_RECONCILIATION}


@dataclass
class World:
    redis: Redis
    gateway: Gateway
    base: str
    backends: dict[str, Backend]

    async def jwks(self) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.base) as client:
            answer = await client.get("/.well-known/jwks.json")
        assert answer.status_code == 200
        return dict(answer.json())

    async def approved(self, tool: str, args: dict[str, Any]) -> Card:
        principal = await KeyStore(self.redis).resolve(await make_key(self.redis, roles=("staff", "support")))
        assert principal is not None
        return await approved_card(self.gateway, principal, tool, args, comment="fine")

    async def run(self, card_id: str) -> Card:
        """Run the approved card as the worker would, again while it is handed back unsent (a backend fetches
        a key it has not seen at most once a second), until it is not APPROVED (bounded)."""
        with anyio.fail_after(10):
            while True:
                card = await self.gateway.executor.writes.run_approved(card_id, worker="w1")
                if card is not None and card.state is not CardState.APPROVED:
                    return card
                await anyio.sleep(0.1)

    async def settled(self, card_id: str) -> Card:
        ledger = RedisLedger(self.redis)
        with anyio.fail_after(15):
            while True:
                card = await ledger.get(card_id)
                if card is not None and card.state in FINAL:
                    return card
                await anyio.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def world(
    redis_server_url: str, *, run_worker: bool = True, rooms_jwks: str | None = None, rooms_shared_key: str = ""
) -> AsyncIterator[World]:
    """Rooms and orders that know the gateway only by its JWKS URL, and a gateway that signs for them with its
    own keys (no shared key at all). `rooms_jwks` and `rooms_shared_key` give rooms another key set and an
    HS256 key shared with the gateway (the transition) instead."""
    url = urlunsplit(urlsplit(redis_server_url)._replace(path="/11"))
    redis = Redis.from_url(url)
    await redis.flushdb()
    await ensure_signing_key(redis)
    port = _free_port()
    jwks_url = f"http://127.0.0.1:{port}/.well-known/jwks.json"
    try:
        async with AsyncExitStack() as stack:
            backends = {}
            for name, factory in (("rooms", create_rooms_app), ("orders", create_orders_app)):
                token = secrets.token_urlsafe(16)
                shared = rooms_shared_key if name == "rooms" else ""
                keys = (rooms_jwks or jwks_url) if name == "rooms" else jwks_url
                app = factory(service_token=token, signing_key=shared, jwks_url=keys)
                backends[name] = Backend(url=stack.enter_context(serve_app_in_thread(app)), token=token, app=app,
                                         signing_key=shared)  # fmt: skip
            settings = replace(gateway_settings(url, backends), run_worker=run_worker)
            app = create_app(settings)
            # In this loop, so the test can drive the gateway's own parts (its worker's write path) too.
            base = await stack.enter_async_context(serve_app(app, port=port, lifespan=True))
            yield World(redis=redis, gateway=app.state.gateway, base=base, backends=backends)
    finally:
        await redis.flushdb()
        await redis.aclose()


def _writes(backend: Backend, path: str) -> list[Any]:
    return [r for r in backend.app.state.service.requests if r.method == "POST" and r.path == path]


BOOKING = {"room_id": "room-eos", "date": "2026-12-15", "start": "09:00", "end": "10:00", "title": "Planning"}


async def test_an_approved_write_carries_a_receipt_the_backend_verifies_and_succeeds(redis_server_url: str) -> None:
    """The backend got the write with a receipt for this card, key and body, verifiable with the JWKS; the
    identity it verified was signed with the same keys (no shared key), and the write succeeded."""
    async with world(redis_server_url) as w:
        card = await w.approved("rooms_book", BOOKING)
        done = await w.settled(card.card_id)
        assert done.state is CardState.SUCCEEDED, done.evidence
        [sent] = _writes(w.backends["rooms"], "/bookings")
        claims = verify_receipt(sent.headers[RECEIPT_HEADER], jwks=await w.jwks(), audience="rooms", method="POST",
                                path="/bookings", query={}, body=BOOKING,
                                idempotency_key=sent.headers["idempotency-key"])  # fmt: skip
        assert claims["card_id"] == card.card_id and claims["tool"] == "rooms_book"
        assert claims["args_hash"] == card.args_hash and claims["idempotency_key"] == card.idempotency_key
        assert claims["approvers"] == ["root@acme.example"] and claims["approved_at"] == card.approved_ms
        assert (claims["sub"], claims["org"], claims["aud"]) == ("alice@acme.example", "acme", "rooms")
        assert claims["exp"] - claims["iat"] <= 300
        assert sent.headers[IDENTITY_HEADER].count(".") == 2


async def test_writes_that_bypass_the_gateway_are_refused_and_nothing_is_booked(redis_server_url: str) -> None:
    """With a real identity token taken from a read, a write sent straight to the backend without a receipt is
    403 missing_receipt; with a real receipt for another body, or an expired one, 403 invalid_receipt."""
    async with world(redis_server_url) as w:
        card = await w.approved("rooms_book", BOOKING)
        assert (await w.settled(card.card_id)).state is CardState.SUCCEEDED
        rooms = w.backends["rooms"]
        [sent] = _writes(rooms, "/bookings")
        other = {**BOOKING, "date": "2026-12-16"}
        headers = {"authorization": f"Bearer {rooms.token}", IDENTITY_HEADER: sent.headers[IDENTITY_HEADER],
                   "idempotency-key": sent.headers["idempotency-key"]}  # fmt: skip
        expired = receipt_claims(card, adapter="rooms", request=request_hash("POST", "/bookings", {}, other),
                                 now=int(time.time()) - 3600)  # fmt: skip
        old = w.gateway.signer.sign(expired, typ=RECEIPT_TYPE)
        assert old is not None
        async with httpx.AsyncClient(base_url=rooms.url) as client:
            bare = await client.post("/bookings", json=other, headers=headers)
            copied = {**headers, RECEIPT_HEADER: sent.headers[RECEIPT_HEADER]}
            tampered = await client.post("/bookings", json=other, headers=copied)
            late = await client.post("/bookings", json=other, headers={**headers, RECEIPT_HEADER: old})
        assert (bare.status_code, bare.json()) == (403, {"error": "missing_receipt"})
        assert (tampered.status_code, tampered.json()) == (403, {"error": "invalid_receipt"})
        assert (late.status_code, late.json()) == (403, {"error": "invalid_receipt"})
        booked = [b for b in rooms.app.state.service.bookings.values() if b.date == "2026-12-16"]
        assert booked == []


async def test_a_refused_receipt_fails_the_card_with_a_stable_code_and_an_audit(redis_server_url: str) -> None:
    """A backend that trusts another key set (it still shares an HS256 key with the gateway for identities: the
    transition) refuses the gateway's receipt: the card is FAILED with RECEIPT_REFUSED, and that is audited."""
    foreign = public_jwk(Ed25519PrivateKey.generate(), "cs-someone-else")
    elsewhere = Starlette(routes=[Route("/jwks", lambda request: JSONResponse({"keys": [foreign]}))])
    with serve_app_in_thread(elsewhere) as other:
        shared = secrets.token_urlsafe(32)
        async with world(redis_server_url, run_worker=False, rooms_jwks=f"{other}/jwks", rooms_shared_key=shared) as w:
            card = await w.approved("rooms_book", BOOKING)
            done = await w.gateway.executor.writes.run_approved(card.card_id, worker="w1")
            assert done is not None and done.state is CardState.FAILED, done
            assert done.evidence["code"] == "RECEIPT_REFUSED" and done.evidence["status"] == 403
            events = await w.gateway.audit.recent(50)
            assert any(e.action == "card.execute" and e.code == "RECEIPT_REFUSED" for e in events)
            assert [b for b in w.backends["rooms"].app.state.service.bookings.values() if b.date == "2026-12-15"] == []


async def test_keys_rotated_while_cards_are_in_flight(redis_server_url: str) -> None:
    """Cards approved before a rotation run after it, signed with the new key; the old key stays in the JWKS
    through the overlap, so a receipt signed with it before the rotation still verifies."""
    async with world(redis_server_url, run_worker=False) as w:
        first = await w.approved("rooms_book", BOOKING)
        second = await w.approved("rooms_book", {**BOOKING, "start": "11:00", "end": "12:00"})
        old_kid = (await w.jwks())["keys"][0]["kid"]
        assert (await w.gateway.executor.writes.run_approved(first.card_id, worker="w1")).state is CardState.SUCCEEDED  # type: ignore[union-attr]
        [before] = _writes(w.backends["rooms"], "/bookings")

        store = SigningKeyStore(w.redis, secret=TEST_AUDIT_SECRET.encode())
        assert await rotate_signing_key(store, ListAuditSink()) == 0
        await w.gateway.signer.refresh(force=True)  # what every process does within CACHE_SECONDS
        jwks = await w.jwks()
        kids = [key["kid"] for key in jwks["keys"]]
        assert len(kids) == 2 and kids[1] == old_kid and kids[0] != old_kid
        assert all(set(key) == {"kty", "crv", "x", "kid", "alg", "use"} for key in jwks["keys"])

        done = await w.run(second.card_id)
        assert done.state is CardState.SUCCEEDED, done.evidence
        after = _writes(w.backends["rooms"], "/bookings")[-1]
        assert jwt.get_unverified_header(after.headers[RECEIPT_HEADER])["kid"] == kids[0]
        assert jwt.get_unverified_header(before.headers[RECEIPT_HEADER])["kid"] == old_kid
        claims = verify_receipt(before.headers[RECEIPT_HEADER], jwks=jwks, audience="rooms", method="POST",
                                path="/bookings", query={}, body=BOOKING,
                                idempotency_key=first.idempotency_key)  # fmt: skip
        assert claims["card_id"] == first.card_id


async def test_production_without_a_signing_key_sends_nothing_until_one_is_made(redis_server_url: str) -> None:
    """No key (production makes none by itself): the approved card stays APPROVED, unsent and unclaimed (no card
    event per retry), and says why in the audit, once for all its retries; once an operator rotates the first key
    in, the same card runs. (Rooms shares an HS256 key for identities here, so its reads work without the key set
    and only the receipt is missing.)"""
    async with world(redis_server_url, run_worker=False, rooms_shared_key=secrets.token_urlsafe(32)) as w:
        card = await w.approved("rooms_book", BOOKING)
        await w.redis.delete("countersign:{signing}:keys")
        await w.gateway.signer.refresh(force=True)
        for _ in range(3):  # the sweeper offers it again and again while no key exists
            held = await w.gateway.executor.writes.run_approved(card.card_id, worker="w1")
            assert held is not None and held.state is CardState.APPROVED
        # Deferred before any claim: the card is as it was (no claim and release, no new card events).
        assert held.version == card.version
        assert (await w.gateway.ledger.get(card.card_id)).version == card.version  # type: ignore[union-attr]
        assert _writes(w.backends["rooms"], "/bookings") == []
        executes = [e for e in await w.gateway.audit.recent(50) if e.action == "card.execute"]
        # Audited once, not once per offer (gateway/executor/deferrals.py): the trail says why it waits.
        assert [e.outcome for e in executes] == ["DEFERRED"] and "no signing key" in executes[0].reason
        await ensure_signing_key(w.redis)
        assert (await w.run(card.card_id)).state is CardState.SUCCEEDED
