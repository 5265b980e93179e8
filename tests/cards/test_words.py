"""What a card says happened, per state and per failure, to the agent and to people."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.cards.card import TERMINAL, Card, CardState
from gateway.cards.views import AdminCard, card_for_agent
from gateway.cards.words import deadline_ms, failure_code, said_to_agent, said_to_people


def _card(state: CardState, evidence: dict[str, Any] | None = None) -> Card:
    return Card(card_id="crd_1_" + "0" * 32, tool="rooms_book", tool_version="v1", arguments={}, args_hash="h",
                requester_subject="alice@acme.example", requester_org="acme", requester_key_id="k", state=state,
                version=3, idempotency_key="cs-1", transaction_id="txn_1", approvals_required=1, approvers=(),
                summary="Book", agent_text={}, created_ms=1_000, decide_by_ms=2_000, execute_by_ms=3_000,
                evidence=evidence or {})  # fmt: skip


@pytest.mark.parametrize(
    ("state", "said"),
    [
        (CardState.PENDING, "waiting for approval (0 of 1)"),
        (CardState.APPROVED, "approved: waiting to run"),
        (CardState.REJECTED, "rejected by an approver"),
        (CardState.EXPIRED, "expired: not run"),
        (CardState.CANCELLED, "cancelled: not run"),
        (CardState.SUCCEEDED, "succeeded"),
        (CardState.UNKNOWN, "outcome unknown: checking with the backend"),
        (CardState.NEEDS_RECONCILIATION, "outcome unknown: a person is checking with the backend"),
    ],
)
def test_each_state_is_said_plainly(state: CardState, said: str) -> None:
    """The agent's status names what happened in words, the same for people when nothing failed."""
    card = _card(state)
    assert said_to_agent(card) == said_to_people(card) == said
    assert card_for_agent(card)["said"] == said


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_a_final_card_has_no_running_deadline(state: CardState) -> None:
    """No deadline counts down on a final card, in the agent's view or the admin's."""
    card = _card(state, {"code": "CONFLICT", "reason": "r", "sent": False} if state is CardState.FAILED else None)
    assert deadline_ms(card) is None and "expires_at" not in card_for_agent(card)
    assert AdminCard.from_card(card, ()).deadline is None


def test_running_deadlines_are_the_decision_then_the_run() -> None:
    """PENDING counts down to decide_by; once approved, to execute_by; the API gives both with an offset."""
    assert deadline_ms(_card(CardState.PENDING)) == 2_000
    assert deadline_ms(_card(CardState.APPROVED)) == deadline_ms(_card(CardState.UNKNOWN)) == 3_000
    assert card_for_agent(_card(CardState.APPROVED))["expires_at"] == "1970-01-01T00:00:03.000+00:00"


def test_a_backend_refusal_reaches_people_with_its_reason_and_the_agent_with_the_tools_words() -> None:
    """The backend's code and status are for people; the agent reads CONFLICT and the declared words."""
    card = _card(CardState.FAILED, {"error": "UpstreamRefusedError", "status": 409, "reason": "slot_taken",
                                    "said": "the slot was taken"})  # fmt: skip
    assert (failure_code(card), said_to_agent(card)) == ("CONFLICT", "failed: the slot was taken")
    assert (
        said_to_people(card)
        == "failed: the slot was taken (HTTP 409; backend reason: slot_taken; UpstreamRefusedError)"
    )


@given(reason=st.text(min_size=1, max_size=60))
def test_no_backend_reason_ever_reaches_the_agent(reason: str) -> None:
    """Whatever the backend wrote as its refusal code, the agent's view is built without it."""
    card = _card(CardState.FAILED, {"error": "UpstreamRefusedError", "status": 409, "reason": reason})
    view = card_for_agent(card)
    assert view["said"] == "failed: the backend refused it" and view["code"] == "CONFLICT"
    assert reason in said_to_people(card)


def test_a_precondition_failure_is_named_for_both() -> None:
    """PRECONDITION_CHANGED: the agent is told nothing was sent; people also read what changed."""
    card = _card(CardState.FAILED, {"code": "PRECONDITION_CHANGED", "reason": "slot now taken", "sent": False})
    assert failure_code(card) == "PRECONDITION_CHANGED"
    assert said_to_agent(card) == "failed: what the approver decided on changed before it ran; nothing was sent"
    assert said_to_people(card).endswith(": slot now taken")
