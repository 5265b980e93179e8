"""Two gateway replicas on one Redis, behind a balancer: what they share, and how sessions behave.

Each replica is its own app (its own Redis clients, limiter, catalog and session manager) under a
real uvicorn; the agents are real MCP clients whose HTTP goes through `tests.support.balancer`,
the admins real HTTP clients of each replica's admin API. Nothing is shared but Redis, so whatever
holds here holds for replicas in separate processes or on separate machines.

What the tests pin down:

* proposals: identical proposals sent to both replicas at once make one card (the dedupe key is in
  Redis), and two admins approving one card on two replicas at the same moment make one transition;
  the other admin gets 409 CONFLICT, audited;
* sessions of the 2025-11-25 era live in the replica that opened them: another replica answers
  their id with the spec's 404, so a client re-initialises, and a balancer must route by
  ``Mcp-Session-Id`` (sticky); the 2026-07-28 era opens no session and any replica serves any request;
* ``notifications/tools/list_changed`` reaches a session on one replica when an adapter is accepted
  on the other (every replica watches the registry's version in Redis, see `gateway.registry.live`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from redis.asyncio import Redis

from backends.expenses import expenses_manifest
from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.limits.budgets import Budget, Limits
from gateway.principal import KeyKind
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import LEGACY, MODERN, make_key, payload
from tests.support.balancer import Balancer
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

GENEROUS = Limits(proposals=Budget(per_minute=60_000, burst=1_000), reads=Budget(per_minute=60_000, burst=1_000))
RACES = 8
"""Cards two admins race to approve, one race per card."""


@pytest.fixture(scope="module", name="redis_url")
def quiet_database(quiet_redis_url: str) -> str:
    """A database no worker drains: approved cards stay APPROVED, so a race's outcome can be read."""
    return quiet_redis_url


@pytest.fixture(scope="module")
def replicas(quiet_redis_url: str, backends: dict[str, Backend], expenses: Backend) -> Iterator[list[str]]:
    """Two gateways on one Redis database; their base URLs."""
    settings = dataclasses.replace(gateway_settings(quiet_redis_url, backends, expenses=expenses),
                                   limits=GENEROUS, run_worker=False)  # fmt: skip
    with ExitStack() as stack:
        yield [stack.enter_context(serve_app_in_thread(create_app(settings), lifespan=True)) for _ in range(2)]


@asynccontextmanager
async def balanced(
    replicas: list[str], token: str, *, mode: str, sticky: bool, message_handler: Any = None
) -> AsyncIterator[tuple[Client, Balancer]]:
    """A real MCP client whose every HTTP request goes through a `Balancer` over `replicas`."""
    balancer = Balancer(replicas, sticky=sticky)
    headers = {"authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, transport=balancer, timeout=10) as http:
        transport = streamable_http_client(f"{replicas[0]}/mcp", http_client=http)
        async with Client(transport, mode=mode, message_handler=message_handler) as client:  # type: ignore[arg-type]
            yield client, balancer


def _booking(day: str) -> dict[str, str]:
    return {"room_id": "room-eos", "date": day, "start": "09:00", "end": "10:00", "title": "Replicas"}


async def test_identical_proposals_sent_to_both_replicas_at_once_make_one_card(
    redis: Redis, replicas: list[str]
) -> None:
    """Six identical bookings, three through each replica, all at once: one card, and every receipt
    names it; exactly one receipt is the new card, the others say an identical request is open."""
    token = await make_key(redis)
    receipts: list[dict[str, Any]] = []

    async def propose() -> None:
        async with balanced(replicas, token, mode=MODERN, sticky=False) as (client, _):
            receipts.append(payload(await client.call_tool("rooms_book", _booking("2034-03-01"))))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(propose)
    assert len({receipt["card_id"] for receipt in receipts}) == 1
    assert sorted(bool(receipt.get("existing")) for receipt in receipts) == [False] + [True] * 5
    assert [card.card_id for card in await RedisLedger(redis).recent()] == [receipts[0]["card_id"]]


async def test_two_admins_approving_one_card_on_two_replicas_at_once_make_one_transition(
    redis: Redis, replicas: list[str]
) -> None:
    """For each of RACES cards, Bob approves on one replica while Carol approves on the other, released
    together: one answer is 200 APPROVED by its admin alone, the other 409 CONFLICT with the card as
    the winner left it, and the loser's refusal is audited."""
    token = await make_key(redis)
    admins = [await make_key(redis, kind=KeyKind.ADMIN, subject=f"{name}@acme.example", roles=("approver",))
              for name in ("bob", "carol")]  # fmt: skip
    ledger = RedisLedger(redis)
    winners: list[str] = []
    async with balanced(replicas, token, mode=MODERN, sticky=False) as (client, _):
        card_ids = [payload(await client.call_tool("rooms_book", _booking(f"2034-04-{day:02d}")))["card_id"]
                    for day in range(1, RACES + 1)]  # fmt: skip
    for card_id in card_ids:
        card = await ledger.get(card_id)
        assert card is not None and card.state is CardState.PENDING
        body = {"version": card.version, "args_hash": card.args_hash, "comment": "ok"}
        with anyio.fail_after(10):
            answers = await _race(
                [f"{replica}/admin/api/cards/{card_id}/approve" for replica in replicas], admins, body
            )
        assert sorted(answer.status_code for answer in answers) == [200, 409], [a.text for a in answers]
        won, lost = sorted(answers, key=lambda answer: answer.status_code)
        assert won.json()["card"]["state"] == "APPROVED"
        assert lost.json()["error"]["code"] == "CONFLICT" and lost.json()["card"]["state"] == "APPROVED"
        card = await ledger.get(card_id)
        assert card is not None and card.state is CardState.APPROVED and len(card.approvers) == 1
        assert lost.json()["card"]["approvals"]["by"] == list(card.approvers)
        winners.append(card.approvers[0])
    audited = [e for e in await RedisStreamAuditSink(redis).recent(200) if e.action == "card.approve"]
    for card_id, winner in zip(card_ids, winners, strict=True):
        of_card = [e for e in audited if e.extra.get("card_id") == card_id]
        assert sorted((e.outcome, e.code, e.subject == winner) for e in of_card) == [
            ("deny", "CONFLICT", False),
            ("ok", "", True),
        ]


async def _race(urls: list[str], tokens: list[str], body: dict[str, Any]) -> list[httpx.Response]:
    """POST `body` to each URL with its token, the requests released together once all are connected."""
    start = anyio.Event()
    answers: list[httpx.Response] = []

    async def post(url: str, token: str) -> None:
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
            await http.get(url.split("/admin/")[0] + "/healthz")  # the connection is open before the race
            await start.wait()
            answers.append(await http.post(url, json=body))

    async with anyio.create_task_group() as group:
        for url, token in zip(urls, tokens, strict=True):
            group.start_soon(post, url, token)
        await anyio.sleep(0.1)
        start.set()
    return answers


async def test_a_session_is_unknown_to_the_other_replica_which_answers_404_so_the_client_initializes_again(
    redis: Redis, replicas: list[str]
) -> None:
    """A 2025-11-25 session opened on replica A: its id is served on A; on B the same request answers
    404 (the spec's answer to an unknown session, telling the client to initialize again), and a new
    session initialized on B is served there."""
    token = await make_key(redis)
    headers = {"authorization": f"Bearer {token}", **_HEADERS}
    async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
        opened = await http.post(f"{replicas[0]}/mcp", json=_INITIALIZE)
        assert opened.status_code == 200
        session = {"mcp-session-id": opened.headers["mcp-session-id"]}
        assert (await http.post(f"{replicas[0]}/mcp", json=_INITIALIZED, headers=session)).status_code == 202
        on_a = await http.post(f"{replicas[0]}/mcp", json=_PING, headers=session)
        on_b = await http.post(f"{replicas[1]}/mcp", json=_PING, headers=session)
        reopened = await http.post(f"{replicas[1]}/mcp", json=_INITIALIZE)
        again = {"mcp-session-id": reopened.headers["mcp-session-id"]}
        assert (await http.post(f"{replicas[1]}/mcp", json=_INITIALIZED, headers=again)).status_code == 202
        on_b_again = await http.post(f"{replicas[1]}/mcp", json=_PING, headers=again)
    assert on_a.status_code == 200 and on_b_again.status_code == 200
    assert on_b.status_code == 404 and on_b.json()["error"]["message"] == "Session not found"


async def test_2025_sessions_need_a_sticky_balancer_and_the_2026_era_needs_none(
    redis: Redis, replicas: list[str]
) -> None:
    """Behind a round-robin balancer a 2025-11-25 session breaks on its first request to the other
    replica (the 404 above, which the SDK raises as the server's "Session not found"); behind a balancer sticky on
    ``Mcp-Session-Id`` it is served throughout, by one replica. The 2026-07-28 era alternates replicas
    request by request and every call is served."""
    token = await make_key(redis)
    with anyio.fail_after(30):
        lost = pytest.RaisesExc(MCPError, check=lambda error: error.error.message == "Session not found")
        with pytest.RaisesGroup(lost, allow_unwrapped=True, flatten_subgroups=True):
            async with balanced(replicas, token, mode=LEGACY, sticky=False) as (client, _):
                for _ in range(4):
                    await client.call_tool("rooms_list", {})
        async with balanced(replicas, token, mode=LEGACY, sticky=True) as (client, sticky):
            assert not any([(await client.call_tool("rooms_list", {})).is_error for _ in range(6)])
        assert sorted(sticky.served)[0] == 0  # one replica served the whole session
        async with balanced(replicas, token, mode=MODERN, sticky=False) as (client, alternating):
            assert not any([(await client.call_tool("rooms_list", {})).is_error for _ in range(6)])
            assert len((await client.list_tools()).tools) > 0
        assert min(alternating.served) >= 3  # both replicas served calls


async def test_an_adapter_accepted_on_one_replica_is_announced_to_sessions_on_the_other(
    redis: Redis, replicas: list[str], expenses: Backend
) -> None:
    """A 2025-11-25 session open on replica B gets ``notifications/tools/list_changed`` when an admin
    accepts a registered adapter on replica A, and B then lists the adapter's tools."""
    service = await make_key(redis, kind=KeyKind.SERVICE, subject="expenses-svc", org="acme", roles=())
    admin = await make_key(redis, kind=KeyKind.ADMIN, subject="root@acme.example", roles=("registry", "approver"))
    token = await make_key(redis)
    received: list[str] = []

    async def on_message(message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method:
            received.append(method)

    async with httpx.AsyncClient(timeout=10) as http:
        try:
            async with balanced(replicas[1:], token, mode=LEGACY, sticky=True, message_handler=on_message) as (
                client,
                _,
            ):
                assert "expenses_list" not in {tool.name for tool in (await client.list_tools()).tools}
                registered = await http.put(f"{replicas[0]}/registry/api/adapters/expenses",
                                            json=expenses_manifest(expenses.url),
                                            headers={"authorization": f"Bearer {service}"})  # fmt: skip
                accepted = await http.post(f"{replicas[0]}/admin/api/adapters/expenses/accept",
                                           json={"hash": registered.json()["adapter"]["proposed_hash"]},
                                           headers={"authorization": f"Bearer {admin}"})  # fmt: skip
                assert accepted.status_code == 200, accepted.text
                with anyio.fail_after(10):
                    while "notifications/tools/list_changed" not in received:
                        await anyio.sleep(0.05)
                assert "expenses_list" in {tool.name for tool in (await client.list_tools()).tools}
        finally:
            removal = {"authorization": f"Bearer {admin}"}
            await http.delete(f"{replicas[0]}/admin/api/adapters/expenses", headers=removal)


_HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
_INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
_PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
