"""The view path: what an MCP Apps view, shown to the person behind an agent, may open.

Who calls it: the MCP surface (`gateway.mcp.apps`), for clients that declared the MCP Apps extension.
Three things, each audited:

* `open_read`: a read whose result carries third-party text (its tool ``emits_untrusted_text`` and
  renders for people) was answered; its human render is stored under a fresh handle, single use,
  `ttl_seconds` long, bound to the principal (org, subject, key) and the call (tool, arguments hash).
  The model's projection is not touched: the handle travels in the result's ``_meta``, to the view.
* `read` (the app-only tool `READ_TOOL`): a view redeems its handle for the render. Another principal's
  handle, a used one, an expired or unknown one all read as NOT_FOUND, with `HANDLE_REFUSED` for the
  person to act on; the audit event says which. (NOT_FOUND, not a code of its own: a new code would
  change every tool's listed output schema, which clients without views must get unchanged.)
* `card` (the app-only tool `CARD_TOOL`): the requester's own card as its view follows it: summary,
  preview, state and what happened. Nothing here can decide a card.

Every app-only call comes after the same first two steps as an agent's call: the caller's client must
have declared the extension (otherwise the name reads exactly as an unknown tool does: PERMISSION_DENIED,
so a client without the extension sees what it saw before views existed), then it spends from the
caller's read budget (a view polling a card is reading the ledger), then its arguments are validated.

What it deliberately does not know: MCP (whether a client declared the extension is told to it), the
store behind `ViewHandles` and `Ledger`, and which tools have views (their declarations say).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.audit.events import AuditEvent, AuditSink
from gateway.canonical import canonical_json, iso_from_ms
from gateway.cards.card import TERMINAL, Card
from gateway.cards.contract import Ledger
from gateway.cards.views import card_for_agent
from gateway.codes import Code
from gateway.decision import Decision
from gateway.envelope import Envelope
from gateway.errors import StoreUnavailableError
from gateway.executor.agent import with_acting_client
from gateway.executor.caller_cards import LedgerCallerCards
from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import Charge, RateLimiter
from gateway.notifications.message import card_url
from gateway.principal import Principal
from gateway.view_handles import Minted, Opened, ViewHandles
from policies.charges import budget_owner

__all__ = [
    "APP_TOOLS",
    "CARD_TOOL",
    "HANDLE_REFUSED",
    "READ_TOOL",
    "ViewCardArgs",
    "OpenedRead",
    "ViewReadArgs",
    "ViewPath",
]

Args = TypeVar("Args", bound=BaseModel)

READ_TOOL = "countersign_view_read"
"""The app-only tool a read view redeems its handle with."""
CARD_TOOL = "countersign_view_card"
"""The app-only tool a card view follows its card with."""
APP_TOOLS = frozenset({READ_TOOL, CARD_TOOL})
"""The names only a view may call; never offered to a model."""

HANDLE_REFUSED = (
    "This view can no longer open what the agent was not shown (opened already, expired, or not yours); "
    "run the tool again."
)
"""What a view is told of a handle that opens nothing."""

POLL_MS = 2000
"""How often a card view asks again while its card is open: within any read budget a caller is given."""

_REFUSALS = {
    "gone": "the handle expired, or was never minted",
    "foreign": "the handle was minted for another principal's call",
    "used": "the handle was opened already",
}


class ViewReadArgs(BaseModel):
    """The arguments of `READ_TOOL`."""

    model_config = ConfigDict(extra="forbid")
    handle: str = Field(min_length=16, max_length=128, description="The handle the read's result gave its view.")


class ViewCardArgs(BaseModel):
    """The arguments of `CARD_TOOL`."""

    model_config = ConfigDict(extra="forbid")
    card_id: str = Field(min_length=1, max_length=128, description="The card the write's result named.")


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenedRead:
    """The handle a read view is given, and until when it opens the render."""

    handle: str
    expires_at: str


class ViewPath:
    """Handles for read views, and the requester's card for card views."""

    def __init__(
        self,
        *,
        handles: ViewHandles,
        ledger: Ledger,
        audit: AuditSink,
        limiter: RateLimiter,
        limits: Limits,
        ttl_seconds: float = 120.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._handles = handles
        self._ledger = ledger
        self._audit = audit
        self._limiter = limiter
        self._limits = limits
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._clock = clock

    async def open_read(
        self, principal: Principal, tool: str, arguments: Mapping[str, Any] | None, envelope: Envelope
    ) -> OpenedRead | None:
        """A handle to `envelope`'s human render, for the view of this call; None when it has no third-party
        text to show (a refusal, or a result the model already sees whole) or the store did not take it
        (the call's answer stands; only its view shows nothing)."""
        if envelope.is_error or not envelope.untrusted or not envelope.has_render:
            return None
        handle = secrets.token_urlsafe(32)
        minted = Minted(
            owner=_owner(principal),
            tool=tool,
            args_hash=_call_hash(tool, arguments),
            render=envelope.for_human(),
            untrusted=True,
        )
        try:
            await self._handles.mint(handle, minted, ttl_ms=self._ttl_ms)
        except StoreUnavailableError as error:
            await self._record(principal, tool, "error", action="view.open", code=Code.LEDGER_UNAVAILABLE,
                               reason=f"view handle not stored: {error.cause}")  # fmt: skip
            return None
        await self._record(principal, tool, "ok", action="view.open", extra={"handle": _fingerprint(handle)})
        expires = iso_from_ms(int(self._clock() * 1000) + self._ttl_ms)
        return OpenedRead(handle=handle, expires_at=expires)

    async def read(self, principal: Principal, arguments: Mapping[str, Any] | None, *, declared: bool) -> Envelope:
        """The app-only `READ_TOOL`: the render a handle opens, once, for the principal it was minted for."""
        args = await self._admit(principal, READ_TOOL, arguments, ViewReadArgs, declared=declared)
        if isinstance(args, Envelope):
            return args
        try:
            opened = await self._handles.redeem(args.handle, _owner(principal))
        except StoreUnavailableError as error:
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"view handles unreadable: {error.cause}")
            return await self._refuse(principal, READ_TOOL, down)
        fingerprint = {"handle": _fingerprint(args.handle)}
        if not isinstance(opened, Opened):
            refusal = Decision.deny(Code.NOT_FOUND, _REFUSALS[opened])
            return await self._refuse(principal, READ_TOOL, refusal, extra=fingerprint, message=HANDLE_REFUSED)
        await self._record(principal, READ_TOOL, "ok", extra={**fingerprint, "read": opened.tool})
        model = {"tool": opened.tool, "text": opened.render, "untrusted": opened.untrusted}
        return Envelope.ok(model, human=opened.render, untrusted=opened.untrusted)

    async def card(
        self, principal: Principal, arguments: Mapping[str, Any] | None, *, declared: bool, console_url: str | None
    ) -> Envelope:
        """The app-only `CARD_TOOL`: the caller's own card as its view shows it, with a link to its page in the
        console at `console_url` (the approvers' address, as configured; None: no link). Anyone else's card
        reads as NOT_FOUND."""
        args = await self._admit(principal, CARD_TOOL, arguments, ViewCardArgs, declared=declared)
        if isinstance(args, Envelope):
            return args
        try:
            card = await LedgerCallerCards(self._ledger, principal).card(args.card_id)
        except StoreUnavailableError as error:
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"ledger error: {error.cause}")
            return await self._refuse(principal, CARD_TOOL, down)
        if card is None:
            return await self._refuse(principal, CARD_TOOL, Decision.deny(Code.NOT_FOUND, "no such card of the caller"))
        await self._record(principal, CARD_TOOL, "ok", extra={"card_id": card.card_id, "state": card.state.value})
        return Envelope.ok(_card_view(card, console_url), untrusted=card.preview is not None)

    async def _admit(
        self,
        principal: Principal,
        name: str,
        arguments: Mapping[str, Any] | None,
        model: type[Args],
        *,
        declared: bool,
    ) -> Envelope | Args:
        """The steps every app-only call takes first: the extension, the read budget, the arguments; the
        refusal, or the validated arguments."""
        if not declared:
            hidden = Decision.deny(Code.PERMISSION_DENIED, "app-only tool called by a client without MCP Apps views")
            return await self._refuse(principal, name, hidden)
        charge = Charge(bucket="reads", budget=self._limits.budget("reads", principal.org))
        try:
            verdict = await self._limiter.spend(budget_owner(principal), (charge,))
        except StoreUnavailableError as error:
            down = Decision.deny(Code.LEDGER_UNAVAILABLE, f"rate limiter error: {error.cause}")
            return await self._refuse(principal, name, down)
        if not verdict.allowed:
            spent = Decision.deny(Code.RATE_LIMITED, f"{verdict.bucket} budget spent")
            return await self._refuse(principal, name, spent, details={"retry_after": verdict.retry_after})
        try:
            return model.model_validate(arguments or {})
        except ValidationError as error:
            invalid = Decision.deny(Code.VALIDATION_ERROR, f"{error.error_count()} invalid argument(s)")
            return await self._refuse(principal, name, invalid)

    async def _refuse(
        self,
        principal: Principal,
        name: str,
        decision: Decision,
        *,
        details: Mapping[str, Any] | None = None,
        extra: Mapping[str, str] | None = None,
        message: str | None = None,
    ) -> Envelope:
        code = decision.code or Code.INTERNAL_ERROR
        await self._record(principal, name, "deny", code=code, reason=decision.reason, extra=extra)
        return Envelope.refused(code, message=message, details=details)

    async def _record(
        self,
        principal: Principal,
        name: str,
        outcome: str,
        *,
        action: str = "tool.call",
        code: Code | None = None,
        reason: str = "",
        extra: Mapping[str, str] | None = None,
    ) -> None:
        extra = with_acting_client(principal, {"surface": "view", **(extra or {})})
        code_value = code.value if code is not None else ""
        event = AuditEvent.by(principal, action=action, outcome=outcome, tool=name, code=code_value, reason=reason,
                              extra=extra)  # fmt: skip
        await self._audit.record(event)


def _card_view(card: Card, console_url: str | None) -> dict[str, Any]:
    """The card as its requester's view shows it: the agent's view of it, what the preview read, where
    approvers decide it, and whether to ask again."""
    view = card_for_agent(card)
    view.pop("note", None)  # the note tells the agent how to follow the card; the view follows it itself
    if card.preview is not None:
        view["preview"] = list(card.preview.lines)
    view["console"] = card_url(console_url, card.card_id) if console_url else None
    view["final"] = card.state in TERMINAL
    view["poll_ms"] = POLL_MS
    return view


def _owner(principal: Principal) -> str:
    """Who a handle is bound to: the org, the subject and the very key that made the call."""
    return f"{principal.org}\n{principal.subject}\n{principal.key_id}"


def _call_hash(tool: str, arguments: Mapping[str, Any] | None) -> str:
    return hashlib.sha256(f"{tool}\n{canonical_json(dict(arguments or {}))}".encode()).hexdigest()


def _fingerprint(handle: str) -> str:
    """What the audit trail keeps of a handle: enough to match its minting and its redeeming, not to use it."""
    return hashlib.sha256(handle.encode()).hexdigest()[:16]
