"""Approval-gated writes end to end: real MCP client, real gateway with its worker, real backends."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway import Access, Approval, Mode, Tool, ToolContext, fill_path, keyed_contract, request_json
from gateway.cards.card import CardState, verify_chain
from gateway.config.settings import AdapterSettings, OrgSettings, Settings
from gateway.principal import KeyKind
from gateway.runtime.app import build_gateway, create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import agent, error_code, make_key, payload
from tests.support.cards import approve, approve_as_admin
from tests.support.cards import settled as _settled
from tests.support.planted import serve_planted
from tests.support.redis_server import start_redis_server
from tests.support.services import TEST_AUDIT_SECRET, Backend, gateway_settings
from tests.support.signing import ensure_signing_key

AUDIT = Secret(TEST_AUDIT_SECRET)

pytestmark = pytest.mark.anyio


def _booking(day: str, start: str = "09:00", end: str = "10:00", room: str = "room-eos") -> dict[str, Any]:
    return {"room_id": room, "date": day, "start": start, "end": end, "title": "Planning"}


def _bookings(backend: Backend, day: str, room: str = "room-eos") -> list[Any]:
    service = backend.app.state.service
    return [b for b in service.bookings.values() if b.date == day and b.room_id == room and b.status == "active"]


async def test_proposal_approved_by_a_person_runs_exactly_once(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """propose -> approve -> the backend holds exactly one booking; the agent sees SUCCEEDED."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["rooms_book"].description is not None
        assert tools["rooms_book"].description.startswith("Requests approval")
        assert "idempotency" not in json.dumps(tools["rooms_book"].input_schema).lower()
        receipt = payload(await client.call_tool("rooms_book", _booking("2026-12-10")))
        assert receipt["status"] == "PENDING" and receipt["approvals_required"] == 1
        assert receipt["summary"] == "Book room-eos on 2026-12-10 from 09:00 to 10:00"
        assert _bookings(backends["rooms"], "2026-12-10") == []  # nothing sent before approval
        await approve(RedisLedger(redis), receipt["card_id"], comment="fine")
        card = await _settled(redis, receipt["card_id"])
        status = payload(await client.call_tool("approvals_status", {"card_id": receipt["card_id"]}))
    assert card.state is CardState.SUCCEEDED and card.reference
    assert (status["decision"], status["outcome"], status["reference"]) == ("approved", "succeeded", card.reference)
    [booking] = _bookings(backends["rooms"], "2026-12-10")
    assert booking.booking_id == card.reference
    events = await RedisLedger(redis).events(card.card_id)
    assert [e.type for e in events] == ["created", "approved", "claimed", "dispatched", "completed"]
    assert verify_chain(events)
    keys_seen = [r.headers.get("idempotency-key") for r in backends["rooms"].app.state.service.requests
                 if r.method == "POST" and r.path == "/bookings"]  # fmt: skip
    assert card.idempotency_key in keys_seen


async def test_a_write_the_backend_answered_shows_its_http_status_in_the_admin_card_view(
    redis: Redis, mcp_url: str
) -> None:
    """The card of a booking the rooms backend created says, for people, that its answer settled it and with
    which HTTP status (201): what the card is worth as evidence is on it, not only in the backend's log."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        receipt = payload(await client.call_tool("rooms_book", _booking("2026-12-18")))
    base_url = mcp_url.removesuffix("/mcp")
    await approve_as_admin(redis, base_url, receipt["card_id"])
    assert (await _settled(redis, receipt["card_id"])).state is CardState.SUCCEEDED
    admin = await make_key(redis, subject="ann@acme.example", roles=("approver",), kind=KeyKind.ADMIN)
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {admin}"}) as http:
        answer = await http.get(f"/admin/api/cards/{receipt['card_id']}")
    assert answer.status_code == 200, answer.text
    settlement = answer.json()["card"]["settlement"]
    assert settlement["by"] == "answer"
    assert settlement["said"] == "answered by the backend with HTTP 201: it confirmed the write (one send)"
    assert settlement["saw"] == {"status": 201}


async def test_same_open_proposal_returns_the_same_card(redis: Redis, mcp_url: str) -> None:
    """Proposing the same write again while it is open returns that card, marked existing."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        first = payload(await client.call_tool("rooms_book", _booking("2026-12-11")))
        again = payload(await client.call_tool("rooms_book", _booking("2026-12-11")))
        mine = payload(await client.call_tool("approvals_mine", {}))
    assert again["card_id"] == first["card_id"] and again["existing"] is True
    assert [c["card_id"] for c in mine["cards"]] == [first["card_id"]]


async def test_agent_supplied_idempotency_key_is_refused_and_audited(redis: Redis, mcp_url: str) -> None:
    """Keys are the gateway's: an agent's key argument is refused and no card is created."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        result = await client.call_tool("rooms_book", {**_booking("2026-12-12"), "idempotency_key": "mine"})
    assert error_code(result) == "VALIDATION_ERROR"
    assert payload(result)["error"]["details"]["errors"][0]["type"] == "server_minted_key"
    assert await RedisLedger(redis).recent() == []
    events = await RedisStreamAuditSink(redis).recent(10)
    assert events[-1].reason == "agent supplied an idempotency key"


@pytest.mark.parametrize(
    ("tool", "arguments", "roles"),
    [
        ("rooms_cancel_booking", {"booking_id": "bk-0002"}, ("staff",)),  # hank's (globex) booking
        ("rooms_cancel_booking", {"booking_id": "bk-0003"}, ("staff",)),  # bob's, same org
        ("rooms_cancel_booking", {"booking_id": "bk-9999"}, ("staff",)),
        ("orders_refund_create", {"order_id": "ord-1005", "amount_cents": 100, "reason": "x"}, ("support",)),
        ("orders_refund_create", {"order_id": "ord-9999", "amount_cents": 100, "reason": "x"}, ("support",)),
    ],
)
async def test_targets_not_offered_to_the_caller_are_not_found_and_make_no_card(
    redis: Redis, mcp_url: str, tool: str, arguments: dict[str, Any], roles: tuple[str, ...]
) -> None:
    """Another person's booking, another org's order and a missing one answer NOT_FOUND alike."""
    token = await make_key(redis, roles=roles)
    async with agent(mcp_url, token) as client:
        result = await client.call_tool(tool, arguments)
    assert error_code(result) == "NOT_FOUND"
    assert await RedisLedger(redis).recent() == []


async def test_cards_of_others_answer_like_missing_cards(redis: Redis, mcp_url: str) -> None:
    """approvals_status and approvals_cancel cannot see or touch another caller's card."""
    alice = await make_key(redis, roles=("staff",))
    bob = await make_key(redis, roles=("staff",), subject="bob@acme.example")
    async with agent(mcp_url, alice) as client:
        card_id = payload(await client.call_tool("rooms_book", _booking("2026-12-13")))["card_id"]
    async with agent(mcp_url, bob) as client:
        for name in ("approvals_status", "approvals_cancel"):
            theirs = await client.call_tool(name, {"card_id": card_id})
            missing = await client.call_tool(name, {"card_id": "crd_1_" + "0" * 32})
            assert error_code(theirs) == "NOT_FOUND"
            assert theirs.model_dump_json() == missing.model_dump_json()
    async with agent(mcp_url, alice) as client:
        cancelled = payload(await client.call_tool("approvals_cancel", {"card_id": card_id}))
    assert cancelled["status"] == "CANCELLED" and cancelled["cancelled"] is True


async def test_response_dropped_after_commit_is_unknown_then_resolved_by_status_query(
    redis: Redis, mcp_url: str, clean_backends: dict[str, Backend]
) -> None:
    """The backend commits and drops the answer: UNKNOWN -> status query -> SUCCEEDED, one booking."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        card_id = payload(await client.call_tool("rooms_book", _booking("2026-12-14")))["card_id"]
    clean_backends["rooms"].set_faults(drop_after_commit=True, paths=["/bookings"], times=1)
    await approve(RedisLedger(redis), card_id, comment="fine")
    card = await _settled(redis, card_id)
    assert card.state is CardState.SUCCEEDED
    types = [e.type for e in await RedisLedger(redis).events(card_id)]
    assert types[:5] == ["created", "approved", "claimed", "dispatched", "completed"]
    assert "reconciled" in types and types.count("dispatched") == 1  # resolved by query, not by resending
    [booking] = _bookings(clean_backends["rooms"], "2026-12-14")
    assert booking.booking_id == card.reference


async def test_a_5xx_is_unknown_never_failed_and_resolves_without_a_double_write(
    redis: Redis, mcp_url: str, clean_backends: dict[str, Backend]
) -> None:
    """503 may or may not have applied: UNKNOWN, a status query, then a resend with the same key."""
    token = await make_key(redis, roles=("staff",))
    async with agent(mcp_url, token) as client:
        card_id = payload(await client.call_tool("rooms_book", _booking("2026-12-15")))["card_id"]
    clean_backends["rooms"].set_faults(status=503, paths=["/bookings"], times=1)
    await approve(RedisLedger(redis), card_id, comment="fine")
    card = await _settled(redis, card_id, timeout=20)
    events = await RedisLedger(redis).events(card_id)
    completed = [e.data["outcome"] for e in events if e.type == "completed"]
    assert completed[0] == "UNKNOWN" and "FAILED" not in completed
    assert card.state is CardState.SUCCEEDED
    assert len(_bookings(clean_backends["rooms"], "2026-12-15")) == 1
    posts = [
        r for r in clean_backends["rooms"].app.state.service.requests if r.method == "POST" and r.path == "/bookings"
    ]
    sent_keys = [r.headers.get("idempotency-key") for r in posts if r.headers.get("idempotency-key")]
    assert sent_keys.count(card.idempotency_key) == 2  # the 503'd send and the resend, with one key


async def test_large_refund_needs_two_distinct_approvers(
    redis: Redis, mcp_url: str, backends: dict[str, Backend]
) -> None:
    """Above the threshold one approval is not enough; the second distinct approver releases it."""
    token = await make_key(redis, org="globex", roles=("support",), subject="marge@globex.example")
    arguments = {"order_id": "ord-1005", "amount_cents": 60_000, "reason": "damaged"}
    async with agent(mcp_url, token) as client:
        receipt = payload(await client.call_tool("orders_refund_create", arguments))
    assert receipt["approvals_required"] == 2
    first = await approve(RedisLedger(redis), receipt["card_id"], approver="root@globex.example", comment="fine")
    assert first.state is CardState.PENDING
    await approve(RedisLedger(redis), receipt["card_id"], approver="ops@globex.example", comment="fine")
    card = await _settled(redis, receipt["card_id"])
    assert card.state is CardState.SUCCEEDED
    refunds = [r for r in backends["orders"].app.state.service.refunds if r.refund_id == card.reference]
    assert len(refunds) == 1


async def test_with_a_ledger_that_is_not_durable_writes_are_refused_and_reads_work(
    backends: dict[str, Backend],
) -> None:
    """AOF off: no card can be created; read tools keep answering."""
    with start_redis_server(appendonly=False) as url:
        client = Redis.from_url(url)
        try:
            token = await _make_key_at(client)
            with serve_app_in_thread(create_app(gateway_settings(url, backends)), lifespan=True) as base:
                async with agent(f"{base}/mcp", token) as mcp:
                    refused = await mcp.call_tool("rooms_book", _booking("2026-12-16"))
                    read = await mcp.call_tool("rooms_list", {})
            assert error_code(refused) == "LEDGER_UNAVAILABLE"
            assert not read.is_error
            assert await RedisLedger(client).recent() == []
        finally:
            await client.aclose()


async def _make_key_at(client: Redis) -> str:
    return await make_key(client, roles=("staff",))


class _NoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note_id: str


class _Archived(BaseModel):
    note_id: str


async def _archive(args: _NoteArgs, ctx: ToolContext) -> Any:
    return await request_json(ctx, "POST", fill_path("/notes/{note_id}/archive", note_id=args.note_id))


ARCHIVE = Tool(
    name="notes_archive",
    adapter="notes",
    description="Archive a note.",
    mode=Mode.WRITE,
    arguments=_NoteArgs,
    output=_Archived,
    access=Access.roles("staff"),
    execute=_archive,
    write_contract=keyed_contract("note_id"),
    approval=Approval(),
    summary=lambda args: "Archive a note",
)


async def test_an_approved_write_whose_argument_would_change_its_endpoint_fails_unsent(quiet_redis_url: str) -> None:
    """An in-process write whose path argument is a dot segment becomes a card (its pattern allowed it), but
    running it sends nothing: the card is FAILED with VALIDATION_ERROR and ``sent: false``, not retried."""
    redis = Redis.from_url(quiet_redis_url)
    org = OrgSettings(name="acme", adapters=frozenset({"notes"}), roles=frozenset({"staff"}))
    try:
        await redis.flushdb()
        await ensure_signing_key(redis)
        with serve_planted() as (url, backend):
            notes = AdapterSettings(name="notes", url=url, signing_key=Secret(secrets.token_hex(16)))
            settings = Settings(redis_url=quiet_redis_url, adapters={"notes": notes}, orgs=(org,), audit_secret=AUDIT)
            gateway = build_gateway(settings, [ARCHIVE])
            try:
                principal = await KeyStore(redis).resolve(await make_key(redis, roles=("staff",)))
                assert principal is not None
                receipt = (
                    await gateway.executor.agent.execute(principal, "notes_archive", {"note_id": ".."})
                ).for_model()
                await approve(RedisLedger(redis), receipt["card_id"], comment="fine")
                card = await gateway.executor.writes.run_approved(receipt["card_id"], worker="w1")
            finally:
                await gateway.aclose()
        assert card is not None and card.state is CardState.FAILED
        assert (card.evidence["code"], card.evidence["sent"]) == ("VALIDATION_ERROR", False)
        assert backend.raw_paths == []
    finally:
        await redis.flushdb()
        await redis.aclose()
