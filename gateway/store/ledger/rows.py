"""The ledger's rows: a card and a history entry from the string fields the Lua scripts store.

Who calls it: `gateway.store.ledger.redis_ledger.RedisLedger`, for every card and event it reads. Split from it to
keep that module within its bound; it knows nothing of Redis.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.cards.card import Card, CardEvent, CardState, delegation_of, preview_from_stored
from gateway.provenance import Provenance

__all__ = ["card_from_fields", "event_from_fields"]


def _optional_int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


def _mapping(raw: str | None) -> dict[str, Any]:
    """A stored JSON object; an empty one (most cards' evidence and rejection, while they have none) is
    not parsed."""
    return json.loads(raw) if raw and raw != "{}" else {}


def card_from_fields(f: Mapping[str, str]) -> Card:
    """A card from its stored fields (all strings, as the scripts keep them)."""
    return Card(
        card_id=f["card_id"],
        tool=f["tool"],
        tool_version=f["tool_version"],
        arguments=json.loads(f["arguments"]),
        args_hash=f["args_hash"],
        requester_subject=f["requester_subject"],
        requester_org=f["requester_org"],
        requester_key_id=f["requester_key_id"],
        state=CardState(f["state"]),
        version=int(f["version"]),
        idempotency_key=f["idempotency_key"],
        transaction_id=f["transaction_id"],
        approvals_required=int(f["approvals_required"]),
        approvers=tuple(json.loads(raw)) if (raw := f.get("approvers")) and raw != "[]" else (),
        summary=f["summary"],
        agent_text=_mapping(f.get("agent_text")),
        created_ms=int(f["created_ms"]),
        decide_by_ms=int(f["decide_by_ms"]),
        execute_by_ms=_optional_int(f.get("execute_by_ms")),
        execute_within_ms=int(f.get("execute_within_ms") or 0),
        fence=int(f.get("fence") or 0),
        dispatched=f.get("dispatched") == "1",
        attempts=int(f.get("attempts") or 0),
        dispatched_ms=_optional_int(f.get("dispatched_ms")),
        first_dispatched_ms=_optional_int(f.get("first_dispatched_ms")),
        approved_ms=_optional_int(f.get("approved_ms")),
        resend=f.get("resend") == "1",
        reference=f.get("reference") or None,
        evidence=_mapping(f.get("evidence")),
        rejection=_mapping(f.get("rejection")),
        approver_role=f.get("approver_role", "approver"),
        requester_roles=frozenset(r for r in f.get("requester_roles", "").split(",") if r),
        preview=preview_from_stored(f.get("preview")),
        provenance=Provenance.from_stored(f.get("provenance")),
        **delegation_of(f.get("delegation")),
    )


def event_from_fields(f: Mapping[str, str]) -> CardEvent:
    """One history entry from its stored fields."""
    return CardEvent(
        seq=int(f["seq"]),
        type=f["type"],
        actor=f["actor"],
        state=f["state"],
        version=int(f["version"]),
        at_ms=int(f["at"]),
        data=json.loads(f["data"]),
        data_raw=f["data"],
        prev=f["prev"],
        hash=f["hash"],
        repeats=int(f.get("repeats") or 0),
        last_at_ms=_optional_int(f.get("last_at")),
    )
