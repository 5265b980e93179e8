"""Subjects are identities: any spelling of one is one subject, through keys, the policy and the ledger."""

from __future__ import annotations

from dataclasses import replace

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from gateway.approvals.service import CardService, ResultCode
from gateway.cards.card import CardState
from gateway.cards.contract import TransitionStatus
from gateway.principal import KeyKind, normalize_subject
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.cards import PROPOSAL
from tests.support.examples import examples
from tests.support.guards import always_writable
from tests.support.services import TEST_AUDIT_SECRET
from tests.support.spellings import spellings

AUDIT_SECRET = TEST_AUDIT_SECRET.encode()

ALICE = "alice@acme.example"


@given(subject=st.text())
def test_normalizing_a_subject_twice_changes_nothing(subject: str) -> None:
    """There is one normal form: normalizing it again is the identity."""
    once = normalize_subject(subject)
    assert normalize_subject(once) == once


@given(spelling=spellings(ALICE))
def test_every_spelling_of_an_email_subject_normalizes_to_one(spelling: str) -> None:
    """Case, fullwidth and other compatibility forms, and surrounding whitespace do not make another subject."""
    assert normalize_subject(spelling) == ALICE


@given(spelling=spellings("Svc-Expenses"))
def test_a_subject_that_is_not_an_email_keeps_its_case(spelling: str) -> None:
    """Only email-like subjects are compared without case; compatibility forms and whitespace still fold."""
    assert normalize_subject(spelling).casefold() == "svc-expenses"


async def _approve_own_card(redis_url: str, requester_spelling: str, admin_spelling: str) -> None:
    client = Redis.from_url(redis_url)
    try:
        await client.flushdb()
        keys, ledger = KeyStore(client), RedisLedger(client)
        agent_token, _ = await keys.create(kind=KeyKind.AGENT, subject=requester_spelling, org="acme", roles=["staff"])
        admin_token, _ = await keys.create(kind=KeyKind.ADMIN, subject=admin_spelling, org="acme", roles=["approver"])
        requester, admin = await keys.resolve(agent_token), await keys.resolve(admin_token)
        assert requester is not None and admin is not None
        proposal = replace(PROPOSAL, requester_subject=requester.subject, requester_key_id=requester.key_id)
        created = await ledger.propose(proposal)
        assert created.card is not None
        card = created.card

        audit = RedisStreamAuditSink(client, secret=AUDIT_SECRET)
        service = CardService(ledger, audit, writable=always_writable, changes=ledger.changes)
        result = await service.approve(admin, card.card_id, version=card.version, args_hash=card.args_hash)
        assert result.code is ResultCode.PERMISSION_DENIED, result
        # The ledger compares plain strings; keys store one spelling, so it refuses too.
        direct = await ledger.approve(
            card.card_id, approver=admin.subject, version=card.version, args_hash=card.args_hash, comment=""
        )
        assert direct.status is TransitionStatus.ERR_SELF_APPROVAL
        after = await ledger.get(card.card_id)
        assert after is not None and after.state is CardState.PENDING and after.approvers == ()
    finally:
        await client.aclose()


@settings(max_examples=examples(40), deadline=None)
@given(requester_spelling=spellings(ALICE), admin_spelling=spellings(ALICE))
def test_an_admin_key_for_another_spelling_of_the_requester_cannot_approve_the_card(
    quiet_redis_url: str, requester_spelling: str, admin_spelling: str
) -> None:
    """Through real keys, the card service and the ledger, any spelling of the requester is refused as self-approval."""
    anyio.run(_approve_own_card, quiet_redis_url, requester_spelling, admin_spelling)
