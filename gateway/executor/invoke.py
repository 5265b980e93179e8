"""The one step both paths share: give a tool its context, run it within its deadline, check its answer.

The agent's path calls `Invoker.invoke` for reads; the write path calls it, once per dispatched
attempt, for an approved card. Nothing else in the gateway runs a tool's `execute`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

from pydantic import BaseModel, ValidationError

from gateway.cards.card import Card, args_hash
from gateway.cards.contract import Ledger
from gateway.errors import UpstreamProtocolError, UpstreamTimeoutError
from gateway.executor.caller_cards import LedgerCallerCards
from gateway.principal import Principal
from gateway.tools.context import RequestSigner, ToolContext
from gateway.tools.declarations import Tool
from gateway.tools.preview import Preview
from gateway.tools.upstream import UpstreamClient

__all__ = ["IdentitySigner", "Invoker", "args_hash", "requester_of"]


class IdentitySigner(Protocol):
    """Signs who is asking: the headers that tell `adapter`'s backend that `principal` calls it, with a
    signed claim where the gateway holds a key (`gateway.signing.identity.IdentityHeaders` is the one the
    composition root builds)."""

    def __call__(self, principal: Principal, adapter: str) -> Mapping[str, str]: ...


class Invoker:
    """Runs one tool call with the collaborators every call needs."""

    def __init__(self, *, clients: Mapping[str, UpstreamClient], identity: IdentitySigner, ledger: Ledger) -> None:
        self._clients = clients
        self._identity = identity
        self._ledger = ledger

    def context(
        self,
        tool: Tool,
        principal: Principal,
        *,
        idempotency_key: str | None = None,
        receipt: RequestSigner | None = None,
        answered: Callable[[int], None] | None = None,
    ) -> ToolContext:
        """What `tool` receives for `principal`: its backend client, identity headers, the caller's cards.

        `idempotency_key`, `receipt` and `answered` are set only for an approved write: the key minted with its
        card, what signs the approval receipt of each of its requests, and what is told each answer's status.
        """
        return ToolContext(
            principal=principal,
            http=self._clients.get(tool.adapter),
            service=tool.adapter,
            idempotency_key=idempotency_key,
            cards=LedgerCallerCards(self._ledger, principal),
            identity=self._identity(principal, tool.adapter),
            receipt=receipt,
            answered=answered,
        )

    async def invoke(self, tool: Tool, args: BaseModel, ctx: ToolContext) -> BaseModel:
        """Execute within the tool's deadline and validate the answer against its output model.

        Raises:
            UpstreamTimeoutError: no answer within `tool.timeout_seconds`.
            UpstreamProtocolError: the answer does not fit the tool's output model.
            UpstreamError: whatever the adapter raised for its backend.
        """
        try:
            async with asyncio.timeout(tool.timeout_seconds):
                raw = await tool.execute(args, ctx)
        except TimeoutError as error:
            raise UpstreamTimeoutError(f"no answer within {tool.timeout_seconds}s", service=tool.adapter) from error
        try:
            return tool.output.model_validate(raw.model_dump() if isinstance(raw, BaseModel) else raw)
        except ValidationError as error:
            raise UpstreamProtocolError(
                f"backend answer failed {error.error_count()} output check(s)", service=tool.adapter, status=200
            ) from error

    async def preview(self, tool: Tool, args: BaseModel, ctx: ToolContext) -> Preview | None:
        """Read the tool's preview within the tool's deadline; None when it declares none.

        Raises:
            UpstreamTimeoutError: no answer within `tool.timeout_seconds`.
            UpstreamError: whatever the preview raised for its backend (NOT_FOUND: not this caller's target).
        """
        if tool.preview is None:
            return None
        try:
            async with asyncio.timeout(tool.timeout_seconds):
                return await tool.preview(args, ctx)
        except TimeoutError as error:
            raise UpstreamTimeoutError(f"no preview within {tool.timeout_seconds}s", service=tool.adapter) from error


def requester_of(card: Card) -> Principal:
    """The principal a card's write runs for, as recorded when it was proposed."""
    return Principal(
        subject=card.requester_subject,
        org=card.requester_org,
        roles=card.requester_roles,
        key_id=card.requester_key_id,
        acting_client=card.acting_client,
        actors=card.actors,
    )
