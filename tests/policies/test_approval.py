"""The approval policy: how many distinct approvers a proposal needs, and who may decide a card."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given

from gateway.cards.card import Card, CardState
from gateway.codes import Code
from gateway.principal import KeyKind, Principal
from gateway.tools.declarations import Approval, Escalation
from policies.approval import approvals_required, may_decide
from tests.support.spellings import spellings

REFUNDS = Approval(required=1, escalations=(Escalation(field="amount_cents", above=50_000, required=2),))
TIERED = Approval(
    required=1,
    escalations=(
        Escalation(field="amount_cents", above=50_000, required=2),
        Escalation(field="amount_cents", above=500_000, required=3),
        Escalation(field="nights", above=14, required=2),
    ),
)

CARD = Card(
    card_id="card_1",
    tool="orders_refund_create",
    tool_version="v1",
    arguments={"order_id": "ord_1", "amount_cents": 1_000},
    args_hash="h1",
    requester_subject="alice@acme.example",
    requester_org="acme",
    requester_key_id="key_alice",
    state=CardState.PENDING,
    version=1,
    idempotency_key="idem_1",
    transaction_id="tx_1",
    approvals_required=1,
    approvers=(),
    summary="Refund 10.00 on ord_1",
    agent_text={},
    created_ms=1_000,
    decide_by_ms=61_000,
    approver_role="refunds",
)


def _admin(
    subject: str = "bob@acme.example",
    org: str = "acme",
    roles: frozenset[str] = frozenset({"refunds"}),
    kind: KeyKind = KeyKind.ADMIN,
) -> Principal:
    return Principal(subject=subject, org=org, roles=roles, kind=kind, key_id="key_admin")


# -- approvals_required --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "required"),
    [
        ({}, 1),
        ({"amount_cents": 1_000}, 1),
        ({"amount_cents": 50_000}, 1),
        ({"amount_cents": 50_001}, 2),
        ({"amount_cents": 50_000.5}, 2),
        ({"amount_cents": -(10**9)}, 1),
        ({"amount_cents": 10**12}, 2),
        ({"amount_cents": None}, 1),
        ({"amount_cents": "60000"}, 1),
        ({"amount_cents": [60_000]}, 1),
        ({"amount": 60_000}, 1),
    ],
)
def test_escalation_applies_only_to_a_number_above_its_threshold(arguments: dict[str, Any], required: int) -> None:
    """Strictly above the threshold a second approver is needed; at it, below it, or with the field
    missing or not a number, the base requirement stands."""
    assert approvals_required(REFUNDS, arguments) == required


@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_is_not_a_number(flag: bool) -> None:
    """`True` is an int to Python but not an amount: it never triggers an escalation with threshold 0."""
    approval = Approval(escalations=(Escalation(field="amount_cents", above=0, required=2),))
    assert approvals_required(approval, {"amount_cents": flag}) == 1
    assert approvals_required(approval, {"amount_cents": 1}) == 2


@pytest.mark.parametrize(
    ("arguments", "required"),
    [
        ({"amount_cents": 10}, 1),
        ({"amount_cents": 60_000}, 2),
        ({"amount_cents": 600_000}, 3),
        ({"nights": 15}, 2),
        ({"amount_cents": 600_000, "nights": 15}, 3),
        ({"amount_cents": 60_000, "nights": 15}, 2),
    ],
)
def test_the_strictest_applicable_escalation_wins(arguments: dict[str, Any], required: int) -> None:
    """Escalations do not add up: the requirement is the highest of the base and every one that applies."""
    assert approvals_required(TIERED, arguments) == required


@pytest.mark.parametrize(
    ("arguments", "required"),
    [({}, 3), ({"amount_cents": 10}, 3), ({"amount_cents": 60_000}, 3), ({"amount_cents": "x"}, 3)],
)
def test_nothing_lowers_the_base_requirement(arguments: dict[str, Any], required: int) -> None:
    """An escalation asking for fewer approvers than the base, a missing field or a non-number
    never takes the requirement below the tool's own `required`."""
    approval = Approval(required=3, escalations=(Escalation(field="amount_cents", above=50_000, required=2),))
    assert approvals_required(approval, arguments) == required


# -- may_decide ------------------------------------------------------------------------------------


def test_admin_of_the_org_with_the_approver_role_may_decide() -> None:
    """Another admin of the requester's org who holds the card's approver role may decide it."""
    decision = may_decide(CARD, _admin(roles=frozenset({"refunds", "staff"})))
    assert decision.allowed is True
    assert decision.code is None


@pytest.mark.parametrize(
    "admin",
    [
        _admin(org="globex"),
        _admin(org="globex", subject="alice@acme.example"),
        _admin(org="globex", roles=frozenset()),
        _admin(org="ACME"),
    ],
    ids=["other-org", "other-org-same-subject", "other-org-no-role", "org-differs-by-case"],
)
def test_another_orgs_card_is_not_found_whatever_else_is_true(admin: Principal) -> None:
    """An admin of another org learns nothing, not even that the card exists: the org check comes
    before the requester and role checks, so no PERMISSION_DENIED can reveal the card."""
    decision = may_decide(CARD, admin)
    assert decision.allowed is False
    assert decision.code is Code.NOT_FOUND


def test_another_orgs_verdict_says_nothing_about_the_card() -> None:
    """The refusal is the same value for any card of another org, so neither its code nor its reason
    can tell a foreign card from another (the card service answers it exactly as a missing card)."""
    other = dataclasses.replace(
        CARD, card_id="card_2", requester_subject="carol@acme.example", approver_role="approver", tool="rooms_book"
    )
    outsider = _admin(org="globex", roles=frozenset({"refunds", "approver"}))
    assert may_decide(CARD, outsider) == may_decide(other, outsider)


@pytest.mark.parametrize(
    "roles", [frozenset({"refunds"}), frozenset({"refunds", "approver"})], ids=["with-role", "with-more-roles"]
)
def test_the_requester_never_decides_its_own_card(roles: frozenset[str]) -> None:
    """Self-approval is refused by subject, even through an admin key with every role the card needs."""
    decision = may_decide(CARD, _admin(subject="alice@acme.example", roles=roles))
    assert decision.allowed is False
    assert decision.code is Code.PERMISSION_DENIED


@pytest.mark.parametrize(
    "roles",
    [frozenset(), frozenset({"approver"}), frozenset({"staff", "refund"}), frozenset({"REFUNDS"})],
    ids=["none", "default-role", "near-miss", "case"],
)
def test_deciding_needs_the_cards_approver_role(roles: frozenset[str]) -> None:
    """An admin of the right org without the card's own approver role is PERMISSION_DENIED (it may see
    the card, so NOT_FOUND would be a lie), and the reason names the missing role for the audit trail."""
    decision = may_decide(CARD, _admin(roles=roles))
    assert decision.allowed is False
    assert decision.code is Code.PERMISSION_DENIED
    assert "refunds" in decision.reason


@pytest.mark.parametrize("kind", [KeyKind.AGENT, KeyKind.SERVICE])
def test_non_admin_keys_cannot_decide(kind: KeyKind) -> None:
    """Only admin keys decide cards: an agent or service key of the same org, with the role, is refused
    as if the card did not exist, so it cannot probe for cards it may not touch."""
    decision = may_decide(CARD, _admin(kind=kind))
    assert decision.allowed is False
    assert decision.code is Code.NOT_FOUND


@given(spelling=spellings("alice@acme.example"))
def test_the_requester_under_any_spelling_of_its_subject_may_not_decide(spelling: str) -> None:
    """Case, compatibility forms and whitespace do not make another person, even on a card stored unnormalized."""
    card = dataclasses.replace(CARD, requester_subject=" ALICE@acme.EXAMPLE ")
    decision = may_decide(card, _admin(subject=spelling))
    assert (decision.allowed, decision.code) == (False, Code.PERMISSION_DENIED)


@pytest.mark.parametrize(
    "look_alike",
    [
        "\u0430lice@acme.example",  # a Cyrillic a
        "alic\u0435@acme.example",  # a Cyrillic e
        "\u0251lice@acme.example",  # a Latin alpha
        "a1ice@acme.example",  # the digit one
        "alice@acrne.example",  # r n for m
        "\u0430lice@\u0430cme.ex\u0430mple",
    ],
    ids=["cyrillic-a", "cyrillic-e", "latin-alpha", "digit-one", "rn-for-m", "cyrillic-throughout"],
)
def test_a_look_alike_of_the_requester_may_not_decide(look_alike: str) -> None:
    """One person, one identity: a subject a reader cannot tell from the requester's (UTS #39 confusable
    skeleton) is the requester, on the card and in its delegation chain alike."""
    assert may_decide(CARD, _admin(subject=look_alike)).code is Code.PERMISSION_DENIED
    delegated = dataclasses.replace(CARD, requester_subject="bob@acme.example", actors=("alice@acme.example",))
    assert may_decide(delegated, _admin(subject=look_alike)).code is Code.PERMISSION_DENIED


def test_a_look_alike_of_a_policy_approver_decides_nothing() -> None:
    """A person's subject spelled like a policy rule's name (``p\u043elicy:``, a Cyrillic o) is refused
    like the name itself: approvers named ``policy:`` are the rules' alone."""
    decision = may_decide(CARD, _admin(subject="p\u043elicy:small-refunds"))
    assert (decision.allowed, decision.code) == (False, Code.PERMISSION_DENIED)


DELEGATED = dataclasses.replace(
    CARD, acting_client="agent-7@acme.example", actors=("agent-7@acme.example", "planner@acme.example")
)


@pytest.mark.parametrize(
    ("subject", "allowed"),
    [
        ("alice@acme.example", False),
        ("AGENT-7@acme.example", False),
        ("planner@acme.example", False),
        ("bob@acme.example", True),
    ],
    ids=["the-person", "the-acting-agent", "an-earlier-actor", "someone-else"],
)
def test_nobody_in_a_delegation_chain_decides_its_card(subject: str, allowed: bool) -> None:
    """A card an agent proposed for alice: alice and every actor of the chain are the requester."""
    decision = may_decide(DELEGATED, _admin(subject=subject))
    assert decision.allowed is allowed
    assert allowed or decision.code is Code.PERMISSION_DENIED


# -- the tainted quorum ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("approval", "tainted", "quorum", "required"),
    [
        (Approval(), False, 2, 1),
        (Approval(), True, 2, 2),
        (Approval(), True, 1, 1),
        (Approval(required=3), True, 2, 3),
        (REFUNDS, True, 2, 2),
    ],
)
def test_a_tainted_proposal_needs_at_least_the_orgs_tainted_quorum(
    approval: Approval, tainted: bool, quorum: int, required: int
) -> None:
    """The tainted quorum raises the requirement of a tainted proposal only, and never lowers one."""
    assert approvals_required(approval, {}, tainted=tainted, tainted_approvals=quorum) == required
