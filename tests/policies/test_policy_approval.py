"""Policy approvals as a pure function: which rule approves a card, and every condition that stops it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.cards.card import Card, CardState
from gateway.codes import Code
from gateway.config.approvals import ApprovalSettings, Bound, PolicyRule
from gateway.provenance import Provenance, ProvenanceRead
from policies.policy_approval import is_policy_approver, is_tainted, policy_approval, rule_admits

NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

CARD = Card(
    card_id="crd_1_" + "0" * 32,
    tool="orders_refund_create",
    tool_version="v1",
    arguments={"order_id": "ord-1001", "amount_cents": 1_500},
    args_hash="h1",
    requester_subject="agent@acme.example",
    requester_org="acme",
    requester_key_id="key_1",
    state=CardState.PENDING,
    version=1,
    idempotency_key="cs-1",
    transaction_id="txn_1",
    approvals_required=1,
    approvers=(),
    summary="Refund 15.00 (1500 cents) on order ord-1001",
    agent_text={},
    created_ms=0,
    decide_by_ms=0,
    requester_roles=frozenset({"support"}),
)

SMALL = PolicyRule(
    tool="orders_refund_create", requester_roles=["support"], arguments={"amount_cents": Bound(min=1, max=2_000)}
)


def _card(**changes: Any) -> Card:
    return dataclasses.replace(CARD, **changes)


def test_a_card_within_every_condition_is_approved_as_its_rule() -> None:
    """The verdict names the rule, and the approver the ledger records is ``policy:<rule>``."""
    verdict = policy_approval(CARD, {"small-refunds": SMALL}, now=NOON)
    assert verdict.decision.allowed and verdict.rule == "small-refunds"
    assert verdict.approver == "policy:small-refunds" and is_policy_approver(verdict.approver)


def test_no_rules_approve_nothing() -> None:
    """Off by default: the default settings hold no rule, and no rule approves no card."""
    assert ApprovalSettings().policies == {}
    verdict = policy_approval(CARD, ApprovalSettings().policies, now=NOON)
    assert not verdict.decision.allowed and verdict.decision.code is Code.APPROVAL_REQUIRED and verdict.rule is None


@given(amount=st.integers(min_value=-10_000, max_value=10_000), low=st.integers(0, 3_000), span=st.integers(0, 3_000))
def test_an_argument_is_admitted_exactly_within_its_inclusive_bounds(amount: int, low: int, span: int) -> None:
    """Both edges are inside; one past either edge is outside."""
    rule = PolicyRule(
        tool=CARD.tool, requester_roles=["support"], arguments={"amount_cents": Bound(min=low, max=low + span)}
    )
    card = _card(arguments={"amount_cents": amount})
    assert rule_admits(rule, card, now=NOON) is (low <= amount <= low + span)


@given(value=st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.just(float("nan")), st.just(float("inf")),
                       st.lists(st.integers(), max_size=2)))  # fmt: skip
def test_a_bounded_argument_that_is_missing_or_not_a_finite_number_is_never_admitted(value: Any) -> None:
    """``true`` is not 1, ``"5"`` is not 5, and an absent argument is not within any bound."""
    arguments = {} if value is None else {"amount_cents": value}
    assert not rule_admits(SMALL, _card(arguments=arguments), now=NOON)


@given(start=st.integers(0, 24 * 60 - 1), length=st.integers(1, 24 * 60 - 1), offset=st.integers(-14 * 60, 14 * 60),
       at=st.integers(0, 7 * 24 * 60 - 1))  # fmt: skip
def test_hours_admit_exactly_the_minutes_of_the_window_at_its_offset(
    start: int, length: int, offset: int, at: int
) -> None:
    """Any window (across midnight too) at any offset: the local minute of `now` decides, end excluded."""
    end = (start + length) % (24 * 60)
    sign, magnitude = ("-" if offset < 0 else "+"), abs(offset)
    rule = SMALL.model_copy(
        update={"hours": f"{start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}" if end else
                f"{start // 60:02d}:{start % 60:02d}-24:00",
                "utc_offset": f"{sign}{magnitude // 60:02d}:{magnitude % 60:02d}"}
    )  # fmt: skip
    now = NOON.replace(hour=0, minute=0) + timedelta(minutes=at, seconds=30)
    local_minute = (at + offset) % (24 * 60)
    inside = (local_minute - start) % (24 * 60) < length
    assert rule_admits(PolicyRule.model_validate(rule.model_dump()), _card(), now=now) is inside


@pytest.mark.parametrize(
    ("hours", "offset", "utc", "admitted"),
    [
        ("22:00-06:00", "+00:00", "23:30", True),  # across midnight, before it
        ("22:00-06:00", "+00:00", "05:59", True),  # after it
        ("22:00-06:00", "+00:00", "06:00", False),  # the end is excluded
        ("22:00-06:00", "+00:00", "21:59", False),
        ("09:00-17:00", "+02:00", "07:00", True),  # 09:00 at +02:00
        ("09:00-17:00", "+02:00", "15:00", False),  # 17:00 there
        ("09:00-17:00", "-05:00", "13:59", False),  # 08:59 at -05:00
        ("09:00-17:00", "-05:00", "14:00", True),  # 09:00 there
        ("00:00-24:00", "+00:00", "23:59", True),
    ],
)
def test_hours_across_midnight_and_offsets(hours: str, offset: str, utc: str, admitted: bool) -> None:
    """Examples of the property above, with the edge minutes named."""
    rule = SMALL.model_copy(update={"hours": hours, "utc_offset": offset})
    hour, minute = (int(part) for part in utc.split(":"))
    assert rule_admits(rule, _card(), now=NOON.replace(hour=hour, minute=minute)) is admitted


@given(held=st.frozensets(st.sampled_from(["support", "staff", "approver", "registry"]), max_size=4),
       trusted=st.lists(st.sampled_from(["support", "staff", "approver"]), min_size=1, max_size=3))  # fmt: skip
def test_the_requester_must_hold_one_of_the_rules_roles(held: frozenset[str], trusted: list[str]) -> None:
    """Roles as recorded on the card: one in common admits, none does not."""
    rule = SMALL.model_copy(update={"requester_roles": trusted})
    assert rule_admits(rule, _card(requester_roles=held), now=NOON) is bool(held & set(trusted))


@pytest.mark.parametrize(
    ("changes", "rule_changes"),
    [
        ({"tool": "rooms_book"}, {}),
        ({"requester_org": "globex"}, {"orgs": ["acme"]}),
        ({}, {"orgs": ["globex"]}),
    ],
    ids=["another-tool", "another-org", "org-not-listed"],
)
def test_a_rule_is_for_its_tool_and_its_orgs_only(changes: dict[str, Any], rule_changes: dict[str, Any]) -> None:
    assert not rule_admits(SMALL.model_copy(update=rule_changes), _card(**changes), now=NOON)


@pytest.mark.parametrize(
    "provenance",
    [
        Provenance(tainted=True, data_flow=False),
        Provenance(tainted=True, data_flow=True, reads=[ProvenanceRead(tool="rooms_availability",
                   at="2026-12-01T08:00:00.000+00:00", untrusted_text=True, private=False)]),
    ],
)  # fmt: skip
def test_a_tainted_card_is_never_approved_by_policy(provenance: Provenance) -> None:
    """A card whose provenance says its requester was tainted waits for a person, whatever the rules."""
    card = _card(provenance=provenance)
    assert is_tainted(card)
    verdict = policy_approval(card, {"small-refunds": SMALL}, now=NOON)
    assert not verdict.decision.allowed and verdict.decision.code is Code.APPROVAL_REQUIRED
    assert "tainted" in verdict.decision.reason


@pytest.mark.parametrize("provenance", [None, Provenance(tainted=False, data_flow=True)])
def test_a_card_without_taint_is_read_as_not_tainted(provenance: Provenance | None) -> None:
    """No record (a card made before it was kept), or one that is not tainted, is not tainted."""
    card = _card(provenance=provenance)
    assert not is_tainted(card) and not is_tainted(CARD)
    assert policy_approval(card, {"small-refunds": SMALL}, now=NOON).decision.allowed


def test_a_policy_is_one_approver_of_a_quorum_at_most() -> None:
    """A card a policy approved once (of two needed) is not approved by another rule: a person must."""
    card = _card(approvals_required=2, approvers=("policy:small-refunds",))
    other = SMALL.model_copy()
    verdict = policy_approval(card, {"small-refunds": SMALL, "other": other}, now=NOON)
    assert not verdict.decision.allowed and verdict.decision.code is Code.APPROVAL_REQUIRED


@pytest.mark.parametrize("state", sorted(set(CardState) - {CardState.PENDING}))
def test_only_a_pending_card_is_approved_by_policy(state: CardState) -> None:
    assert not policy_approval(_card(state=state), {"small-refunds": SMALL}, now=NOON).decision.allowed


def test_the_first_admitting_rule_by_name_approves() -> None:
    rules = {"zz-wide": SMALL, "aa-narrow": SMALL, "mm-other-tool": SMALL.model_copy(update={"tool": "rooms_book"})}
    assert policy_approval(CARD, rules, now=NOON).rule == "aa-narrow"


@pytest.mark.parametrize(
    "document",
    [
        {"tool": "t", "requester_roles": []},
        {"tool": "t", "requester_roles": ["support"], "arguments": {"amount_cents": {}}},
        {"tool": "t", "requester_roles": ["support"], "arguments": {"amount_cents": {"min": 5, "max": 1}}},
        {"tool": "t", "requester_roles": ["support"], "hours": "9-17"},
        {"tool": "t", "requester_roles": ["support"], "hours": "09:00-09:00"},
        {"tool": "t", "requester_roles": ["support"], "hours": "09:00-24:30"},
        {"tool": "t", "requester_roles": ["support"], "utc_offset": "+15:00"},
        {"tool": "t", "requester_roles": ["support"], "utc_offset": "02:00"},
    ],
    ids=[
        "no-roles",
        "empty-bound",
        "min-above-max",
        "bad-hours",
        "empty-hours",
        "past-midnight",
        "offset-range",
        "offset-sign",
    ],  # fmt: skip
)
def test_a_rule_that_could_be_misread_is_refused_at_load(document: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PolicyRule.model_validate(document)


@pytest.mark.parametrize("name", ["Small", "small refunds", "policy:x", "", "a" * 64])
def test_a_rule_name_is_a_plain_lowercase_word(name: str) -> None:
    with pytest.raises(ValidationError):
        ApprovalSettings.model_validate({"policies": {name: SMALL.model_dump()}})


def test_now_must_carry_its_zone() -> None:
    with pytest.raises(ValueError):
        rule_admits(SMALL.model_copy(update={"hours": "09:00-17:00"}), CARD, now=NOON.replace(tzinfo=None))
