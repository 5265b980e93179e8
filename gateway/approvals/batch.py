"""Batch decisions: an explicit list of reviewed cards, each decided on its own.

Who calls it: the admin API (``POST /admin/api/cards/decisions``) and ``countersign cards approve ID
ID ...``. Each item names one card, the decision (approve or reject), the version and args_hash the
admin reviewed, and a comment (approve) or reason (reject). Each goes through `CardService.approve`
or `CardService.reject` exactly as a single decision does: its own atomic ledger transition bound to
what was reviewed, its own audit event, its own result code. Nothing is all or nothing: a stale or
already decided card refuses only itself, and the answer lists one result per item, in order.

The list as a whole is refused, audited (``card.batch``) and with no card touched, when it is empty,
longer than `CardService.batch_limit` (``[limits] batch_decisions``), or names a card twice (two
decisions on one card in one breath are a mistake, whichever lands first). A batch taken is audited
once more as ``card.batch`` with its counts, beside each card's own event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.approvals.service import CardService
from gateway.audit.events import AuditEvent, AuditSink
from gateway.cards.views import CardActionResult, ResultCode
from gateway.principal import Principal

__all__ = ["BatchItem", "BatchOutcome", "decide_batch"]


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchItem:
    """One reviewed card and what to do with it."""

    card_id: str
    decision: Literal["approve", "reject"]
    version: int
    args_hash: str
    reason: str = ""
    """The approval's comment, or the rejection's reason (required for a rejection)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchOutcome:
    """OK with one result per item, in order; or VALIDATION_ERROR with `problems` and no result."""

    code: ResultCode
    message: str
    results: tuple[CardActionResult, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is ResultCode.OK


async def decide_batch(
    service: CardService, audit: AuditSink, admin: Principal, items: Sequence[BatchItem]
) -> BatchOutcome:
    """Decide each of `items` as `admin`, one transition each, or refuse the list as a whole (see the module)."""
    problems = _problems(items, service.batch_limit)
    if problems:
        message = "; ".join(problems)
        await audit.record(
            AuditEvent.refusal(
                admin, "card.batch", ResultCode.VALIDATION_ERROR.value, message, {"cards": str(len(items))}
            )
        )
        return BatchOutcome(code=ResultCode.VALIDATION_ERROR, message=message, problems=tuple(problems))
    results: list[CardActionResult] = []
    for item in items:
        if item.decision == "approve":
            result = await service.approve(
                admin, item.card_id, version=item.version, args_hash=item.args_hash, comment=item.reason
            )
        else:
            result = await service.reject(
                admin, item.card_id, reason=item.reason, version=item.version, args_hash=item.args_hash
            )
        results.append(result)
    done = sum(result.ok for result in results)
    message = f"{len(results)} decisions: {done} done, {len(results) - done} refused"
    await audit.record(
        AuditEvent.by(
            admin,
            action="card.batch",
            outcome="ok",
            reason=message,
            extra={"cards": str(len(results)), "done": str(done)},
        )
    )
    return BatchOutcome(code=ResultCode.OK, message=message, results=tuple(results))


def _problems(items: Sequence[BatchItem], limit: int) -> list[str]:
    problems = []
    if not items:
        problems.append("decisions: name at least one card")
    if len(items) > limit:
        problems.append(f"decisions: at most {limit} cards per batch ([limits] batch_decisions), got {len(items)}")
    ids = [item.card_id for item in items]
    if twice := sorted({card_id for card_id in ids if ids.count(card_id) > 1}):
        problems.append(f"decisions: each card once; named more than once: {', '.join(twice)[:300]}")
    return problems
