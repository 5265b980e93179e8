"""Write proposals followed as MCP tasks, end to end: a real uvicorn gateway with its worker, real Redis,
the SDK's client in both protocol eras (tests.support.task_clients), an administrator deciding through
the admin API, and the real rooms backend receiving the write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import Card, CardState
from gateway.mcp.tasks import TASKS_EXTENSION
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import LEGACY, MODERN, make_key, payload
from tests.support.services import Backend, gateway_settings
from tests.support.task_clients import TaskAgent, task_agent

pytestmark = pytest.mark.anyio

ERAS = [MODERN, LEGACY]
DAYS = {MODERN: "2027-01-11", LEGACY: "2027-01-12"}
"""One booking day per era, so a write in one test never collides with another's on the real backend."""


def _booking(day: str, start: str = "09:00") -> dict[str, Any]:
    return {"room_id": "room-eos", "date": day, "start": start, "end": start[:2] + ":30", "title": "Planning"}


async def _card(redis: Redis, card_id: str) -> Card:
    card = await RedisLedger(redis).get(card_id)
    assert card is not None
    return card


async def _decide(redis: Redis, mcp_url: str, card_id: str, verb: str, body: dict[str, Any]) -> None:
    """An administrator's decision through the admin API of the same gateway."""
    token = await make_key(redis, subject="root@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=mcp_url.removesuffix("/mcp"), headers=headers, timeout=10) as http:
        answer = await http.post(f"/admin/api/cards/{card_id}/{verb}", json=body)
    assert answer.status_code == 200, answer.text


async def _approve(redis: Redis, mcp_url: str, card_id: str) -> None:
    card = await _card(redis, card_id)
    await _decide(redis, mcp_url, card_id, "approve", {"version": card.version, "args_hash": card.args_hash})


async def _task_audit(redis: Redis) -> list[Any]:
    return [e for e in await RedisStreamAuditSink(redis).recent(200) if e.action.startswith("task.")]


def _bookings(backend: Backend, day: str) -> list[Any]:
    service = backend.app.state.service
    return [b for b in service.bookings.values() if b.date == day and b.status == "active"]


def _created(agent: TaskAgent, answer: dict[str, Any]) -> dict[str, Any]:
    """The task fields of a CreateTaskResult: flat beside resultType (extension), or under `task` (2025)."""
    if agent.era == MODERN:
        assert answer["resultType"] == "task" and "task" not in answer and "result" not in answer
        return answer
    assert set(answer) == {"task"}
    return dict(answer["task"])


async def _error(call: Any) -> MCPError:
    with pytest.raises(MCPError) as raised:
        await call
    return raised.value


@pytest.mark.parametrize("era", ERAS)
async def test_a_proposal_followed_as_a_task_completes_with_the_writes_result(
    redis: Redis, mcp_url: str, backends: dict[str, Backend], era: str
) -> None:
    """propose -> a working task bound to the card, durable at once -> an administrator approves ->
    the worker runs the write -> the task is completed with the card receipt and its reference."""
    token = await make_key(redis, roles=("staff",))
    async with task_agent(mcp_url, token, era) as agent:
        task = _created(agent, await agent.propose("rooms_book", _booking(DAYS[era])))
        card = await _card(redis, task["taskId"])  # the task id is the card id, stored before the answer
        assert (task["status"], card.state) == ("working", CardState.PENDING)
        assert "approval" in task["statusMessage"]
        ttl = task["ttlMs"] if era == MODERN else task["ttl"]
        assert ttl >= card.decide_by_ms - card.created_ms + card.execute_within_ms > 0
        assert (await agent.get(card.card_id))["status"] == "working"
        assert _bookings(backends["rooms"], DAYS[era]) == []  # nothing is sent before a person approves
        await _approve(redis, mcp_url, card.card_id)
        done = await agent.settled(card.card_id)
        final = await _card(redis, card.card_id)
        assert (done["status"], final.state) == ("completed", CardState.SUCCEEDED)
        if era == MODERN:
            result = done["result"]  # SEP-2663: tasks/get inlines the call's result
        else:
            assert "result" not in done
            result = await agent.result(card.card_id)
            assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": card.card_id}
        assert result["isError"] is False
        assert result["structuredContent"]["status"] == "SUCCEEDED"
        assert result["structuredContent"]["reference"] == final.reference
        [booking] = _bookings(backends["rooms"], DAYS[era])
        assert booking.booking_id == final.reference
        # A finished write cannot be cancelled: an ack that changes nothing (extension), -32602 (2025).
        if era == MODERN:
            assert set(await agent.cancel(card.card_id)) <= {"resultType", "_meta"}
        else:
            refused = await _error(agent.cancel(card.card_id))
            assert refused.error.code == -32602 and refused.error.data["code"] == "CONFLICT"
        assert (await _card(redis, card.card_id)).state is CardState.SUCCEEDED
    gets = [e for e in await _task_audit(redis) if e.action == "task.get"]
    assert gets and all((e.outcome, e.subject, e.extra["task_id"]) == ("ok", "alice@acme.example", card.card_id)
                        for e in gets)  # fmt: skip


@pytest.mark.parametrize("era", ERAS)
async def test_a_rejected_proposal_is_completed_with_is_error_and_a_stable_code(
    redis: Redis, mcp_url: str, backends: dict[str, Backend], era: str
) -> None:
    """A rejection is a tool answer, not a protocol failure: completed + isError + REJECTED (the 2025-11-25
    revision calls an isError task failed, and that era says so); nothing reaches the backend."""
    day = DAYS[era].replace("-01-", "-02-")
    token = await make_key(redis, roles=("staff",))
    async with task_agent(mcp_url, token, era) as agent:
        task_id = _created(agent, await agent.propose("rooms_book", _booking(day)))["taskId"]
        await _decide(redis, mcp_url, task_id, "reject", {"reason": "the room is being painted"})
        done = await agent.settled(task_id)
        if era == MODERN:
            assert done["status"] == "completed"
            result = done["result"]
        else:
            assert done["status"] == "failed"
            result = await agent.result(task_id)
    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert (error["code"], error["retryable"]) == ("REJECTED", False)
    assert error["details"]["card"]["rejection"] == {"reason": "the room is being painted"}
    assert (await _card(redis, task_id)).state is CardState.REJECTED
    assert _bookings(backends["rooms"], day) == []


@pytest.mark.parametrize("era", ERAS)
async def test_tasks_cancel_cancels_the_card_and_the_task_reads_cancelled(redis: Redis, mcp_url: str, era: str) -> None:
    """tasks/cancel while the card waits for a decision cancels the card; the task is then cancelled."""
    token = await make_key(redis, roles=("staff",))
    async with task_agent(mcp_url, token, era) as agent:
        task_id = _created(agent, await agent.propose("rooms_book", _booking(DAYS[era], "11:00")))["taskId"]
        answer = await agent.cancel(task_id)
        if era == MODERN:
            assert set(answer) <= {"resultType", "_meta"}  # SEP-2663: an empty acknowledgement
        else:
            assert (answer["taskId"], answer["status"]) == (task_id, "cancelled")
        assert (await agent.get(task_id))["status"] == "cancelled"
        assert (await _card(redis, task_id)).state is CardState.CANCELLED
        if era == LEGACY:  # 2025-11-25: a terminal task cannot be cancelled again
            again = await _error(agent.cancel(task_id))
            assert again.error.code == -32602
            assert (await agent.result(task_id))["structuredContent"]["error"]["code"] == "CANCELLED"
    first = next(e for e in await _task_audit(redis) if e.action == "task.cancel")
    assert (first.outcome, first.subject, first.extra["cancelled"], first.extra["state"]) == (
        "ok", "alice@acme.example", "true", "CANCELLED",
    )  # fmt: skip


@pytest.mark.parametrize("era", ERAS)
async def test_another_principals_task_reads_as_not_found(redis: Redis, mcp_url: str, era: str) -> None:
    """Bob cannot read, cancel or list Alice's task: it answers exactly like a task that does not exist."""
    alice = await make_key(redis, roles=("staff",))
    bob = await make_key(redis, roles=("staff",), subject="bob@acme.example")
    async with task_agent(mcp_url, alice, era) as agent:
        task_id = _created(agent, await agent.propose("rooms_book", _booking(DAYS[era], "13:00")))["taskId"]
    missing = "crd_1_" + "0" * 32
    async with task_agent(mcp_url, bob, era) as other:
        refusals = [
            await _error(other.get(task_id)),
            await _error(other.cancel(task_id)),
            await _error(other.get(missing)),
        ]
        listed = await other.list()
    assert {(r.error.code, r.error.message, r.error.data["code"]) for r in refusals} == {
        (-32602, "Failed to retrieve task: Task not found", "NOT_FOUND")
    }
    assert [t["taskId"] for t in listed["tasks"]] == []
    assert (await _card(redis, task_id)).state is CardState.PENDING
    denied = [e for e in await _task_audit(redis) if e.outcome == "deny"]
    assert [(e.action, e.subject, e.code) for e in denied] == [
        ("task.get", "bob@acme.example", "NOT_FOUND"),
        ("task.cancel", "bob@acme.example", "NOT_FOUND"),
        ("task.get", "bob@acme.example", "NOT_FOUND"),
    ]
    async with task_agent(mcp_url, alice, era) as agent:
        assert [t["taskId"] for t in (await agent.list())["tasks"]] == [task_id]


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_without_task_support_gets_the_card_receipt_unchanged(
    redis: Redis, mcp_url: str, era: str
) -> None:
    """No task declared: the proposal answers with today's card receipt, followed with approvals_status;
    in the 2026 era tasks/* are refused with -32021 (the extension was not declared)."""
    token = await make_key(redis, roles=("staff",))
    async with task_agent(mcp_url, token, era, tasks=False) as agent:
        # A 2026-era client pinned to its version has not asked the server yet: ask it.
        capabilities = agent.client.server_capabilities
        if era == MODERN:
            discovered = await agent.client.session.send_discover(MODERN)
            capabilities = types.DiscoverResult.model_validate(discovered).capabilities
        tools = {tool.name: tool for tool in (await agent.client.list_tools()).tools}
        result = await agent.client.call_tool("rooms_book", _booking(DAYS[era], "15:00"))
        receipt = payload(result)
        status = payload(await agent.client.call_tool("approvals_status", {"card_id": receipt["card_id"]}))
        if era == MODERN:
            gated = await _error(agent.get(receipt["card_id"]))
            assert gated.error.code == -32021
            assert gated.error.data == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    assert result.is_error is False and receipt["status"] == "PENDING" and "approvals_status" in receipt["note"]
    assert "taskId" not in result.model_dump(by_alias=True) and "task" not in result.model_dump(by_alias=True)
    assert status["card_id"] == receipt["card_id"] and status["decision"] == "pending"
    if era == LEGACY:  # the handshake era advertises the experimental tasks, and which tools take them
        assert capabilities.tasks is not None and capabilities.tasks.requests is not None
        assert tools["rooms_book"].execution is not None and tools["rooms_book"].execution.task_support == "optional"
        assert tools["rooms_list"].execution is None
    else:  # the 2026 era, the extension only
        assert capabilities.extensions is not None and TASKS_EXTENSION in capabilities.extensions
        assert capabilities.tasks is None


@contextmanager
def _gateway(redis_url: str, backends: dict[str, Backend], expenses: Backend) -> Iterator[str]:
    """A gateway of its own (app, worker, HTTP server) on the test Redis, stopped on exit."""
    with serve_app_in_thread(
        create_app(gateway_settings(redis_url, backends, expenses=expenses)), lifespan=True
    ) as base:
        yield f"{base}/mcp"


@pytest.mark.slow
@pytest.mark.parametrize("era", ERAS)
async def test_a_task_outlives_the_gateway_that_made_it_and_is_read_by_another(
    redis: Redis, redis_url: str, mcp_url: str, backends: dict[str, Backend], expenses: Backend, era: str
) -> None:
    """The card is the task's state: a gateway that is stopped loses nothing, a gateway started after
    it (and another one running on the same Redis) read the same task and follow it to the end."""
    token = await make_key(redis, roles=("staff",))
    with _gateway(redis_url, backends, expenses) as first:
        async with task_agent(first, token, era) as agent:
            created = _created(agent, await agent.propose("rooms_book", _booking(DAYS[era], "17:00")))
    with _gateway(redis_url, backends, expenses) as restarted:
        async with task_agent(restarted, token, era) as agent:
            again = await agent.get(created["taskId"])
    assert (again["taskId"], again["status"], again["createdAt"]) == (
        created["taskId"],
        "working",
        created["createdAt"],
    )
    await _approve(redis, mcp_url, created["taskId"])
    async with task_agent(mcp_url, token, era) as agent:
        assert (await agent.settled(created["taskId"]))["status"] == "completed"
