"""A card proposal for tests that drive the ledger by hand."""

from __future__ import annotations

from gateway.store.ledger import Proposal

PROPOSAL = Proposal(
    tool="rooms_book",
    tool_version="v1",
    arguments={"room_id": "room-atlas", "date": "2026-12-01", "start": "09:00", "end": "10:00", "title": "x"},
    args_hash="h1",
    requester_subject="alice@acme.example",
    requester_org="acme",
    requester_key_id="key_alice",
    requester_roles=frozenset({"staff"}),
    approvals_required=1,
    approver_role="approver",
    summary="Book room-atlas on 2026-12-01 from 09:00 to 10:00",
    agent_text={"title": "x"},
    decide_within_ms=60_000,
    execute_within_ms=60_000,
    dedupe_key="alice|rooms_book|h1",
)
