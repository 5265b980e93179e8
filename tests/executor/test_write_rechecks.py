"""What the write path re-checks when it runs an approved card, each check on its own.

Through a real worker run against a real rooms backend: a card is proposed by the executor,
approved in the ledger, then one thing that was true at approval stops being true before the
worker runs it. Each test proves its check: the card ends FAILED with that check's code, and the
backend received nothing. The backend is this module's own, so "nothing" is counted exactly.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from redis.asyncio import Redis

from backends._common import CONTROL_PATHS
from backends.rooms import create_rooms_app
from backends.serve import serve_app_in_thread
from gateway.cards.card import Card, CardState
from gateway.principal import TOKEN_KEY_PREFIX, KeyKind, Principal
from gateway.runtime.app import Gateway
from gateway.runtime.worker import Worker
from gateway.store.keys import hash_token
from gateway.store.ledger.codec import decode_card
from gateway.store.ledger.redis_ledger import card_shard
from tests.support.cards import approved_card
from tests.support.services import Backend, gateway_settings, in_process_gateway

pytestmark = pytest.mark.anyio

ROOM = "room-cirrus"


@pytest.fixture(scope="module", name="redis_url")
def quiet_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest): the worker here runs only when a test says so."""
    return quiet_redis_url


@pytest.fixture(scope="module")
def rooms() -> Iterator[Backend]:
    """A rooms backend for this module alone."""
    token, key = secrets.token_urlsafe(16), secrets.token_urlsafe(32)
    app = create_rooms_app(service_token=token, signing_key=key)
    with serve_app_in_thread(app) as url:
        yield Backend(url=url, token=token, app=app, signing_key=key)


@pytest.fixture
async def gateway(redis: Redis, redis_url: str, rooms: Backend) -> AsyncIterator[Gateway]:
    async with in_process_gateway(gateway_settings(redis_url, {"rooms": rooms})) as wired:
        yield wired


async def _approved(gateway: Gateway, token: str, day: str) -> Card:
    """A rooms_book card for `day` proposed with `token` through the executor, then approved by someone else."""
    principal = await gateway.keys.resolve(token)
    assert principal is not None
    booking = {"room_id": ROOM, "date": day, "start": "09:00", "end": "10:00", "title": "Sync"}
    return await approved_card(gateway, principal, "rooms_book", booking)


def _calls(rooms: Backend) -> list[tuple[str, str]]:
    """Every request the backend received for a caller (health checks and control routes aside)."""
    return [(r.method, r.path) for r in rooms.app.state.service.requests if r.path not in CONTROL_PATHS]


async def _run_worker(gateway: Gateway, card_id: str) -> Card:
    """Run a real worker until the card is final (bounded)."""
    worker = Worker(gateway.executor.writes, gateway.ledger, block_ms=50)
    with anyio.fail_after(10):
        while True:
            await worker.consume_once()
            card = await gateway.ledger.get(card_id)
            if card is not None and card.state not in (CardState.APPROVED, CardState.EXECUTING):
                return card


async def _assert_refused_unsent(gateway: Gateway, rooms: Backend, card: Card, code: str) -> None:
    before = _calls(rooms)
    done = await _run_worker(gateway, card.card_id)
    assert done.state is CardState.FAILED
    assert (done.evidence["code"], done.evidence["sent"]) == (code, False)
    assert _calls(rooms) == before, "the backend received a request"
    assert "dispatched" not in [event.type for event in await gateway.ledger.events(card.card_id)]
    day = card.arguments["date"]
    assert not [b for b in rooms.app.state.service.bookings.values() if (b.room_id, b.date) == (ROOM, day)]


async def test_a_card_whose_requester_key_was_revoked_after_approval_fails_unsent(
    gateway: Gateway, redis: Redis, rooms: Backend
) -> None:
    """Revoking the requester's key between approval and execution stops the write: REQUESTER_REVOKED."""
    token, record = await gateway.keys.create(kind=KeyKind.AGENT, subject="alice@acme.example", org="acme",
                                              roles=("staff",))  # fmt: skip
    card = await _approved(gateway, token, "2027-03-01")
    await gateway.keys.revoke(record.key_id)
    await _assert_refused_unsent(gateway, rooms, card, "REQUESTER_REVOKED")


def _token_principal(subject: str, *, actors: tuple[str, ...] = ()) -> Principal:
    """Whom a verified OAuth token stands for (`gateway.auth.tokens.principal_from_claims`): a ``tok_`` key id
    that is stored nowhere, so nothing but the subject can be revoked."""
    key_id, acting = f"{TOKEN_KEY_PREFIX}sso_{subject[:4]}", actors[0] if actors else ""
    return Principal(
        subject=subject, org="acme", roles=frozenset({"staff"}), key_id=key_id, actors=actors, acting_client=acting
    )


@pytest.mark.parametrize(
    ("revoked", "actors", "day"),
    [
        ("dana@acme.example", (), "2027-03-05"),
        ("d\u0430na@ACME.example", (), "2027-03-06"),  # a look-alike spelling revokes the same person
        ("planner@acme.example", ("planner@acme.example",), "2027-03-07"),  # the agent acting for dana
    ],
    ids=["the-person", "a-look-alike-spelling", "an-actor"],
)
async def test_a_card_proposed_with_a_token_whose_subject_was_revoked_after_approval_fails_unsent(
    gateway: Gateway, redis: Redis, rooms: Backend, revoked: str, actors: tuple[str, ...], day: str
) -> None:
    """A token is stored nowhere to be read again, but the person it is about (or an agent acting for them) can be
    revoked as a whole: the approved card does not run, ends FAILED with REQUESTER_REVOKED, and that is audited."""
    booking = {"room_id": ROOM, "date": day, "start": "09:00", "end": "10:00", "title": "Sync"}
    card = await approved_card(gateway, _token_principal("dana@acme.example", actors=actors), "rooms_book", booking)
    await gateway.keys.revoke_subject("acme", revoked, by="operator")
    await _assert_refused_unsent(gateway, rooms, card, "REQUESTER_REVOKED")
    executed = [e for e in await gateway.audit.recent(50) if e.action == "card.execute"]
    assert executed[-1].outcome == "FAILED" and executed[-1].code == "REQUESTER_REVOKED"


async def test_a_card_whose_requester_lost_the_role_after_approval_fails_unsent(
    gateway: Gateway, redis: Redis, rooms: Backend
) -> None:
    """The key still works but no longer holds the tool's role (edited in the key store): PERMISSION_DENIED."""
    token, _record = await gateway.keys.create(kind=KeyKind.AGENT, subject="alice@acme.example", org="acme",
                                               roles=("staff", "support"))  # fmt: skip
    card = await _approved(gateway, token, "2027-03-02")
    # The key store's layout (gateway/store/keys.py): the key's record is a hash holding its roles.
    await redis.hset(f"countersign:key:{{{hash_token(token)}}}", "roles", "support")
    live = await gateway.keys.resolve(token)
    assert live is not None and live.roles == frozenset({"support"})
    await _assert_refused_unsent(gateway, rooms, card, "PERMISSION_DENIED")


async def test_a_card_whose_stored_arguments_were_altered_after_approval_fails_unsent(
    gateway: Gateway, redis: Redis, rooms: Backend
) -> None:
    """Arguments changed in the stored card no longer hash to the approved args_hash: CONFLICT."""
    token, _record = await gateway.keys.create(kind=KeyKind.AGENT, subject="alice@acme.example", org="acme",
                                               roles=("staff",))  # fmt: skip
    card = await _approved(gateway, token, "2027-03-03")
    # The ledger's layout (gateway/store/ledger/codec.py): one JSON string per card, arguments as canonical
    # JSON; written back in the long form, which the ledger reads as well.
    key = f"cs:{{cs{card_shard(card.card_id)}}}:card:{card.card_id}"
    stored = decode_card(await redis.get(key), card.card_id)
    stored["arguments"] = json.dumps({**json.loads(stored["arguments"]), "start": "11:00", "end": "12:00"})
    await redis.set(key, json.dumps(stored))
    altered = await gateway.ledger.get(card.card_id)
    assert altered is not None and altered.arguments["start"] == "11:00" and altered.args_hash == card.args_hash
    await _assert_refused_unsent(gateway, rooms, card, "CONFLICT")
