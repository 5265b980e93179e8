"""Notification delivery: the Redis outbox, the delivery loop and a real receiver (Starlette under uvicorn).

The receiver fails the first deliveries; every attempt must be signed, carry the same id, and be
rescheduled on the doubling backoff; a receiver that holds every request must not slow a tool call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from redis.asyncio import Redis

from backends.serve import serve_app_in_thread
from gateway.audit.events import ListAuditSink
from gateway.cards.card import CardState
from gateway.cards.contract import Ledger, Proposal
from gateway.notifications.card_alerts import DELEGATED, AlertingLedger
from gateway.notifications.delivery import Notifier
from gateway.notifications.message import (
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Notification,
    NotificationEvent,
    NotificationSettings,
    Webhook,
    verify,
)
from gateway.outbound.webhook import WebhookPoster
from gateway.runtime.app import create_app
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.store.notification_outbox import RedisNotificationOutbox
from tests.support.agents import agent, make_key, payload
from tests.support.receiver import Receiver
from tests.support.services import Backend, gateway_settings

pytestmark = pytest.mark.anyio

SECRET = "webhook-secret-0123456789"


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    hook = Receiver()
    with serve_app_in_thread(hook.app()) as base:
        yield hook, f"{base}/hook"


def _note(n: int = 1) -> Notification:
    return Notification(id=f"ntf_{n:032x}", webhook="ops", body=json.dumps({"n": n}))


async def test_the_outbox_keeps_one_notification_per_id_and_leases_what_it_hands_out(quiet: Redis) -> None:
    outbox = RedisNotificationOutbox(quiet)
    assert await outbox.enqueue(_note())
    assert not await outbox.enqueue(_note())  # replayed enqueue: nothing new
    [taken] = await outbox.take(limit=10, lease_ms=60_000)
    assert taken == _note()
    assert await outbox.take(limit=10, lease_ms=60_000) == []  # leased: no second taker
    await outbox.reschedule(replace(taken, attempts=1), delay_ms=0)
    [again] = await outbox.take(limit=10, lease_ms=60_000)
    assert again.attempts == 1
    await outbox.finish(again.id)
    assert await outbox.pending() == 0
    assert not await outbox.enqueue(_note())  # delivered once: still deduplicated


async def test_a_receiver_that_fails_first_gets_signed_retries_with_one_id_on_a_doubling_backoff(
    quiet: Redis, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    hook.fail_first = 3
    audit = ListAuditSink()
    outbox = RedisNotificationOutbox(quiet)
    poster = WebhookPoster(timeout_seconds=5)
    notifier = Notifier(outbox, {"ops": Webhook(name="ops", url=url, secret=SECRET)}, poster, audit,
                        retry_base_ms=50, retry_cap_ms=150, max_attempts=10)  # fmt: skip
    await outbox.enqueue(_note())
    try:
        with anyio.fail_after(10):
            while not any(r.status == 200 for r in hook.received):
                await notifier.deliver_due()
                await anyio.sleep(0.02)
    finally:
        await poster.aclose()
    assert [r.status for r in hook.received] == [503, 503, 503, 200]
    assert {r.headers[ID_HEADER.lower()] for r in hook.received} == {_note().id}
    for request in hook.received:
        stamp = int(request.headers[TIMESTAMP_HEADER.lower()])
        assert request.body == _note().body
        assert verify(SECRET, stamp, request.body, request.headers[SIGNATURE_HEADER.lower()], now=int(time.time()))
    retries = [e for e in audit.events if e.action == "notification.retry"]
    assert [e.extra["retry_in_ms"] for e in retries] == ["50", "100", "150"]  # doubling, capped
    assert all(e.code == "UPSTREAM_UNAVAILABLE" for e in retries)
    [done] = [e for e in audit.events if e.action == "notification.delivered"]
    assert done.extra["attempts"] == "4"
    assert await outbox.pending() == 0


async def test_a_notification_is_abandoned_after_its_attempts_and_audited(
    quiet: Redis, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    hook.fail_first = 100
    audit = ListAuditSink()
    outbox = RedisNotificationOutbox(quiet)
    poster = WebhookPoster(timeout_seconds=5)
    notifier = Notifier(outbox, {"ops": Webhook(name="ops", url=url, secret=SECRET)}, poster, audit,
                        retry_base_ms=1, retry_cap_ms=1, max_attempts=3)  # fmt: skip
    await outbox.enqueue(_note())
    try:
        with anyio.fail_after(10):
            while await outbox.pending():
                await notifier.deliver_due()
                await anyio.sleep(0.01)
    finally:
        await poster.aclose()
    assert len(hook.received) == 3
    [abandoned] = [e for e in audit.events if e.action == "notification.abandoned"]
    assert (abandoned.code, abandoned.extra["attempts"]) == ("UPSTREAM_UNAVAILABLE", "3")


async def test_only_the_webhooks_of_the_cards_org_are_told_of_a_new_card(quiet: Redis) -> None:
    """The ledger wrapper enqueues after the acknowledged proposal, once per interested webhook."""
    outbox = RedisNotificationOutbox(quiet)
    hooks = [
        Webhook(name="acme", url="https://h/a", secret="s", orgs=frozenset({"acme"})),
        Webhook(name="globex", url="https://h/g", secret="s", orgs=frozenset({"globex"})),
        Webhook(name="failures", url="https://h/f", secret="s", events=frozenset({NotificationEvent.FAILED})),
    ]
    ledger = AlertingLedger(RedisLedger(quiet), queue=outbox, webhooks=hooks, console_url="https://gw")
    proposal = Proposal(
        tool="rooms.book", tool_version="1", arguments={"a": 1}, args_hash="h", dedupe_key="d",
        requester_subject="bot", requester_org="acme", requester_key_id="k", requester_roles=frozenset(),
        approvals_required=1, approver_role="approver", summary="s", agent_text={}, decide_within_ms=60_000,
        execute_within_ms=60_000,
    )  # fmt: skip
    created = await ledger.propose(proposal)
    again = await ledger.propose(proposal)  # the same open card: no second notification
    assert created.card is not None and again.card is not None and again.card.card_id == created.card.card_id
    [queued] = await outbox.all()
    assert queued.webhook == "acme"
    assert json.loads(queued.body)["card"]["card_id"] == created.card.card_id
    card = created.card
    approved = await ledger.approve(card.card_id, approver="carol", version=card.version, args_hash="h", comment="")
    assert approved.ok and approved.card is not None and approved.card.state is CardState.APPROVED
    assert len(await outbox.all()) == 1  # a person's decision notifies nobody: that person knows
    with pytest.raises(AttributeError):
        ledger.no_such_method  # noqa: B018


def test_every_ledger_method_is_the_wrappers_own_or_delegated_by_name() -> None:
    """Each method of the `Ledger` is either `AlertingLedger`'s own (it may announce) or named in `DELEGATED`, and
    `DELEGATED` names nothing else: a method added to the ledger cannot pass the wrapper unannounced by accident."""
    methods = {name for name, value in vars(Ledger).items() if callable(value) and not name.startswith("_")}
    own = {name for name in vars(AlertingLedger) if not name.startswith("_")} - {"alert"}
    assert own.isdisjoint(DELEGATED)
    assert own | DELEGATED == methods


async def test_a_held_receiver_does_not_slow_a_proposal_and_hears_of_it_when_it_answers(
    redis_server_url: str, receiver: tuple[Receiver, str], backends: dict[str, Backend]
) -> None:
    """A real gateway under uvicorn, its delivery loop running: while the receiver holds every request,
    the agent's proposal is answered within 5 s (delivery waits 10 s for it); once it answers, it gets
    the signed card link."""
    hook, url = receiver
    hook.hold.set()
    redis_url = urlunsplit(urlsplit(redis_server_url)._replace(path="/9"))
    client = Redis.from_url(redis_url)
    await client.flushdb()
    settings = replace(
        gateway_settings(redis_url, backends),
        run_worker=False,
        notifications=NotificationSettings(
            console_url="https://gw.example",
            webhooks=(Webhook(name="ops", url=url, secret=SECRET),),
            poll_seconds=0.05,
            timeout_seconds=10,
        ),
    )
    try:
        token = await make_key(client, roles=("staff",))
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            async with agent(f"{base}/mcp", token) as mcp:
                booking = {"room_id": "room-eos", "date": "2026-12-20", "start": "09:00", "end": "10:00",
                           "title": "Planning"}  # fmt: skip
                await mcp.call_tool("rooms_book", {**booking, "date": "2026-12-19"})  # a first one: it holds
                # The receiver holds for far longer than this bound (its poster's deadline is 10 s).
                with anyio.fail_after(5):
                    receipt = payload(await mcp.call_tool("rooms_book", booking))
                assert hook.received == []
                hook.hold.clear()
                with anyio.fail_after(10):
                    while len({r.headers[ID_HEADER.lower()] for r in hook.received}) < 2:
                        await anyio.sleep(0.05)
        bodies = [json.loads(r.body) for r in hook.received]
        [ours] = [b for b in bodies if b["card"]["card_id"] == receipt["card_id"]]
        assert ours["event"] == "card.pending"
        assert ours["console_url"] == f"https://gw.example/admin/#/cards/{receipt['card_id']}"
        assert ours["untrusted"]["agent_text"] == {"title": "Planning"}
    finally:
        await client.flushdb()
        await client.aclose()
