"""Which shape a write proposal is answered in, for each protocol era and each way a client can declare tasks.

A task is answered in the shape of the era the request speaks, and the capability is read per era: the
2026-07-28 tasks extension declared at a 2025-11-25 ``initialize`` (as the MCP Inspector CLI does) does
not make that session's answers 2026 shapes, which the SDK's 2025 serializer refused (``-32603``) after
the card was filed. Each case goes through a raw JSON-RPC exchange and, where the official client can
declare it, through the SDK's `Client`; every answer is one the client can read, and it names the card
that was filed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client import ClientExtension
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.mcp.tasks import TASKS_EXTENSION
from gateway.runtime.app import create_app
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import LEGACY, MODERN, make_key, payload
from tests.support.services import Backend, gateway_settings
from tests.support.task_clients import task_agent

pytestmark = pytest.mark.anyio

HANDSHAKE = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def _booking(day: str) -> dict[str, Any]:
    return {"room_id": "room-eos", "date": day, "start": "10:00", "end": "10:30", "title": "Era check"}


def _messages(answer: httpx.Response) -> list[Any]:
    if answer.headers["content-type"].startswith("application/json"):
        return [answer.json()]
    lines = answer.text.splitlines()
    return [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ") and line != "data: "]


def _only_result(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    [message] = [m for m in _messages(answer) if "id" in m]
    assert "error" not in message, message  # the bug: -32603 "Handler returned an invalid result"
    result: dict[str, Any] = message["result"]
    return result


async def _filed(redis: Redis, card_id: str) -> None:
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.PENDING


def _receipt_card(result: dict[str, Any]) -> str:
    """The card id of a receipt (a plain ``CallToolResult`` with the pending card)."""
    assert "task" not in result and result.get("resultType", "complete") == "complete", result
    structured = result["structuredContent"]
    assert structured["status"] == "PENDING"
    return str(structured["card_id"])


async def _handshake_call(mcp_url: str, token: str, *, declare: bool, task: bool, day: str) -> dict[str, Any]:
    """A 2025-11-25 session, initialized with or without the tasks extension, then one ``tools/call``."""
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if declare else {}
    client = {"protocolVersion": HANDSHAKE, "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "1"}}
    headers = {"authorization": f"Bearer {token}", "accept": ACCEPT}
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        opened = await http.post(mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": client})
        assert opened.status_code == 200, opened.text
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": HANDSHAKE}
        initialized = await http.post(mcp_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                      headers=session)  # fmt: skip
        assert initialized.status_code == 202
        params: dict[str, Any] = {"name": "rooms_book", "arguments": _booking(day)}
        if task:
            params["task"] = {"ttl": 60_000}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        answer = await http.post(mcp_url, json=call, headers=session)
        await http.delete(mcp_url, headers=session)
    return _only_result(answer)


async def _modern_call(mcp_url: str, token: str, *, declare: bool, task: bool, day: str) -> dict[str, Any]:
    """One 2026-07-28 ``tools/call``, declaring the tasks extension in its own capabilities or not."""
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if declare else {}
    meta = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_CAPABILITIES_META_KEY: capabilities}
    params: dict[str, Any] = {"name": "rooms_book", "arguments": _booking(day), "_meta": meta}
    if task:
        params["task"] = {"ttl": 60_000}
    headers = {"authorization": f"Bearer {token}", "accept": ACCEPT, "mcp-protocol-version": MODERN,
               "mcp-method": "tools/call", "mcp-name": "rooms_book"}  # fmt: skip
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        answer = await http.post(mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    return _only_result(answer)


# (declares the extension, carries the 2025 `task` parameter) -> the answer's shape
HANDSHAKE_CASES = [
    (False, False, "receipt"),
    (True, False, "receipt"),  # the Inspector CLI's default: extension at initialize, a plain call
    (False, True, "experimental"),
    (True, True, "experimental"),
]
MODERN_CASES = [
    (False, False, "receipt"),
    (True, False, "extension"),
    (False, True, "receipt"),  # the 2025 `task` parameter means nothing in 2026-07-28
    (True, True, "extension"),
]


@pytest.mark.parametrize(("declare", "task", "shape"), HANDSHAKE_CASES)
async def test_a_handshake_era_proposal_is_answered_in_a_2025_shape_however_tasks_were_declared(
    redis: Redis, mcp_url: str, declare: bool, task: bool, shape: str
) -> None:
    """2025-11-25, raw: a receipt, or ``{"task": ...}`` for a task-augmented call; never a 2026 task."""
    token = await make_key(redis, roles=("staff",))
    day = f"2027-03-{10 + 2 * declare + task:02d}"
    result = await _handshake_call(mcp_url, token, declare=declare, task=task, day=day)
    if shape == "receipt":
        card_id = _receipt_card(result)
    else:
        assert set(result) == {"task"} and result["task"]["status"] == "working", result
        assert "ttl" in result["task"] and "ttlMs" not in result["task"]
        card_id = result["task"]["taskId"]
    await _filed(redis, card_id)


@pytest.mark.parametrize(("declare", "task", "shape"), MODERN_CASES)
async def test_a_2026_era_proposal_is_a_task_only_when_that_request_declares_the_extension(
    redis: Redis, mcp_url: str, declare: bool, task: bool, shape: str
) -> None:
    """2026-07-28, raw: the extension declared in the request's own capabilities gives ``resultType: task``."""
    token = await make_key(redis, roles=("staff",))
    day = f"2027-04-{10 + 2 * declare + task:02d}"
    result = await _modern_call(mcp_url, token, declare=declare, task=task, day=day)
    if shape == "receipt":
        card_id = _receipt_card(result)
    else:
        assert result["resultType"] == "task" and result["status"] == "working", result
        assert "ttlMs" in result and "task" not in result
        card_id = result["taskId"]
    await _filed(redis, card_id)


class _DeclaredTasks(ClientExtension):
    """The tasks extension declared with no result claim: the SDK client then advertises it in every era,
    as the Inspector CLI does at its 2025-11-25 ``initialize``."""

    identifier = TASKS_EXTENSION


@asynccontextmanager
async def _client(mcp_url: str, token: str, mode: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        transport = streamable_http_client(mcp_url, http_client=http)
        async with Client(transport, mode=mode, extensions=[_DeclaredTasks()]) as client:  # type: ignore[arg-type]
            yield client


async def test_the_sdk_client_declaring_the_extension_at_initialize_gets_the_receipt(
    redis: Redis, mcp_url: str
) -> None:
    """The official client, 2025-11-25, extension declared at initialize, a plain call: the receipt."""
    token = await make_key(redis, roles=("staff",))
    async with _client(mcp_url, token, LEGACY) as client:
        declared = client.session._build_capabilities(HANDSHAKE).extensions  # what its initialize sent
        assert declared is not None and TASKS_EXTENSION in declared
        result = await client.call_tool("rooms_book", _booking("2027-03-20"))
    assert result.is_error is False
    answer = payload(result)
    assert answer["status"] == "PENDING"
    await _filed(redis, answer["card_id"])


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_the_sdk_client_following_tasks_gets_its_eras_task(redis: Redis, mcp_url: str, era: str) -> None:
    """The official client following tasks in each era gets that era's task shape, bound to a filed card."""
    token = await make_key(redis, roles=("staff",))
    async with task_agent(mcp_url, token, era) as agent:
        created = await agent.propose("rooms_book", _booking("2027-03-21" if era == MODERN else "2027-03-22"))
    if era == MODERN:
        assert created["resultType"] == "task"
    else:
        assert set(created) == {"task"}
    await _filed(redis, agent.task_id(created))


@pytest.fixture
def receipts_only_url(redis_url: str, backends: dict[str, Backend], expenses: Backend) -> Iterator[str]:
    """A gateway whose deployment chose ``write_task_support = "forbidden"``."""
    settings = replace(gateway_settings(redis_url, backends, expenses=expenses), write_task_support="forbidden")
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        yield f"{base}/mcp"


@pytest.mark.parametrize("era", [MODERN, LEGACY])
async def test_with_write_tasks_forbidden_a_client_asking_for_a_task_gets_the_receipt_at_once(
    redis: Redis, receipts_only_url: str, era: str
) -> None:
    """``forbidden``: a client that asks for a task in either era gets the receipt (its card filed), write
    tools are listed ``taskSupport: forbidden``, and the 2025 handshake advertises no task support."""
    token = await make_key(redis, roles=("staff",))
    async with task_agent(receipts_only_url, token, era) as agent:
        if era == LEGACY:  # `execution` and the tasks capability are 2025-11-25 fields
            listed = {tool.name: tool for tool in (await agent.client.list_tools()).tools}
            execution = listed["rooms_book"].execution
            assert execution is not None and execution.task_support == "forbidden"
            capabilities = agent.client.session.initialize_result
            assert capabilities is not None and capabilities.capabilities.tasks is None
        answer = await agent.propose("rooms_book", _booking("2027-03-23" if era == MODERN else "2027-03-24"))
    card_id = _receipt_card(answer)
    await _filed(redis, card_id)
