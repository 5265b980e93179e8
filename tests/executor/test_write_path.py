"""The write path driven directly, on a real ledger: what one send of an approved card asks of its collaborators."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.audit.events import ListAuditSink
from gateway.cards.card import Card, CardState
from gateway.config.org_adapters import OrgAdapters
from gateway.executor import Invoker, WritePath
from gateway.principal import Principal
from gateway.signing.identity import IdentityHeaders
from gateway.store.durability import LedgerGuard
from gateway.store.keys import KeyStore
from gateway.store.ledger.redis_ledger import RedisLedger
from gateway.tools.context import RequestSigner, ToolContext
from gateway.tools.declarations import Tool
from gateway.tools.preview import Preview
from gateway.tools.toolbox import Toolbox
from tests.support.cards import approve
from tests.support.executors import LEASE_SECONDS, agent_path
from tests.support.services import TEST_SIGNING_KEY
from tests.support.tools import EchoArgs, write_tool

pytestmark = pytest.mark.anyio

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_alice")


class CountingInvoker(Invoker):
    """The real invoker, counting the tool contexts it makes."""

    contexts = 0

    def context(self, tool: Tool, principal: Principal, **given: Any) -> ToolContext:
        self.contexts += 1
        return super().context(tool, principal, **given)


async def test_one_send_reads_its_receipt_signer_once_and_makes_one_tool_context(quiet: Redis) -> None:
    """An approved card run once: the receipt's signer is read once (not before the claim and again after it),
    and the tool gets one context, which its precondition read shares without the key and the receipt.
    On the database no worker drains (`quiet`): the session gateway's worker would otherwise run the card."""
    redis = quiet
    seen: dict[str, ToolContext] = {}

    async def preview(args: EchoArgs, ctx: ToolContext) -> Preview:
        seen["preview"] = ctx
        return Preview(lines=(f"echo {args.text}",))

    async def execute(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
        seen["send"] = ctx
        return {"echoed": args.text}

    tool = write_tool(preview=preview, execute=execute)
    proposer, _ = agent_path(tool, clients={}, ledger_client=redis)
    filed = await proposer.execute(ALICE, tool.name, {"text": "hi"})
    ledger = RedisLedger(redis)
    card = await approve(ledger, str(filed.card_id))

    signed: list[tuple[str, str]] = []

    async def receipts(card: Card, adapter: str) -> RequestSigner:
        signed.append((card.card_id, adapter))

        def sign(method: str, path: str, query: Mapping[str, str] | None, body: Any) -> Mapping[str, str]:
            return {}

        return sign

    async def live_principal(key_id: str) -> Principal | None:
        return ALICE if key_id == ALICE.key_id else None

    invoker = CountingInvoker(clients={}, identity=IdentityHeaders({"demo": TEST_SIGNING_KEY}), ledger=ledger)
    writes = WritePath(
        tools=Toolbox([tool], lease_seconds=LEASE_SECONDS),
        org_adapters=OrgAdapters({"acme": frozenset({tool.adapter})}),
        policy=None,
        audit=ListAuditSink(),
        invoker=invoker,
        ledger=ledger,
        guard=LedgerGuard(redis),
        live_principal=live_principal,
        subject_revoked=KeyStore(redis).subject_revoked,
        healthy=lambda adapter: True,
        lease_ms=int(LEASE_SECONDS * 1000),
        reconcile_horizon_ms=3_600_000,
        receipts=receipts,
    )
    done = await writes.run_approved(card.card_id, worker="w1")

    assert done is not None and done.state is CardState.SUCCEEDED
    assert signed == [(card.card_id, tool.adapter)]
    assert invoker.contexts == 1
    assert (seen["preview"].idempotency_key, seen["preview"].receipt) == (None, None)
    assert seen["send"].idempotency_key == card.idempotency_key and seen["send"].receipt is not None
    assert seen["preview"].identity == seen["send"].identity
