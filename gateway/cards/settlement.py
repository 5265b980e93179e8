"""How a write's outcome was settled, and what the evidence behind it can and cannot prove.

A card's outcome comes from one of six places: the backend's own answer to the send; the gateway, which
sent nothing (a binding that no longer held, a precondition that changed); or, when the answer was lost,
a lookup (a status read by the write's key, a search read that found the key the API stored, or a read of
the write's target whose state matches what the write asked for); or, when no lookup settled it, a person.
`settlement_of` says which, with one sentence that claims no more than that evidence does, and what the
lookup saw.

Read by the admin card view (admin API, CLI, console): the evidence is the backend's text, for people
only. The agent's view of its card never carries it (`gateway.cards.views.card_for_agent`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.cards.card import Card, CardEvent, CardState

__all__ = ["SettledBy", "Settlement", "settlement_of"]


class SettledBy(StrEnum):
    """Where a card's outcome came from."""

    ANSWER = "answer"
    """The backend answered the send: it confirmed the write, or refused it."""
    GATEWAY = "gateway"
    """The gateway ended it before anything was sent."""
    STATUS_LOOKUP = "status_lookup"
    """A status read by the write's key: the backend's own record of it."""
    SEARCH_MATCH = "search_match"
    """A search read found an item holding the key the write carried (a stored field or a marker)."""
    STATE_MATCH = "state_match"
    """A read of the write's target shows the state the write asked for (closed, merged, labelled)."""
    PERSON = "person"
    """A person resolved it, with their evidence, after no lookup could."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Settlement:
    by: SettledBy
    said: str
    """One sentence for people: what settled it, and what that proves (and does not)."""
    saw: Mapping[str, Any] = field(default_factory=dict)
    """What the answer, the lookup or the person recorded: the backend's text, for people only."""


_SETTLED = frozenset({CardState.SUCCEEDED, CardState.FAILED})


def settlement_of(card: Card, events: Sequence[CardEvent]) -> Settlement | None:
    """How `card`'s outcome was settled; None while it is not (or when it never ran: rejected, expired)."""
    if card.state not in _SETTLED:
        return None
    evidence: Mapping[str, Any] = card.evidence
    resolved = next((event for event in reversed(events) if event.type == "resolved"), None)
    if resolved is not None:
        return Settlement(
            by=SettledBy.PERSON,
            said=f"settled by a person ({resolved.actor}) after no lookup could: their evidence, not the backend's",
            saw=dict(evidence),
        )
    if evidence.get("sent") is False:
        return Settlement(
            by=SettledBy.GATEWAY,
            said=f"ended by the gateway before anything was sent: {evidence.get('reason', '')}".rstrip(": "),
            saw={key: evidence[key] for key in ("code", "reason") if key in evidence},
        )
    if any(event.type == "reconciled" for event in events):
        return _looked_up(card, evidence)
    sends = "one send" if card.attempts <= 1 else f"{card.attempts} sends"
    status = evidence.get("status")
    answered = f"answered by the backend with HTTP {status}" if isinstance(status, int) else "answered by the backend"
    if card.state is CardState.SUCCEEDED:
        said = f"{answered}: it confirmed the write ({sends})"
    else:
        said = f"{answered}: it refused the write ({sends}), so it did not apply it"
    return Settlement(
        by=SettledBy.ANSWER,
        said=said,
        saw={key: evidence[key] for key in ("status", "reason", "error") if key in evidence},
    )


def _looked_up(card: Card, evidence: Mapping[str, Any]) -> Settlement:
    """A card a lookup settled after its answer was lost."""
    backend = evidence.get("backend")
    saw: Mapping[str, Any] = backend if isinstance(backend, Mapping) else {}
    via = str(evidence.get("via") or SettledBy.STATUS_LOOKUP.value)  # cards settled before `via` was kept
    by = SettledBy(via) if via in {kind.value for kind in SettledBy} else SettledBy.STATUS_LOOKUP
    if by is SettledBy.STATE_MATCH:
        said = "settled by a state read: the target shows what the write asked for"
        held = saw.get("held_at_proposal")
        if held is True:
            said += ", but it already did at proposal: the read cannot tell whether this write changed anything"
        elif held is False:
            said += ", and did not at proposal: this write, or a change made since, made it so"
        else:
            said += "; the card has no read of it at proposal, so it may have held before the write"
    elif by is SettledBy.SEARCH_MATCH:
        said = f"settled by a search read: an item stores this card's key (in {saw.get('matched', '?')})"
    elif card.state is CardState.SUCCEEDED:
        said = "settled by a status read by the write's key: the backend has a record that it applied it"
    else:
        said = "settled by a status read by the write's key: the backend has a record that it refused it"
    return Settlement(by=by, said=said, saw=dict(saw))
