"""What the admin view of a card says about how it was approved."""

from __future__ import annotations

import json

import pytest

from gateway.cards.card import CardState
from gateway.cards.views import AdminCard
from tests.support.cards import a_card


@pytest.mark.parametrize(
    ("approvers", "passkeys", "signed", "policy"),
    [
        (("bob@acme.example",), (), [], False),
        (("bob@acme.example",), (json.dumps({"approver": "bob@acme.example"}),), ["bob@acme.example"], False),
        (("policy:small-refunds",), (), [], True),
    ],
)
def test_the_card_says_who_signed_with_a_passkey_and_that_a_policy_needs_none(
    approvers: tuple[str, ...], passkeys: tuple[str, ...], signed: list[str], policy: bool
) -> None:
    card = a_card(state=CardState.APPROVED, approvers=approvers, passkeys=passkeys)
    approvals = AdminCard.from_card(card, ()).approvals
    assert approvals.passkey_signed == signed
    assert bool(approvals.policy_note) is policy
