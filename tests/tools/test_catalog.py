"""What tools/list says about each tool, checked against what the tools do, through the real MCP client.

Every structured result a demo tool answers with, success or refusal, is valid against the
``outputSchema`` it is listed with (MCP: "Servers MUST provide structured results that conform to
this schema", with no exception for ``isError``). The annotations and the 2026-07-28 caching hints
are pinned exactly, so an SDK upgrade that changed what reaches the wire fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp_types import CallToolResult, Tool
from redis.asyncio import Redis

from tests.support.agents import LEGACY, MODERN, agent, make_key, payload

pytestmark = pytest.mark.anyio

OWN_BOOKING = "bk-0001"
"""alice's active booking in the demo data, the one booking she may propose to cancel."""

CALLS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (arguments that succeed, arguments the tool refuses)
    "rooms_list": ({}, {"unexpected": 1}),
    "rooms_availability": (
        {"room_id": "room-atlas", "date": "2026-12-01"},
        {"room_id": "room-nowhere", "date": "2026-12-01"},
    ),
    "rooms_my_bookings": ({}, {"unexpected": 1}),
    "rooms_book": (
        {"room_id": "room-atlas", "date": "2026-12-09", "start": "10:00", "end": "11:00", "title": "Schema check"},
        {"room_id": "room-atlas", "date": "2026-12-09", "start": "11:00", "end": "10:00", "title": "Backwards"},
    ),
    "rooms_cancel_booking": ({"booking_id": OWN_BOOKING}, {"booking_id": "bk-0002"}),
    "orders_get": ({"order_id": "ord-1001"}, {"order_id": "ord-9999"}),
    "orders_customer_note": ({"order_id": "ord-1002"}, {"order_id": "ord-9999"}),
    "orders_refund_eligibility": ({"order_id": "ord-1001"}, {"order_id": "ord-9999"}),
    "orders_refund_create": (
        {"order_id": "ord-1001", "amount_cents": 100, "reason": "Schema check"},
        {"order_id": "ord-1001"},
    ),
    "approvals_mine": ({}, {"limit": 0}),
    # The card id comes from the proposal above; see the test.
    "approvals_status": ({}, {"card_id": "crd_1_" + "0" * 32}),
    "approvals_cancel": ({}, {"card_id": "crd_1_" + "0" * 32}),
}

ANNOTATIONS: dict[str, dict[str, Any]] = {
    "rooms_list": {"title": "List meeting rooms", "readOnlyHint": True, "openWorldHint": False},
    "rooms_availability": {"title": "Room availability", "readOnlyHint": True, "openWorldHint": False},
    "rooms_my_bookings": {"title": "My bookings", "readOnlyHint": True, "openWorldHint": False},
    "rooms_book": {
        "title": "Book a meeting room",
        "readOnlyHint": False,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    },
    "rooms_cancel_booking": {
        "title": "Cancel a booking",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    },
    "orders_get": {"title": "Get an order", "readOnlyHint": True, "openWorldHint": False},
    "orders_customer_note": {"title": "Read an order's customer note", "readOnlyHint": True, "openWorldHint": False},
    "orders_refund_eligibility": {"title": "Refund eligibility", "readOnlyHint": True, "openWorldHint": False},
    "orders_refund_create": {
        "title": "Refund an order",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    },
    "approvals_status": {"title": "Approval status", "readOnlyHint": True, "openWorldHint": False},
    "approvals_mine": {"title": "My approval cards", "readOnlyHint": True, "openWorldHint": False},
    "approvals_cancel": {
        "title": "Cancel an approval request",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    },
}
"""Every hint on the wire, exactly: what is declared is sent, and nothing undeclared appears."""


def _validator(tool: Tool) -> Draft202012Validator:
    schema = tool.output_schema
    assert schema is not None, f"{tool.name} is listed without an outputSchema"
    assert schema["type"] == "object"  # required at the root through 2025-11-25
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _conforms(tool: Tool, result: CallToolResult) -> None:
    errors = sorted(_validator(tool).iter_errors(payload(result)), key=str)
    assert not errors, f"{tool.name} answered outside its outputSchema: {errors[0].message}"


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_every_result_of_every_demo_tool_conforms_to_its_listed_output_schema(
    redis: Redis, mcp_url: str, mode: str
) -> None:
    """Each tool is called once to succeed and once to be refused; both structured results validate."""
    token = await make_key(redis, roles=("staff", "support"))
    async with agent(mcp_url, token, mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == set(CALLS), "a listed tool is missing from CALLS (or the reverse)"
        card_id = ""
        for name, (good, bad) in CALLS.items():
            if name in ("approvals_status", "approvals_cancel"):
                good = {"card_id": card_id}
            succeeded = await client.call_tool(name, good)
            assert not succeeded.is_error, (name, payload(succeeded))
            _conforms(tools[name], succeeded)
            card_id = payload(succeeded).get("card_id", card_id)
            refused = await client.call_tool(name, bad)
            assert refused.is_error, (name, payload(refused))
            _conforms(tools[name], refused)
        assert card_id.startswith("crd_")


async def test_a_result_outside_the_schema_is_caught_by_the_check(redis: Redis, mcp_url: str) -> None:
    """The check above can fail: a result with a field of the wrong type does not validate."""
    token = await make_key(redis)
    async with agent(mcp_url, token) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("rooms_list", {})
    broken = payload(result)
    broken["rooms"][0]["floor"] = "third"
    assert not _validator(tools["rooms_list"]).is_valid(broken)
    assert not _validator(tools["rooms_list"]).is_valid(
        {"error": {"code": "MADE_UP", "message": "", "retryable": False}}
    )


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_annotations_say_what_each_tool_declares_and_nothing_else(redis: Redis, mcp_url: str, mode: str) -> None:
    """Reads are read-only; writes carry their declared destructiveness, idempotence and closed world."""
    token = await make_key(redis, roles=("staff", "support"))
    async with agent(mcp_url, token, mode) as client:
        tools = (await client.list_tools()).tools
    listed = {
        tool.name: tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
        for tool in tools
    }
    assert listed == ANNOTATIONS


async def test_modern_tool_lists_are_private_and_fresh_for_the_registry_poll_interval(
    redis: Redis, mcp_url: str
) -> None:
    """On 2026-07-28 a catalog is never shared across callers and is kept as long as it cannot change."""
    token = await make_key(redis)
    async with agent(mcp_url, token, MODERN) as client:
        listed = await client.list_tools()
    assert {"ttl_ms", "cache_scope"} <= listed.model_fields_set
    # The test gateway polls the registry every 0.2 s (tests/support/services.py).
    assert (listed.cache_scope, listed.ttl_ms) == ("private", 200)
