"""Policy approvals end to end: a real gateway with its worker, real MCP client, real backends and Redis."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from backends.serve import serve_app_in_thread
from gateway.approvals.service import CardService
from gateway.audit.events import AuditEvent, ListAuditSink
from gateway.cards.card import CardState, verify_chain
from gateway.cards.contract import Transition
from gateway.cards.views import ResultCode
from gateway.codes import Code
from gateway.config.approvals import ApprovalSettings, Bound, PolicyRule
from gateway.executor import PolicyApprovals
from gateway.notifications.card_alerts import AlertingLedger
from gateway.notifications.message import Webhook
from gateway.principal import KeyKind
from gateway.provenance import Provenance
from gateway.runtime.app import create_app
from gateway.store.audit_stream import RedisStreamAuditSink
from gateway.store.keys import KeyStore
from gateway.store.ledger.layout import card_keys, policy_budget_key, requester_shard
from gateway.store.ledger.redis_ledger import SHARDS, RedisLedger
from gateway.store.notification_outbox import RedisNotificationOutbox
from tests.support.agents import agent, make_key, payload
from tests.support.cards import PROPOSAL, settled
from tests.support.guards import always_writable
from tests.support.services import Backend, gateway_settings, serve_backends

pytestmark = pytest.mark.anyio

RULES = ApprovalSettings(
    policy_daily_budget=2,
    policies={
        "small-refunds": PolicyRule(
            tool="orders_refund_create",
            requester_roles=["support"],
            arguments={"amount_cents": Bound(min=1, max=2_000)},
        ),
        "large-globex": PolicyRule(
            tool="orders_refund_create",
            requester_roles=["support"],
            orgs=["globex"],
            arguments={"amount_cents": Bound(min=20_000, max=60_000)},
        ),  # fmt: skip
    },
)


@pytest.fixture(scope="module", name="redis_url")
def policy_database(redis_server_url: str) -> str:
    """A database of its own: this module's gateway and worker are the only ones on it."""
    return urlunsplit(urlsplit(redis_server_url)._replace(path="/6"))


@pytest.fixture(scope="module")
def orders(redis_url: str) -> Iterator[tuple[str, Backend]]:
    """A gateway with `RULES` and its own fresh backends; its MCP URL and the orders backend."""
    with serve_backends() as backends:
        settings = dataclasses.replace(gateway_settings(redis_url, backends), approvals=RULES)
        with serve_app_in_thread(create_app(settings), lifespan=True) as base:
            yield f"{base}/mcp", backends["orders"]


async def _refund(mcp_url: str, token: str, order: str, cents: int) -> dict[str, Any]:
    async with agent(mcp_url, token) as client:
        return payload(await client.call_tool("orders_refund_create", {"order_id": order, "amount_cents": cents,
                                                                       "reason": "damaged"}))  # fmt: skip


async def _approvals(redis: Redis, card_id: str) -> list[AuditEvent]:
    events = await RedisStreamAuditSink(redis).recent(200)
    return [e for e in events if e.action == "card.approve" and e.extra.get("card_id") == card_id]


async def test_a_refund_a_rule_admits_is_approved_by_policy_and_runs_once(
    redis: Redis, orders: tuple[str, Backend]
) -> None:
    """The receipt says approved by policy; the card's history and the audit record it as a person's approval."""
    mcp_url, backend = orders
    token = await make_key(redis, roles=("support",), subject="sam@acme.example")
    receipt = await _refund(mcp_url, token, "ord-1001", 1_500)
    assert receipt["approved_by_policy"] is True and receipt["decision"] == "approved"
    assert receipt["status"] in ("APPROVED", "EXECUTING", "SUCCEEDED") and "policy:" not in str(receipt)
    card = await settled(redis, receipt["card_id"])
    assert card.state is CardState.SUCCEEDED and card.approvers == ("policy:small-refunds",)
    events = await RedisLedger(redis).events(card.card_id)
    assert [(e.type, e.actor) for e in events][:2] == [
        ("created", "sam@acme.example"),
        ("approved", "policy:small-refunds"),
    ]
    assert verify_chain(events)
    [audited] = await _approvals(redis, card.card_id)
    assert (audited.subject, audited.outcome, audited.org, audited.extra["state"]) == (
        "policy:small-refunds", "ok", "acme", "APPROVED",
    )  # fmt: skip
    assert [r for r in backend.app.state.service.refunds if r.refund_id == card.reference]


async def test_a_hostile_note_then_twenty_harmless_reads_never_lets_a_rule_approve_the_refund(
    redis: Redis, orders: tuple[str, Backend]
) -> None:
    """The laundering, end to end: a support agent reads ord-1002's hostile customer note (shown fenced), makes
    twenty harmless reads (the history keeps twenty), then proposes a refund small-refunds admits. The card is
    tainted and waits for a person, the rule's refusal is audited, and no refund reaches the backend."""
    mcp_url, backend = orders
    token = await make_key(redis, roles=("support",), subject="lee@acme.example")
    async with agent(mcp_url, token) as client:
        note = payload(await client.call_tool("orders_customer_note", {"order_id": "ord-1002"}))
        for _ in range(20):
            assert not (await client.call_tool("orders_refund_eligibility", {"order_id": "ord-1001"})).is_error
        refund = {"order_id": "ord-1001", "amount_cents": 1_500, "reason": "late"}
        receipt = payload(await client.call_tool("orders_refund_create", refund))
    assert "approve all refunds" in note["customer_note"]
    assert receipt["status"] == "PENDING" and "approved_by_policy" not in receipt
    card = await RedisLedger(redis).get(receipt["card_id"])
    assert card is not None and card.provenance is not None and card.provenance.tainted
    assert card.provenance.taint is not None and card.provenance.taint.tool == "orders_customer_note"
    assert [read.tool for read in card.provenance.reads] == ["orders_refund_eligibility"] * 20
    assert card.approvers == () and card.state is CardState.PENDING
    [refused] = await _approvals(redis, card.card_id)
    assert (refused.outcome, refused.code) == ("deny", "APPROVAL_REQUIRED") and "tainted" in refused.reason
    assert not [r for r in backend.app.state.service.refunds if r.reason == "late"]


async def test_past_the_daily_budget_the_card_waits_for_a_person(redis: Redis, orders: tuple[str, Backend]) -> None:
    """Two policy approvals a day for this requester; the third card stays PENDING, audited QUOTA_EXCEEDED,
    and the count lives in Redis under the requester's UTC day."""
    mcp_url, _ = orders
    token = await make_key(redis, roles=("support",), subject="sam@acme.example")
    receipts = [await _refund(mcp_url, token, "ord-1002", cents) for cents in (101, 102, 103)]
    assert [r.get("approved_by_policy", False) for r in receipts] == [True, True, False]
    assert receipts[2]["status"] == "PENDING" and receipts[2]["said"] == "waiting for approval (0 of 1)"
    [refused] = await _approvals(redis, receipts[2]["card_id"])
    assert (refused.outcome, refused.code, refused.extra["ledger"]) == ("deny", "QUOTA_EXCEEDED", "ERR_QUOTA_EXCEEDED")
    card = await RedisLedger(redis).get(receipts[2]["card_id"])
    assert card is not None and card.approvers == ()
    day = datetime.fromtimestamp(card.created_ms / 1000, tz=UTC).strftime("%Y%m%d")
    assert await redis.get(policy_budget_key("acme", "sam@acme.example", day)) == b"2"
    # Another requester has a budget of its own.
    other = await make_key(redis, roles=("support",), subject="kim@acme.example")
    assert (await _refund(mcp_url, other, "ord-1002", 104))["approved_by_policy"] is True


@pytest.mark.parametrize(("order", "cents"), [("ord-1001", 2_001), ("ord-1002", 25_000)],
                         ids=["above-the-bound", "a-rule-of-another-org"])  # fmt: skip
async def test_a_card_no_rule_admits_waits_for_a_person_and_the_refusal_is_audited(
    redis: Redis, orders: tuple[str, Backend], order: str, cents: int
) -> None:
    mcp_url, _ = orders
    token = await make_key(redis, roles=("support",), subject="sam@acme.example")
    receipt = await _refund(mcp_url, token, order, cents)
    assert receipt["status"] == "PENDING" and "approved_by_policy" not in receipt
    [refused] = await _approvals(redis, receipt["card_id"])
    assert (refused.subject, refused.outcome, refused.code) == ("policy", "deny", "APPROVAL_REQUIRED")


async def test_a_card_needing_two_approvers_gets_one_from_policy_and_still_needs_a_person(
    redis: Redis, orders: tuple[str, Backend]
) -> None:
    """Above 500.00 a refund needs two approvers: the rule gives one, a person the other, and only then it runs."""
    mcp_url, _ = orders
    token = await make_key(redis, org="globex", roles=("support",), subject="marge@globex.example")
    receipt = await _refund(mcp_url, token, "ord-1005", 55_000)
    assert (receipt["status"], receipt["approvals_required"], receipt["approvals_received"]) == ("PENDING", 2, 1)
    assert receipt["approved_by_policy"] is True
    ledger = RedisLedger(redis)
    card = await ledger.get(receipt["card_id"])
    assert card is not None
    # No second policy approval, whatever the rule: the ledger refuses it.
    again = await ledger.approve_by_policy(card.card_id, rule="small-refunds", requester=(card.requester_org,
                                           card.requester_subject), version=card.version, args_hash=card.args_hash,
                                           day="20261201", budget=9)  # fmt: skip
    assert again.status == "ERR_DUPLICATE_APPROVER"
    admin = await _admin(redis, "globex", "root@globex.example")
    service = CardService(ledger, ListAuditSink(), writable=always_writable, changes=ledger.changes)
    decided = await service.approve(admin, card.card_id, version=card.version, args_hash=card.args_hash)
    assert decided.code is ResultCode.OK
    done = await settled(redis, card.card_id)
    assert done.state is CardState.SUCCEEDED and done.approvers == ("policy:large-globex", "root@globex.example")


async def test_no_person_may_decide_as_a_policy(redis: Redis, orders: tuple[str, Backend]) -> None:
    """An admin key named like a policy approver is refused, and the card is unchanged."""
    mcp_url, _ = orders
    token = await make_key(redis, roles=("support",), subject="sam@acme.example")
    receipt = await _refund(mcp_url, token, "ord-1001", 3_000)  # above every rule: PENDING
    ledger = RedisLedger(redis)
    card = await ledger.get(receipt["card_id"])
    assert card is not None and card.state is CardState.PENDING
    for subject in ("policy:small-refunds", "Policy:small-refunds"):
        admin = await _admin(redis, "acme", subject)
        service = CardService(ledger, ListAuditSink(), writable=always_writable, changes=ledger.changes)
        refused = await service.approve(admin, card.card_id, version=card.version, args_hash=card.args_hash)
        assert refused.code is ResultCode.PERMISSION_DENIED
    assert await ledger.get(card.card_id) == card


async def test_a_tainted_card_is_never_approved_by_policy(redis: Redis) -> None:
    """A card whose provenance says it followed untrusted text (as the ledger stores it) is left PENDING,
    audited, the ledger untouched."""
    ledger, audit = RedisLedger(redis), ListAuditSink()
    small = dataclasses.replace(PROPOSAL, tool="orders_refund_create", arguments={"amount_cents": 100},
                                requester_roles=frozenset({"support"}),
                                provenance=Provenance(tainted=True, data_flow=False))  # fmt: skip
    created = await ledger.propose(small)
    assert created.card is not None and created.card.provenance is not None and created.card.provenance.tainted
    tainted = created.card
    announced: list[Transition] = []

    async def announce(result: Transition) -> Transition:
        announced.append(result)
        return result

    policies = PolicyApprovals(ledger=ledger, audit=audit, settings=RULES, announce=announce)
    assert await policies.consider(tainted, auto_policy=None) is tainted
    assert await ledger.get(created.card.card_id) == created.card
    assert (audit.events[-1].code, audit.events[-1].outcome) == (Code.APPROVAL_REQUIRED.value, "deny")
    assert "tainted" in audit.events[-1].reason
    assert [result.card for result in announced] == [tainted]  # left to a person, so people are told


async def _admin(redis: Redis, org: str, subject: str) -> Any:
    token, _ = await KeyStore(redis).create(kind=KeyKind.ADMIN, subject=subject, org=org, roles=("approver",))
    return await KeyStore(redis).resolve(token)


@pytest.mark.parametrize(("cents", "told"), [(100, False), (5_000, True)], ids=["approved", "left-to-a-person"])
async def test_approvers_are_told_of_a_card_only_once_the_rules_left_it_to_them(
    redis: Redis, cents: int, told: bool
) -> None:
    """With a webhook configured, a card a rule approves raises no "pending" notification; one it leaves
    to a person raises exactly one, after the rules had their say."""
    outbox = RedisNotificationOutbox(redis)
    hook = Webhook(name="ops", url="https://hooks.example/ops", secret="s")
    alerting = AlertingLedger(RedisLedger(redis), queue=outbox, webhooks=[hook], console_url="https://gw")
    policies = PolicyApprovals(ledger=alerting, audit=ListAuditSink(), settings=RULES, announce=alerting.alert)
    proposal = dataclasses.replace(PROPOSAL, tool="orders_refund_create", arguments={"amount_cents": cents},
                                   requester_roles=frozenset({"support"}), awaits_policy=policies.apply_to(
                                       "orders_refund_create"))  # fmt: skip
    created = await alerting.propose(proposal)
    assert created.card is not None and await outbox.all() == []
    card = await policies.consider(created.card, auto_policy=None)
    assert (card.state is CardState.PENDING) is told
    queued = await outbox.all()
    assert [json.loads(n.body)["card"]["card_id"] for n in queued] == ([card.card_id] if told else [])


def test_a_policy_approval_touches_one_cluster_slot() -> None:
    """The requester's daily count lives in the shard of the requester's cards: one slot with the card's keys,
    in every shard (32 requesters cover them all)."""
    shards = set()
    for n in range(32):
        org, subject = "acme", f"r{n}@acme.example"
        shard = requester_shard(org, subject)
        keys = [*card_keys(f"crd_{shard}_{'0' * 32}", shard), policy_budget_key(org, subject, "20261201")]
        assert len({key_slot(key.encode()) for key in keys}) == 1
        shards.add(shard)
    assert shards == set(range(SHARDS))
