"""The MCP Inspector CLI, run as the README tells people to run it, against a real gateway.

The pinned Inspector (`tests.support.inspector_cli`) on the conformance suite's Node 22: in its default
mode (the 2025-11-25 handshake, declaring the 2026 tasks extension at initialize) and with
``--protocol-era modern``, it lists the tools, reads, proposes a booking and gets the card receipt,
and a refused key shows its reason. With ``CI`` set the test fails rather than skips when the
Inspector or Node cannot be had.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import anyio
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.runtime.app import create_app
from gateway.store.ledger.redis_ledger import RedisLedger
from tests.support.agents import make_key
from tests.support.cards import approve_as_admin
from tests.support.inspector_cli import Inspector, Ran, available_inspector
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

ERAS = {"default": (), "modern": ("--protocol-era", "modern")}
DAYS = {"default": "2027-05-10", "modern": "2027-05-11"}


def _booking(day: str) -> list[str]:
    return ["--method", "tools/call", "--tool-name", "rooms_book",
            "--tool-arg", "room_id=room-eos", f"date={day}", "start=11:00", "end=11:30", "title=Inspector"]  # fmt: skip


@pytest.fixture
def receipts_only_url(redis_url: str, backends: dict[str, Backend], expenses: Backend) -> Iterator[str]:
    """A gateway whose deployment chose ``write_task_support = "forbidden"``."""
    settings = replace(gateway_settings(redis_url, backends, expenses=expenses), write_task_support="forbidden")
    with serve_app_in_thread(create_app(settings), lifespan=True) as base:
        yield f"{base}/mcp"


@pytest.fixture(scope="module")
def inspector() -> Inspector:
    return available_inspector()


@pytest.mark.parametrize("era", list(ERAS))
async def test_the_inspector_cli_lists_and_reads(redis: Redis, mcp_url: str, inspector: Inspector, era: str) -> None:
    token = await make_key(redis, roles=("staff",))
    listed = inspector.run(mcp_url, token, *ERAS[era], "--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    assert {"rooms_book", "rooms_availability", "approvals_mine"} <= {t["name"] for t in listed.result()["tools"]}
    read = inspector.run(mcp_url, token, *ERAS[era], "--method", "tools/call", "--tool-name", "rooms_list")
    assert read.returncode == 0, read.stderr
    assert read.result()["isError"] is False


async def test_the_inspector_cli_in_its_default_mode_proposes_a_booking_and_gets_the_receipt(
    redis: Redis, mcp_url: str, inspector: Inspector
) -> None:
    """The default mode (2025-11-25, the tasks extension declared at initialize, a plain call): the card
    receipt at once, twice for the same proposal, one card. This was -32603 with the card filed anyway."""
    token = await make_key(redis, roles=("staff",))
    answers = [inspector.run(mcp_url, token, *_booking(DAYS["default"])) for _ in range(2)]
    for answer in answers:
        assert answer.returncode == 0, answer.stderr
    receipts = [answer.result()["structuredContent"] for answer in answers]
    assert receipts[0]["status"] == "PENDING" and receipts[0]["card_id"] == receipts[1]["card_id"]
    card = await RedisLedger(redis).get(receipts[0]["card_id"])
    assert card is not None and card.state is CardState.PENDING


async def test_the_inspector_cli_in_the_modern_era_gets_the_receipt_where_writes_are_not_tasks(
    redis: Redis, receipts_only_url: str, inspector: Inspector
) -> None:
    """``--protocol-era modern`` declares the tasks extension on every request and waits on a task; a
    deployment with ``write_task_support = "forbidden"`` answers the receipt at once."""
    token = await make_key(redis, roles=("staff",))
    answer = inspector.run(receipts_only_url, token, "--protocol-era", "modern", *_booking(DAYS["modern"]))
    assert answer.returncode == 0, answer.stderr
    receipt = answer.result()["structuredContent"]
    assert receipt["status"] == "PENDING"
    card = await RedisLedger(redis).get(receipt["card_id"])
    assert card is not None and card.state is CardState.PENDING


async def test_the_inspector_cli_in_the_modern_era_follows_the_task_until_a_person_decides(
    redis: Redis, mcp_url: str, inspector: Inspector
) -> None:
    """With ``write_task_support = "optional"`` (the default) the modern-era Inspector follows the proposal
    as a task: it returns once an administrator has approved and the worker has run the write."""
    token = await make_key(redis, roles=("staff",))
    day = "2027-05-12"
    async with anyio.create_task_group() as group:
        ran: list[Ran] = []

        async def propose() -> None:
            ran.append(await anyio.to_thread.run_sync(lambda: inspector.run(mcp_url, token, "--protocol-era",
                                                                             "modern", *_booking(day))))  # fmt: skip

        group.start_soon(propose)
        card_id = await _pending_card(redis, day)
        await approve_as_admin(redis, mcp_url.removesuffix("/mcp"), card_id)
    [answer] = ran
    assert answer.returncode == 0, answer.stderr
    result = answer.result()
    assert result["isError"] is False and result["structuredContent"]["status"] == "SUCCEEDED"
    card = await RedisLedger(redis).get(card_id)
    assert card is not None and card.state is CardState.SUCCEEDED


async def _pending_card(redis: Redis, day: str) -> str:
    """The id of the PENDING rooms_book card for `day`, once the Inspector's proposal has filed it (bounded)."""
    ledger = RedisLedger(redis)
    with anyio.fail_after(30):
        while True:
            for card in await ledger.recent(limit=50):
                if card.state is CardState.PENDING and card.arguments.get("date") == day:
                    return card.card_id
            await anyio.sleep(0.1)


async def test_the_inspector_cli_shows_why_a_key_was_refused(redis: Redis, mcp_url: str, inspector: Inspector) -> None:
    """A made-up key, default mode, ``--stored-auth-only`` (else the Inspector starts an interactive OAuth
    login on any 401): it fails and prints the gateway's sentence, not a bare HTTP status."""
    refused = inspector.run(mcp_url, "csk_agent_made-up", "--stored-auth-only", "--method", "tools/list")
    assert refused.returncode != 0
    assert "The bearer key was refused" in refused.stderr, refused.stderr


async def test_the_modern_era_inspector_cli_reports_only_the_status_of_a_refused_key(
    redis: Redis, mcp_url: str, inspector: Inspector
) -> None:
    """A known quirk of the Inspector 2.12 (documented in the README): with ``--protocol-era modern`` it reads
    a 401 during its version negotiation as "requires authorization" and does not show the body's reason."""
    refused = inspector.run(mcp_url, "csk_agent_made-up", *ERAS["modern"], "--stored-auth-only", "--method",
                            "tools/list")  # fmt: skip
    assert refused.returncode != 0
    assert "HTTP 401" in refused.stderr, refused.stderr
