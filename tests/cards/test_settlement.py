"""How a card's outcome was settled, said so that it claims no more than its evidence does."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.cards.card import CardEvent, CardState
from gateway.cards.settlement import SettledBy, settlement_of
from gateway.cards.views import card_for_agent
from tests.support.cards import a_card


def _event(kind: str, actor: str = "reconciler") -> CardEvent:
    return CardEvent(seq=1, type=kind, actor=actor, state="", version=1, at_ms=1)


LOOKED_UP = (_event("completed", "worker"), _event("status_checked"), _event("reconciled"))
STATE_SAW = {"lookup": "/repos/o/r/issues/7", "saw": {"state": "closed"}, "matched": True}


@pytest.mark.parametrize(
    ("state", "evidence", "events", "by", "said"),
    [
        (CardState.SUCCEEDED, {}, (_event("completed", "worker"),), SettledBy.ANSWER, "it confirmed the write"),
        (CardState.SUCCEEDED, {"status": 204}, (_event("completed", "worker"),), SettledBy.ANSWER,
         "answered by the backend with HTTP 204: it confirmed the write (one send)"),
        (CardState.FAILED, {"error": "UpstreamRefusedError", "status": 422}, (), SettledBy.ANSWER, "it refused"),
        (CardState.FAILED, {"code": "CONFLICT", "reason": "tool definition changed", "sent": False}, (),
         SettledBy.GATEWAY, "before anything was sent: tool definition changed"),
        (CardState.SUCCEEDED, {"status": "applied", "via": "status_lookup", "backend": {"state": "applied"}},
         LOOKED_UP, SettledBy.STATUS_LOOKUP, "a record that it applied it"),
        (CardState.FAILED, {"status": "refused", "backend": {"state": "refused"}},
         LOOKED_UP, SettledBy.STATUS_LOOKUP, "a record that it refused it"),
        (CardState.SUCCEEDED, {"status": "applied", "via": "search_match", "backend": {"matched": "body"}},
         LOOKED_UP, SettledBy.SEARCH_MATCH, "an item stores this card's key (in body)"),
        (CardState.SUCCEEDED, {"via": "state_match", "backend": STATE_SAW | {"held_at_proposal": False}},
         LOOKED_UP, SettledBy.STATE_MATCH, "and did not at proposal: this write, or a change made since"),
        (CardState.SUCCEEDED, {"via": "state_match", "backend": STATE_SAW | {"held_at_proposal": True}},
         LOOKED_UP, SettledBy.STATE_MATCH, "already did at proposal: the read cannot tell whether this write"),
        (CardState.SUCCEEDED, {"via": "state_match", "backend": STATE_SAW | {"held_at_proposal": None}},
         LOOKED_UP, SettledBy.STATE_MATCH, "no read of it at proposal, so it may have held before"),
        (CardState.SUCCEEDED, {"ticket": "T-1"}, (*LOOKED_UP[:2], _event("handed_over"), _event("resolved", "bob")),
         SettledBy.PERSON, "settled by a person (bob)"),
    ],
    ids=["answered", "answered-with-status", "refused", "unsent", "status", "status-refused", "search",
         "state-changed", "state-held", "state-unknown-before", "person"],
)  # fmt: skip
def test_a_settled_card_says_how_and_no_more_than_its_evidence(
    state: CardState, evidence: dict[str, Any], events: tuple[CardEvent, ...], by: SettledBy, said: str
) -> None:
    settlement = settlement_of(a_card(state=state, evidence=evidence, attempts=1), events)
    assert settlement is not None and settlement.by is by
    assert said in settlement.said


def test_what_a_lookup_saw_is_kept_for_people() -> None:
    """The state read's evidence travels with the settlement, as the lookup recorded it."""
    evidence = {"via": "state_match", "backend": STATE_SAW | {"held_at_proposal": False}}
    settlement = settlement_of(a_card(state=CardState.SUCCEEDED, evidence=evidence), LOOKED_UP)
    assert settlement is not None and settlement.saw == STATE_SAW | {"held_at_proposal": False}


@pytest.mark.parametrize(
    "state", [CardState.PENDING, CardState.UNKNOWN, CardState.NEEDS_RECONCILIATION, CardState.REJECTED]
)
def test_a_card_not_settled_or_never_run_has_no_settlement(state: CardState) -> None:
    assert settlement_of(a_card(state=state, evidence={"via": "state_match"}), LOOKED_UP) is None


def test_the_agent_view_of_a_state_settled_card_holds_nothing_the_lookup_saw() -> None:
    """What the read saw is the backend's text: the requesting agent's view carries neither it nor the way."""
    evidence = {"via": "state_match", "backend": STATE_SAW | {"saw": {"labels[].name": ["IGNORE ALL"]}}}
    view = card_for_agent(a_card(state=CardState.SUCCEEDED, evidence=evidence))
    assert "IGNORE ALL" not in repr(view) and "state_match" not in repr(view)
