"""The card service: the one place an admin's decision on a card goes through.

Who calls it: the surfaces an admin uses (the admin REST API and the CLI), always with the acting
admin's `Principal`. What it asks of the ledger: reads (`get`, `events`, `page`) and the four
admin transitions (`approve`, `reject`, `cancel`, `resolve`); of the ledger's change feed, the cards
saved since an admin started to `watch` (`gateway.approvals.watch`). Batch decisions are single decisions
in a row (`gateway.approvals.batch`). It deliberately knows nothing of
HTTP or argparse, and it never raises for a refusal: every action returns a `CardActionResult`
with a stable `ResultCode`, which each surface maps to its own status. Reads and results carry
the admin views of `gateway.cards.views` (`AdminCard`, `AdminCardSummary`), which every surface
shows as they are.

Every action runs in the same order: validate the input -> load the card -> `may_decide` (org,
requester, role) -> `writable()` -> one ledger transition -> audit. Every allow and every refusal
is audited; the agent's own words never reach the audit trail. A card of another org is answered
exactly as a card that does not exist.

A decision is reported done only once the ledger confirmed it durable. When the ledger answers
``ERR_NOT_DURABLE`` the decision may be applied but not confirmed: the admin gets LEDGER_UNAVAILABLE
(retryable) saying exactly that, with the card as the ledger now holds it, and is told to check the
card before acting again. Such a decision is not undone: if the store keeps it, it stands once the
ledger is durable again (an approved card is then run by the worker, which sends nothing while the
ledger is not durable); if the store loses it, the card is as it was before. Either way the card
itself is the truth, and says which.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from gateway.approvals.watch import CardWatch, visible_to
from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.card import Card, CardState
from gateway.cards.contract import CardChanges, CardQuery, Ledger, Transition, TransitionStatus
from gateway.cards.overview import HOUR_MS, Overview, OverviewWindow, summarize
from gateway.cards.views import AdminCard, AdminCardSummary, CardActionResult, CardListing, ResultCode
from gateway.codes import Code
from gateway.config.approvals import PasskeyRequirement
from gateway.errors import InvalidCursorError, StoreUnavailableError
from gateway.passkeys.service import PasskeyService
from gateway.principal import KeyKind, Principal, identity_of
from policies.approval import may_decide
from policies.passkey import needs_passkey

__all__ = ["MAX_EVIDENCE_BYTES", "MAX_LIST", "MAX_TEXT", "OPEN_LOOKBACK_MS", "OUTCOMES", "CardService", "Writable"]

MAX_TEXT = 2000
"""Longest comment or rejection reason, in characters."""
MAX_EVIDENCE_BYTES = 16_384
"""Largest resolution evidence, as compact JSON."""
OUTCOMES = ("SUCCEEDED", "FAILED")
"""What an admin may resolve a NEEDS_RECONCILIATION card to."""
MAX_LIST = 500
OPEN_LOOKBACK_MS = 7 * 24 * HOUR_MS
"""How far before an overview's window its reading goes, for the cards still open from then."""
"""Most cards one page of the list holds."""

# What each ledger refusal means to the admin. Anything unlisted is a conflict with the card's state.
_LEDGER_REFUSALS: dict[str, tuple[ResultCode, str]] = {
    "ERR_NOT_FOUND": (ResultCode.NOT_FOUND, "no such card"),
    "ERR_SELF_APPROVAL": (ResultCode.PERMISSION_DENIED, "the requester cannot decide its own card"),
    "ERR_STALE": (ResultCode.CONFLICT, "the card changed since you reviewed it (version or arguments)"),
    "ERR_STATE": (ResultCode.CONFLICT, "the card's state does not allow this action"),
    "ERR_DUPLICATE_APPROVER": (ResultCode.CONFLICT, "you already approved this card; it needs another approver"),
    "ERR_EXPIRED": (ResultCode.CONFLICT, "the card expired before this decision"),
    "ERR_ARGUMENT": (ResultCode.VALIDATION_ERROR, "the ledger refused the arguments"),
}


Writable = Callable[[], Awaitable[bool]]
"""Whether the ledger may take a write now, reachable and durable (`gateway.store.durability.LedgerGuard.writable`)."""


class CardService:
    """Admin reads and decisions on cards, scoped to the admin's org, audited, failing closed.

    `writable` answers whether the ledger may take a write now (reachable and durable); when it
    says no, or Redis fails, an action changes nothing and returns LEDGER_UNAVAILABLE. `changes` is
    the ledger's change feed, which `watch` follows. Both are required: there is no service that
    skips the pre-check or watches nothing. A transition
    the ledger could not confirm durable is LEDGER_UNAVAILABLE too, with the card view (see the
    module docstring). Reads need Redis alone (a ledger that is not durable can still be read), and
    raise `StoreUnavailableError` when Redis cannot answer.
    """

    def __init__(
        self,
        ledger: Ledger,
        audit: AuditSink,
        *,
        writable: Writable,
        changes: CardChanges,
        batch_limit: int = 50,
        passkeys: PasskeyService | None = None,
        require_passkey: PasskeyRequirement | None = None,
    ) -> None:
        self._ledger = ledger
        self._audit = audit
        self._writable = writable
        self._changes = changes
        self.passkeys = passkeys
        """The approvers' passkeys; None only where no approver can have one (a gateway without a console).
        With `require_passkey` naming cards but no passkeys, those cards cannot be approved by a person."""
        self._require_passkey = require_passkey or PasskeyRequirement()
        self.batch_limit = batch_limit
        """Most cards one batch decision may name (``[limits] batch_decisions``; `gateway.approvals.batch`)."""

    # -- reads ------------------------------------------------------------------------------------

    async def page(
        self,
        admin: Principal,
        *,
        state: CardState | None = None,
        tool: str | None = None,
        requester: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> CardListing:
        """One page of the cards of the admin's org matching every given filter, newest first.

        `limit` is clamped to 1..`MAX_LIST`. Filters apply to every card of the org: following
        `next_cursor` until it is None visits each card that existed at the first page once (see
        `gateway.store.ledger.pages` for what a page costs). A cursor the ledger did not issue is a
        VALIDATION_ERROR, audited. A key that is not an admin's sees an empty, final page.

        Raises:
            StoreUnavailableError: Redis did not answer.
        """
        if admin.kind is not KeyKind.ADMIN:
            return CardListing(code=ResultCode.OK)
        query = CardQuery(org=admin.org, state=state, tool=tool, requester=requester)
        try:
            found = await self._ledger.page(query, limit=max(1, min(limit, MAX_LIST)), cursor=cursor)
        except InvalidCursorError as error:
            await self._record("card.list", admin, "", None, ResultCode.VALIDATION_ERROR, error.problem)
            return CardListing(code=ResultCode.VALIDATION_ERROR, problems=(error.problem,))
        cards = [AdminCardSummary.from_card(card) for card in found.cards]
        return CardListing(code=ResultCode.OK, cards=cards, next_cursor=found.next_cursor)

    async def list(
        self,
        admin: Principal,
        *,
        state: CardState | None = None,
        tool: str | None = None,
        requester: str | None = None,
        limit: int | None = 100,
    ) -> Sequence[AdminCardSummary]:
        """The newest cards of the admin's org matching every given filter, newest first, following every page.

        At most `limit` cards (at least one); None lists them all. Filters apply to every card of
        the org, so this may read the whole org's history to find a few (see `page`).

        Raises:
            StoreUnavailableError: Redis did not answer.
        """
        wanted = None if limit is None else max(1, limit)
        cards: list[AdminCardSummary] = []
        cursor: str | None = None
        while wanted is None or len(cards) < wanted:
            size = MAX_LIST if wanted is None else min(wanted - len(cards), MAX_LIST)
            listing = await self.page(admin, state=state, tool=tool, requester=requester, limit=size, cursor=cursor)
            cards += listing.cards
            cursor = listing.next_cursor
            if cursor is None:
                break
        return cards

    async def overview(
        self, admin: Principal, window: OverviewWindow, *, backends: Mapping[str, bool] | None
    ) -> Overview:
        """The admin's org at a glance over `window` (`gateway.cards.overview`), by the ledger's clock.

        Reads the org's cards newest first until one was created more than `OPEN_LOOKBACK_MS` before the
        window began: every card of the window, and the open ones made before it (an open card older
        than that has long been expired by the ledger's sweep). `backends` is what the gateway's health
        checks report, passed through. A key that is not an admin's sees an org with no cards.

        Raises:
            StoreUnavailableError: Redis did not answer.
        """
        now_ms = await self._ledger.server_time_ms()
        if admin.kind is not KeyKind.ADMIN:
            return summarize((), org=admin.org, now_ms=now_ms, window=window, backends=backends)
        oldest_ms = now_ms - window.hours * HOUR_MS - OPEN_LOOKBACK_MS
        cards: list[Card] = []
        cursor: str | None = None
        while True:
            found = await self._ledger.page(CardQuery(org=admin.org), limit=MAX_LIST, cursor=cursor)
            cards += found.cards
            cursor = found.next_cursor
            if cursor is None or any(card.created_ms < oldest_ms for card in found.cards):
                break
        return summarize(cards, org=admin.org, now_ms=now_ms, window=window, backends=backends)

    async def show(self, admin: Principal, card_id: str) -> AdminCard | None:
        """The card with its history, or None if it does not exist or belongs to another org.

        A refused read is audited (``card.show``, NOT_FOUND, the same for both cases); a
        successful read is not, since it changes nothing and the console reloads cards often.

        Raises:
            StoreUnavailableError: Redis did not answer.
        """
        card = await self._ledger.get(card_id)
        if card is None or not visible_to(card, admin):
            await self._record("card.show", admin, card_id, card, ResultCode.NOT_FOUND, "no such card")
            return None
        return await self._view(card)

    @contextlib.asynccontextmanager
    async def watch(self, admin: Principal) -> AsyncIterator[CardWatch]:
        """Follow the changes to the cards `admin` may read, from the moment this is entered.

        Raises:
            StoreUnavailableError: Redis could not be reached to subscribe.
        """
        async with self._changes.subscribe() as subscription:
            yield CardWatch(self._ledger, subscription, admin)

    # -- decisions --------------------------------------------------------------------------------

    async def approve(
        self,
        admin: Principal,
        card_id: str,
        *,
        version: int,
        args_hash: str,
        comment: str = "",
        passkey: Mapping[str, Any] | None = None,
    ) -> CardActionResult:
        """Record `admin`'s approval of the card at exactly `version` and `args_hash`.

        The card becomes APPROVED when the last required distinct approval arrives. A card that needs
        the approver's passkey (`policies.passkey.needs_passkey`) is approved only with `passkey`, a
        WebAuthn assertion over this card, version and args_hash (`gateway.passkeys.assertion`): without
        one the answer is PASSKEY_REQUIRED, with one that does not verify PASSKEY_INVALID, and nothing
        changes. A verified assertion is recorded by the approval's own ledger transition.
        """
        problems = []
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            problems.append("version: a positive integer (the version you reviewed)")
        if not isinstance(args_hash, str) or not args_hash:
            problems.append("args_hash: required (the args_hash you reviewed)")
        if not isinstance(comment, str) or len(comment) > MAX_TEXT:
            problems.append(f"comment: text of at most {MAX_TEXT} characters")
        if passkey is not None and not isinstance(passkey, Mapping):
            problems.append("passkey: a WebAuthn assertion (an object)")
        signed: list[str] = []

        async def countersigned(card: Card) -> tuple[ResultCode, str] | None:
            registered = self.passkeys is not None and await self.passkeys.has_any(admin)
            if passkey is None:
                if not needs_passkey(card, self._require_passkey, registered=registered):
                    return None
                hint = (
                    "approve it in the console with your passkey"
                    if registered
                    else "register a passkey in the console (Passkeys, Add a passkey), then approve it there"
                )
                return (
                    ResultCode.PASSKEY_REQUIRED,
                    f"this card needs your passkey: an API key alone cannot approve it; {hint}",
                )
            if self.passkeys is None:
                return ResultCode.PASSKEY_INVALID, "this gateway has no passkeys configured"
            verified = await self.passkeys.verify_approval(
                admin, passkey, card_id=card_id, version=version, args_hash=args_hash
            )
            if verified.assertion is None:
                return verified.code, verified.message
            signed.append(verified.assertion.to_json())
            return None

        return await self._decide(
            "card.approve",
            admin,
            card_id,
            problems,
            lambda: self._ledger.approve(
                card_id,
                approver=admin.subject,
                version=version,
                args_hash=args_hash,
                comment=comment,
                passkey=signed[0] if signed else "",
                identity=identity_of(admin.subject),
            ),
            gate=countersigned,
        )

    async def reject(
        self, admin: Principal, card_id: str, *, reason: str, version: int | None = None, args_hash: str | None = None
    ) -> CardActionResult:
        """Veto a PENDING card; `reason` is required and is kept on the card, attributed to `admin`.

        With `version` and `args_hash` (both or neither) the veto binds to the card as reviewed: a card
        that changed since is refused (CONFLICT), as an approval is."""
        problems = []
        if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_TEXT:
            problems.append(f"reason: required, non-empty text of at most {MAX_TEXT} characters")
        if (version is None) != (args_hash is None) or (version is not None and (version < 1 or not args_hash)):
            problems.append("version and args_hash: both (the ones you reviewed) or neither")
        text = reason.strip() if isinstance(reason, str) else ""
        who = admin.subject
        return await self._decide(
            "card.reject",
            admin,
            card_id,
            problems,
            lambda: self._ledger.reject(card_id, admin=who, reason=text, version=version, args_hash=args_hash),
        )

    async def cancel(self, admin: Principal, card_id: str) -> CardActionResult:
        """Cancel a card that is still PENDING or APPROVED (not yet executing)."""
        return await self._decide(
            "card.cancel", admin, card_id, [], lambda: self._ledger.cancel(card_id, actor=admin.subject)
        )

    async def resolve(
        self, admin: Principal, card_id: str, *, outcome: str, evidence: Mapping[str, Any]
    ) -> CardActionResult:
        """Settle a NEEDS_RECONCILIATION card as SUCCEEDED or FAILED, with the evidence checked."""
        problems = []
        if outcome not in OUTCOMES:
            problems.append("outcome: SUCCEEDED or FAILED")
        if not isinstance(evidence, Mapping) or not evidence:
            problems.append("evidence: a non-empty JSON object (what you checked, and where)")
        else:
            try:
                size = len(json.dumps(evidence, separators=(",", ":")).encode())
            except (TypeError, ValueError):
                problems.append("evidence: must be plain JSON")
            else:
                if size > MAX_EVIDENCE_BYTES:
                    problems.append(f"evidence: at most {MAX_EVIDENCE_BYTES} bytes as JSON")
        return await self._decide(
            "card.resolve",
            admin,
            card_id,
            problems,
            lambda: self._ledger.resolve(card_id, admin=admin.subject, outcome=outcome, evidence=evidence),
        )

    # -- the one path every decision takes --------------------------------------------------------

    async def _decide(
        self,
        action: str,
        admin: Principal,
        card_id: str,
        problems: Sequence[str],
        transition: Callable[[], Awaitable[Transition]],
        *,
        gate: Callable[[Card], Awaitable[tuple[ResultCode, str] | None]] | None = None,
    ) -> CardActionResult:
        if problems:
            message = "; ".join(problems)
            await self._record(action, admin, card_id, None, ResultCode.VALIDATION_ERROR, message)
            return CardActionResult(code=ResultCode.VALIDATION_ERROR, message=message, problems=tuple(problems))
        card: Card | None = None
        sent = False
        try:
            card = await self._ledger.get(card_id)
            if card is None:
                return await self._refuse(action, admin, card_id, None, ResultCode.NOT_FOUND, "no such card")
            verdict = may_decide(card, admin)
            if not verdict.allowed:
                if verdict.code is Code.NOT_FOUND:  # another org: answered exactly as a missing card
                    return await self._refuse(action, admin, card_id, card, ResultCode.NOT_FOUND, "no such card")
                view = await self._view(card)
                denied = ResultCode.PERMISSION_DENIED
                return await self._refuse(action, admin, card_id, card, denied, verdict.reason, view)
            if not await self._writable():
                message = "the ledger is not durable or not reachable; nothing was changed"
                return await self._refuse(action, admin, card_id, card, ResultCode.LEDGER_UNAVAILABLE, message)
            refused = await gate(card) if gate is not None else None
            if refused is not None:
                view = await self._view(card)
                return await self._refuse(action, admin, card_id, card, refused[0], refused[1], view)
            sent = True
            result = await transition()
            now = result.card or card
            view = await self._view(now)
        except StoreUnavailableError as error:
            # Before the transition was sent nothing changed. After, redis-py may have retried or
            # lost the answer: the decision may or may not be recorded, so the admin must reload.
            message = (
                "the ledger stopped answering during the decision; it may have been recorded, reload the card"
                if sent
                else "the ledger is unreachable; nothing was changed"
            )
            detail = f"{message} ({error.cause})"
            return await self._refuse(action, admin, card_id, card, ResultCode.LEDGER_UNAVAILABLE, detail)
        if result.status is TransitionStatus.ERR_NOT_DURABLE:
            verb, why = action.removeprefix("card."), "; ".join(result.problems)
            message = (
                f"{verb}: recorded but not confirmed durable ({why}); it stands only if the ledger keeps it: "
                f"check the card (now {now.state.value} at version {now.version}) before acting again"
                if result.unconfirmed
                else f"{verb}: not applied, and the ledger is not durable ({why}); check the card before acting again"
            )
            unavailable = ResultCode.LEDGER_UNAVAILABLE
            return await self._refuse(action, admin, card_id, now, unavailable, message, view, ledger=result.status)
        if result.ok:
            await self._record(action, admin, card_id, now, ResultCode.OK, "", ledger=result.status)
            return CardActionResult(code=ResultCode.OK, message=_done(action, now), card_view=view)
        code, message = _LEDGER_REFUSALS.get(result.status, (ResultCode.CONFLICT, "the ledger refused this action"))
        if code is ResultCode.NOT_FOUND:
            return await self._refuse(action, admin, card_id, None, code, message, ledger=result.status)
        if code is ResultCode.CONFLICT:
            message = f"{message}; the card is now {now.state.value} at version {now.version}"
        return await self._refuse(action, admin, card_id, now, code, message, view, ledger=result.status)

    async def _refuse(
        self,
        action: str,
        admin: Principal,
        card_id: str,
        card: Card | None,
        code: ResultCode,
        message: str,
        view: AdminCard | None = None,
        *,
        ledger: str = "",
    ) -> CardActionResult:
        await self._record(action, admin, card_id, card, code, message, ledger=ledger)
        return CardActionResult(code=code, message=message, card_view=view)

    async def _record(
        self,
        action: str,
        admin: Principal,
        card_id: str,
        card: Card | None,
        code: ResultCode,
        reason: str,
        *,
        ledger: str = "",
    ) -> None:
        # Only gateway-written facts: ids, states, codes. Never the agent's text, the admin's
        # comment or reason (those live on the card's own hash-chained history).
        extra = {"card_id": card_id[:100]} if card_id else {}
        # A card of another org must leave no trace of its existence in this admin's audit view.
        if card is not None and code is not ResultCode.NOT_FOUND:
            extra |= {"state": card.state.value, "version": str(card.version)}
        if ledger:
            extra["ledger"] = ledger
        await self._audit.record(
            AuditEvent.by(
                admin,
                action=action,
                outcome="ok" if code is ResultCode.OK else "deny",
                tool=card.tool if card is not None and code is not ResultCode.NOT_FOUND else "",
                code="" if code is ResultCode.OK else code.value,
                reason=reason,
                extra=extra,
            )
        )

    async def _view(self, card: Card) -> AdminCard:
        return AdminCard.from_card(card, await self._ledger.events(card.card_id))


def _done(action: str, card: Card) -> str:
    verb = action.removeprefix("card.")
    if verb == "approve" and card.state is CardState.PENDING:
        return f"approval recorded ({len(card.approvers)}/{card.approvals_required}); the card is still PENDING"
    return f"{verb}: the card is now {card.state.value} at version {card.version}"
