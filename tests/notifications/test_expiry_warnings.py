"""Approvers hear of a card about to expire undecided: once per card and webhook, never for a decided one.

The rule (`expiring`) is checked over generated cards; the scan (`ExpiryWarner`) against a real Redis
ledger; the whole path (a real gateway under uvicorn, its background loops, a real receiver) with a
tool whose decision window is a few seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis

from adapters.rooms import TOOLS as ROOM_TOOLS
from backends.serve import serve_app_in_thread
from gateway.cards.card import CardState
from gateway.cards.contract import Proposal
from gateway.config.file import NotificationsSection
from gateway.notifications.expiry_warnings import ExpiryWarner, expiring
from gateway.notifications.message import NotificationEvent, NotificationSettings, Webhook
from gateway.runtime.app import create_app
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.notification_outbox import RedisNotificationOutbox
from tests.support.agents import agent, make_key, payload
from tests.support.cards import a_card
from tests.support.receiver import Receiver
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

SECRET = "webhook-secret-0123456789"


@given(
    state=st.sampled_from(CardState),
    window=st.integers(1, 10**9),
    elapsed=st.integers(-(10**6), 2 * 10**9),
    warn=st.integers(-1000, 10**9),
)
def test_a_card_is_expiring_only_while_pending_and_within_both_bounds_of_its_deadline(
    state: CardState, window: int, elapsed: int, warn: int
) -> None:
    card = replace(a_card(), state=state, created_ms=1_000, decide_by_ms=1_000 + window)
    now = 1_000 + elapsed
    left = card.decide_by_ms - now
    assert expiring(card, now_ms=now, warn_ms=warn) == (
        state is CardState.PENDING and warn > 0 and 0 < left <= warn and left <= window // 2
    )


@given(window=st.integers(2, 10**9), warn=st.integers(1, 10**9), a=st.integers(0, 10**9), b=st.integers(0, 10**9))
def test_once_expiring_a_pending_card_stays_expiring_until_its_deadline(window: int, warn: int, a: int, b: int) -> None:
    """Monotone in time: a scan that missed the first moment still finds the card on a later one."""
    card = replace(a_card(), state=CardState.PENDING, created_ms=0, decide_by_ms=window)
    early, late = sorted((a % window, b % window))
    if expiring(card, now_ms=early, warn_ms=warn):
        assert expiring(card, now_ms=late, warn_ms=warn)


def test_expiring_is_an_event_a_webhook_hears_of_by_default_and_can_be_left_out() -> None:
    section = NotificationsSection.model_validate(
        {"webhooks": {"all": {"url": "https://h/a", "secret_env": "S"},
                      "few": {"url": "https://h/b", "secret_env": "S", "events": ["failed"]}}}
    )  # fmt: skip
    hooks = {hook.name: hook for hook in section.resolve({"S": "x"}).webhooks}
    assert NotificationEvent.EXPIRING in hooks["all"].events
    assert NotificationEvent.EXPIRING not in hooks["few"].events
    assert section.resolve({"S": "x"}).expiry_warning_seconds == 900.0


def _proposal(n: int, *, decide_within_ms: int) -> Proposal:
    return Proposal(
        tool="rooms.book", tool_version="1", arguments={"n": n}, args_hash=f"h{n}", dedupe_key=f"d{n}",
        requester_subject="bot", requester_org="acme", requester_key_id="k", requester_roles=frozenset(),
        approvals_required=1, approver_role="approver", summary=f"s{n}", agent_text={},
        decide_within_ms=decide_within_ms, execute_within_ms=60_000,
    )  # fmt: skip


async def test_a_scan_announces_each_card_in_its_window_once_and_no_card_outside_it(quiet: Redis) -> None:
    outbox = RedisNotificationOutbox(quiet)
    hooks = [
        Webhook(name="ops", url="https://h/a", secret="s"),
        Webhook(name="failures", url="https://h/f", secret="s", events=frozenset({NotificationEvent.FAILED})),
        Webhook(name="globex", url="https://h/g", secret="s", orgs=frozenset({"globex"})),
    ]
    ledger = RedisLedger(quiet)
    warner = ExpiryWarner(ledger, queue=outbox, webhooks=hooks, console_url="https://gw", warn_ms=60_000)
    soon = (await ledger.propose(_proposal(1, decide_within_ms=6_000))).card
    later = (await ledger.propose(_proposal(2, decide_within_ms=600_000))).card
    decided = (await ledger.propose(_proposal(3, decide_within_ms=6_000))).card
    assert soon is not None and later is not None and decided is not None
    await ledger.reject(decided.card_id, admin="alice", reason="no")
    assert await warner.warn_due() == 0  # six seconds left: more than half the window
    await anyio.sleep(max(0.0, (soon.created_ms + 3_100 - await ledger.server_time_ms()) / 1000))
    assert await warner.warn_due() == 1
    assert await warner.warn_due() == 0  # the same card again: its id was enqueued already
    [queued] = await outbox.all()
    body = json.loads(queued.body)
    assert (queued.webhook, body["event"], body["card"]["card_id"]) == ("ops", "card.expiring", soon.card_id)
    assert body["card"]["decide_by_ms"] == soon.decide_by_ms


async def test_no_warner_is_built_when_nothing_would_be_sent(quiet: Redis) -> None:
    ledger, outbox = RedisLedger(quiet), RedisNotificationOutbox(quiet)
    failures = Webhook(name="f", url="https://h/f", secret="s", events=frozenset({NotificationEvent.FAILED}))
    assert ExpiryWarner.configured(ledger, outbox, NotificationSettings(webhooks=(failures,))) is None
    every = Webhook(name="all", url="https://h/a", secret="s")
    assert (
        ExpiryWarner.configured(ledger, outbox, NotificationSettings(webhooks=(every,), expiry_warning_seconds=0))
        is None
    )
    assert ExpiryWarner.configured(ledger, outbox, NotificationSettings(webhooks=(every,))) is not None


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    hook = Receiver()
    with serve_app_in_thread(hook.app()) as base:
        yield hook, f"{base}/hook"


async def test_an_approver_hears_a_card_is_about_to_expire_and_then_hears_nothing_more_of_it(
    redis_server_url: str, receiver: tuple[Receiver, str], backends: dict[str, Backend]
) -> None:
    """A real gateway: a booking tool with a four-second decision window; its card is announced as
    pending, then (two seconds before its decide-by) as expiring, once, signed, with the card's link."""
    hook, url = receiver
    redis_url = urlunsplit(urlsplit(redis_server_url)._replace(path="/10"))
    client = Redis.from_url(redis_url)
    await client.flushdb()
    hasty = [
        replace(tool, approval=replace(tool.approval, decide_within_seconds=4.0)) if tool.name == "rooms_book" else tool
        for tool in ROOM_TOOLS
    ]
    settings = replace(
        gateway_settings(redis_url, backends),
        run_worker=False,
        notifications=NotificationSettings(
            console_url="https://gw.example", webhooks=(Webhook(name="ops", url=url, secret=SECRET),), poll_seconds=0.05
        ),
    )
    try:
        token = await make_key(client, roles=("staff",))
        with serve_app_in_thread(create_app(settings, tools=hasty), lifespan=True) as base:
            async with agent(f"{base}/mcp", token) as mcp:
                booking = {"room_id": "room-eos", "date": "2026-12-21", "start": "09:00", "end": "10:00",
                           "title": "Planning"}  # fmt: skip
                receipt = payload(await mcp.call_tool("rooms_book", booking))
            deadline = time.monotonic() + 10
            while not any(json.loads(r.body)["event"] == "card.expiring" for r in hook.received):
                assert time.monotonic() < deadline, [json.loads(r.body)["event"] for r in hook.received]
                await anyio.sleep(0.05)
            await anyio.sleep(0.5)  # a few more scans while the card is still in its window
        events = [json.loads(r.body) for r in hook.received]
        assert [(e["event"], e["card"]["card_id"]) for e in events] == [
            ("card.pending", receipt["card_id"]),
            ("card.expiring", receipt["card_id"]),
        ]
        assert events[1]["console_url"] == f"https://gw.example/admin/#/cards/{receipt['card_id']}"
    finally:
        await client.flushdb()
        await client.aclose()
