"""Write proposals followed as MCP tasks, end to end: real uvicorn gateway with its worker, real Redis,
the SDK's client in both protocol eras, an administrator deciding through the admin API."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from gateway.card import Card
from gateway.principal import KeyKind
from gateway.store.ledger import RedisLedger
from tests.support.agents import LEGACY, MODERN, make_key
from tests.support.task_clients import task_agent

pytestmark = pytest.mark.anyio

ERAS = [MODERN, LEGACY]


def _booking(day: str) -> dict[str, Any]:
    return {"room_id": "room-eos", "date": day, "start": "09:00", "end": "10:00", "title": "Planning"}


async def _card(redis: Redis, card_id: str) -> Card:
    card = await RedisLedger(redis).get(card_id)
    assert card is not None
    return card


async def _decide(redis: Redis, mcp_url: str, card_id: str, verb: str, body: dict[str, Any]) -> None:
    token = await make_key(redis, subject="root@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
    base = mcp_url.removesuffix("/mcp")
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=f"{base}/admin/api", headers=headers, timeout=10) as http:
        answer = await http.post(f"/cards/{card_id}/{verb}", json=body)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("era", ERAS)
async def test_smoke(redis: Redis, mcp_url: str, era: str) -> None:
    token = await make_key(redis, roles=("staff",))
    async with task_agent(mcp_url, token, era) as agent:
        created = await agent.propose("rooms_book", _booking("2026-12-11"))
        print(created)
        task_id = agent.task_id(created)
        print(await agent.get(task_id))
        card = await _card(redis, task_id)
        await _decide(redis, mcp_url, task_id, "approve", {"version": card.version, "args_hash": card.args_hash})
        print(await agent.settled(task_id))
        if era == LEGACY:
            print(await agent.result(task_id))
        print(await agent.list())
