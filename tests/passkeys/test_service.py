"""Passkeys against a real Redis: registration, approvals signed over the card, the counter, and the receipt."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from redis.asyncio import Redis
from webauthn.helpers.exceptions import InvalidAuthenticationResponse

from gateway.approvals.batch import BatchItem, decide_batch
from gateway.approvals.service import CardService
from gateway.audit.events import AuditEvent
from gateway.cards.card import CardState
from gateway.cards.views import ResultCode
from gateway.config.approvals import PasskeyRequirement
from gateway.passkeys.assertion import approval_challenge, public_key_bytes, verify_approval_assertion
from gateway.passkeys.service import PasskeyService, Relying
from gateway.principal import SESSION_KEY_PREFIX, KeyKind, Principal
from gateway.signing.receipts import receipt_claims
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.passkeys import PasskeyStore
from tests.support.authenticator import SoftAuthenticator, challenge_of
from tests.support.cards import PROPOSAL
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

RELYING = Relying(rp_id="127.0.0.1", origin="http://127.0.0.1:8765")
SIGNED_IN = Principal(
    subject="bob@acme.example",
    org="acme",
    roles=frozenset({"approver"}),
    kind=KeyKind.ADMIN,
    key_id="ses_0123456789abcdef",
)
KEYED = replace(SIGNED_IN, key_id="key_bob")
"""Bob through his admin API key: the same person, no sign-in."""


@pytest.fixture(scope="module", name="redis_url")
def cards_database(quiet_redis_url: str) -> str:
    """A database no worker drains (see conftest)."""
    return quiet_redis_url


def passkeys(redis: Redis, *, keys_may_register: bool = False) -> PasskeyService:
    audit = RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode())
    return PasskeyService(
        PasskeyStore(redis), audit, relying=RELYING, keys_may_register=keys_may_register, now_ms=lambda: 1_000
    )


def cards(redis: Redis, keys: PasskeyService, rule: PasskeyRequirement | None = None) -> CardService:
    async def writable() -> bool:
        return True

    ledger = RedisLedger(redis)
    audit = RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode())
    return CardService(ledger, audit, writable=writable, changes=ledger.changes, passkeys=keys, require_passkey=rule)


async def registered(service: PasskeyService, who: Principal = SIGNED_IN) -> SoftAuthenticator:
    authenticator = SoftAuthenticator(rp_id=RELYING.rp_id, origin=RELYING.origin)
    started = await service.registration_options(who)
    assert started.ok and started.options is not None, started.message
    done = await service.register(who, authenticator.create(dict(started.options)), name="laptop")
    assert done.ok, done.message
    return authenticator


async def propose(redis: Redis, **changes: Any) -> tuple[str, int, str]:
    created = await RedisLedger(redis).propose(replace(PROPOSAL, dedupe_key=str(changes), **changes))
    assert created.card is not None
    return created.card.card_id, created.card.version, created.card.args_hash


def signed(authenticator: SoftAuthenticator, card_id: str, version: int, args_hash: str, **kw: Any) -> dict[str, Any]:
    challenge = approval_challenge(card_id=card_id, version=version, args_hash=args_hash, decision="approve")
    return authenticator.get(challenge_of(challenge), **kw)


async def audited(redis: Redis, prefix: str) -> list[AuditEvent]:
    return [e for e in await RedisStreamAuditSink(redis).recent(200) if e.action.startswith(prefix)]


async def test_a_signed_in_approver_registers_a_passkey_and_it_is_listed_and_audited(redis: Redis) -> None:
    """Registration verifies the authenticator's answer to the pending challenge and keeps its public key."""
    service = passkeys(redis)
    authenticator = await registered(service)
    [kept] = await service.list(SIGNED_IN)
    assert kept.credential_id == authenticator.id and kept.name == "laptop"
    assert [e.outcome for e in await audited(redis, "passkey.register")] == ["ok"]


async def test_an_api_key_cannot_register_a_passkey_outside_demo_mode(redis: Redis) -> None:
    """Whoever found an approver's key must not be able to add their own authenticator: refused, audited."""
    refused = await passkeys(redis).registration_options(KEYED)
    assert refused.code is ResultCode.PERMISSION_DENIED
    assert await passkeys(redis).list(KEYED) == []
    [event] = await audited(redis, "passkey.register")
    assert event.code == "PERMISSION_DENIED"
    assert (await passkeys(redis, keys_may_register=True).registration_options(KEYED)).ok


async def test_a_registration_answer_counts_once(redis: Redis) -> None:
    """The challenge is taken by the first answer: the same answer again finds none."""
    service = passkeys(redis)
    authenticator = SoftAuthenticator(rp_id=RELYING.rp_id, origin=RELYING.origin)
    options = await service.registration_options(SIGNED_IN)
    answer = authenticator.create(dict(options.options or {}))
    assert (await service.register(SIGNED_IN, answer, name="one")).ok
    assert (await service.register(SIGNED_IN, answer, name="two")).code is ResultCode.CONFLICT


async def test_an_answer_without_user_verification_is_refused(redis: Redis) -> None:
    service = passkeys(redis)
    authenticator = SoftAuthenticator(rp_id=RELYING.rp_id, origin=RELYING.origin, user_verified=False)
    options = await service.registration_options(SIGNED_IN)
    done = await service.register(SIGNED_IN, authenticator.create(dict(options.options or {})), name="no-uv")
    assert done.code is ResultCode.PASSKEY_INVALID
    assert await service.list(SIGNED_IN) == []


async def test_a_card_that_needs_a_passkey_is_not_approved_with_a_key_alone(redis: Redis) -> None:
    """PASSKEY_REQUIRED through the service (REST, CLI) and a batch; the card stays PENDING, audited."""
    service = cards(redis, passkeys(redis), PasskeyRequirement(tools=["rooms_*"]))
    card_id, version, args_hash = await propose(redis)
    single = await service.approve(KEYED, card_id, version=version, args_hash=args_hash)
    assert single.code is ResultCode.PASSKEY_REQUIRED
    assert "register a passkey" in single.message
    audit = RedisStreamAuditSink(redis, secret=TEST_AUDIT_SECRET.encode())
    item = BatchItem(card_id=card_id, decision="approve", version=version, args_hash=args_hash)
    batch = await decide_batch(service, audit, KEYED, [item])
    assert [r.code for r in batch.results] == [ResultCode.PASSKEY_REQUIRED]
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING and card.version == version
    assert [e.code for e in await audited(redis, "card.approve")] == ["PASSKEY_REQUIRED", "PASSKEY_REQUIRED"]


async def test_once_registered_an_approvers_key_no_longer_approves_for_them(redis: Redis) -> None:
    """The production default: a card no rule names needs Bob's passkey once Bob registered one."""
    keys = passkeys(redis)
    service = cards(redis, keys)
    card_id, version, args_hash = await propose(redis)
    assert (await service.approve(KEYED, card_id, version=version, args_hash=args_hash)).ok
    await registered(keys)
    other, version, args_hash = await propose(redis, args_hash="h2")
    refused = await service.approve(KEYED, other, version=version, args_hash=args_hash)
    assert refused.code is ResultCode.PASSKEY_REQUIRED and "with your passkey" in refused.message


async def test_a_signed_approval_is_recorded_on_the_card_and_carried_by_the_receipt(redis: Redis) -> None:
    """The assertion verifies, the approval transition keeps it, and a backend can verify it again with the
    registered public key and the card's args_hash (and not with another args_hash)."""
    keys = passkeys(redis)
    authenticator = await registered(keys)
    service = cards(redis, keys, PasskeyRequirement(tools=["*"]))
    card_id, version, args_hash = await propose(redis)
    done = await service.approve(
        SIGNED_IN,
        card_id,
        version=version,
        args_hash=args_hash,
        passkey=signed(authenticator, card_id, version, args_hash),
    )
    assert done.ok, done.message
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.APPROVED and len(card.passkeys) == 1
    events = await RedisLedger(redis).events(card_id)
    assert events[-1].type == "approved" and events[-1].data["passkey"] == authenticator.id
    claims = receipt_claims(card, adapter="rooms", request="r" * 64, now=1)
    [assertion] = claims["passkeys"]
    [kept] = await keys.list(SIGNED_IN)
    assert public_key_bytes(assertion) == public_key_bytes({"public_key": kept.public_key})
    verify_approval_assertion(
        assertion,
        public_key=public_key_bytes({"public_key": kept.public_key}),
        card_id=card_id,
        args_hash=card.args_hash,
        rp_id=RELYING.rp_id,
        origin=RELYING.origin,
    )
    with pytest.raises(InvalidAuthenticationResponse):
        verify_approval_assertion(
            assertion,
            public_key=public_key_bytes({"public_key": kept.public_key}),
            card_id=card_id,
            args_hash="another",
            rp_id=RELYING.rp_id,
            origin=RELYING.origin,
        )


@pytest.mark.parametrize("bound_to", ["another card", "another version", "another args_hash"])
async def test_an_assertion_for_another_card_or_version_is_refused(redis: Redis, bound_to: str) -> None:
    keys = passkeys(redis)
    authenticator = await registered(keys)
    service = cards(redis, keys, PasskeyRequirement(tools=["*"]))
    card_id, version, args_hash = await propose(redis)
    other, _, _ = await propose(redis, args_hash="h3")
    target = {
        "another card": (other, version, args_hash),
        "another version": (card_id, version + 1, args_hash),
        "another args_hash": (card_id, version, "h3"),
    }[bound_to]
    refused = await service.approve(
        SIGNED_IN, card_id, version=version, args_hash=args_hash, passkey=signed(authenticator, *target)
    )
    assert refused.code is ResultCode.PASSKEY_INVALID
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING and card.passkeys == ()


async def test_an_assertion_whose_counter_did_not_move_forward_is_refused(redis: Redis) -> None:
    """An assertion made earlier, submitted after a later one: its counter is behind, so it is a replay."""
    keys = passkeys(redis)
    authenticator = await registered(keys)
    service = cards(redis, keys, PasskeyRequirement(tools=["*"]))
    first, version, args_hash = await propose(redis)
    second, version2, args_hash2 = await propose(redis, args_hash="h4")
    early = signed(authenticator, first, version, args_hash)
    late = signed(authenticator, second, version2, args_hash2)
    assert (await service.approve(SIGNED_IN, second, version=version2, args_hash=args_hash2, passkey=late)).ok
    refused = await service.approve(SIGNED_IN, first, version=version, args_hash=args_hash, passkey=early)
    assert refused.code is ResultCode.PASSKEY_INVALID
    card = await RedisLedger(redis).get(first)
    assert card is not None and card.state is CardState.PENDING


async def test_a_passkey_of_another_approver_is_refused(redis: Redis) -> None:
    keys = passkeys(redis)
    authenticator = await registered(keys)
    carol = replace(SIGNED_IN, subject="carol@acme.example")
    service = cards(redis, keys, PasskeyRequirement(tools=["*"]))
    card_id, version, args_hash = await propose(redis)
    refused = await service.approve(
        carol, card_id, version=version, args_hash=args_hash, passkey=signed(authenticator, card_id, version, args_hash)
    )
    assert refused.code is ResultCode.PASSKEY_INVALID and "not one of yours" in refused.message


async def test_removing_and_resetting_passkeys_is_audited(redis: Redis) -> None:
    keys = passkeys(redis)
    first = await registered(keys)
    await registered(keys)
    assert (await keys.remove(SIGNED_IN, first.id)).ok
    assert (await keys.remove(SIGNED_IN, first.id)).code is ResultCode.NOT_FOUND
    operator = Principal(subject="operator:root", org="", roles=frozenset(), kind=KeyKind.ADMIN)
    assert await keys.reset(operator, org="acme", subject=SIGNED_IN.subject) == 1
    assert await keys.list(SIGNED_IN) == []
    actions = [(e.action, e.outcome) for e in await audited(redis, "passkey.")]
    assert ("passkey.remove", "ok") in actions and ("passkey.remove", "deny") in actions
    assert ("passkey.reset", "ok") in actions


async def test_the_challenge_options_name_the_cards_challenge_and_tell_an_approver_without_one_how_to_register(
    redis: Redis,
) -> None:
    keys = passkeys(redis)
    none = await keys.assertion_options(SIGNED_IN, card_id="c", version=1, args_hash="h", decision="approve")
    assert none.code is ResultCode.PASSKEY_REQUIRED and "Add a passkey" in none.message
    await registered(keys)
    options = await keys.assertion_options(SIGNED_IN, card_id="c", version=1, args_hash="h", decision="approve")
    assert options.options is not None
    expected = approval_challenge(card_id="c", version=1, args_hash="h", decision="approve")
    assert options.options["challenge"] == challenge_of(expected)
    assert options.options["userVerification"] == "required"
    assert SESSION_KEY_PREFIX == "ses_"
