"""What an attempt at a write means, and what to do about an uncertain one. Pure functions.

Every attempt is classified: nothing sent, a 429 (the backend refused to process it) or a 401 (it did not
take the gateway's own credentials) -> safe to retry with the same key, after the backend's Retry-After or
the backoff; a status the contract says means
"already applied" -> SUCCEEDED; a definitive refusal of the first send -> FAILED; anything that
may have reached the backend, and a resend's refusal -> UNKNOWN, which leads to a status query and
never to a blind resend. An UNKNOWN write that no status query settles within the reconciliation
horizon goes to a person (NEEDS_RECONCILIATION): nothing is asked about forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.errors import UpstreamError, UpstreamRateLimitedError
from gateway.tools.declarations import UNAUTHENTICATED, WriteContract, WriteStatus

__all__ = ["Attempt", "Next", "ReconcileStep", "backoff_ms", "classify", "reconcile_step", "retry_delay_ms"]


class Attempt(StrEnum):
    NOT_SENT = "NOT_SENT"
    """Not applied, certainly: never sent, or refused unprocessed (429). Released to be sent again."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"


def classify(error: UpstreamError | None, contract: WriteContract, *, resend: bool) -> Attempt:
    """Classify one attempt from the error it raised (None: the backend confirmed the write).

    `resend`: the card's key was sent before (the write was UNKNOWN and is being sent again). A
    refusal then answers only this request: the earlier one may still be in flight or may have
    landed, and a backend may refuse a key it is still working on (409). So a resend is never
    FAILED here; only the backend's record, read by a status query, can say it did not apply.
    """
    if error is None:
        return Attempt.SUCCEEDED
    if not error.sent:
        return Attempt.NOT_SENT
    if isinstance(error, UpstreamRateLimitedError):
        # 429: the backend did not process this request (RFC 6585), so it did not apply it. The card
        # is released with its key: a first send goes back to APPROVED, to be sent after the wait; a
        # resend goes back to UNKNOWN, since the earlier send may still have landed.
        return Attempt.NOT_SENT
    if error.status == UNAUTHENTICATED and UNAUTHENTICATED not in contract.not_applied_statuses:
        # 401: the backend did not authenticate the gateway, so it processed nothing; released with its key like a
        # 429, and sent again after the backoff with what the gateway sends then (a renewed token, a fresh
        # identity). A contract that lists 401 as "not applied" makes it FAILED instead.
        return Attempt.NOT_SENT
    if error.status is not None and error.status in contract.applied_statuses:
        # The API's own answer that the write is there already (its duplicate check on a stored key): for a
        # first send or a resend alike, the write is applied.
        return Attempt.SUCCEEDED
    if error.status is not None and error.status in contract.not_applied_statuses and not resend:
        return Attempt.FAILED
    # A timeout after sending, a 5xx, a dropped connection, a 2xx we cannot parse, a status the
    # contract does not call "not applied": the write may have landed.
    return Attempt.UNKNOWN


class Next(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RESCHEDULE = "RESCHEDULE"
    RESEND = "RESEND"
    NEEDS_RECONCILIATION = "NEEDS_RECONCILIATION"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReconcileStep:
    next: Next
    at_ms: int = 0
    reason: str = ""


def backoff_ms(attempts: int, *, base_ms: int = 500, cap_ms: int = 60_000) -> int:
    """Delay before the next try: doubling from `base_ms` with each attempt, capped."""
    return int(min(cap_ms, base_ms * (2 ** min(max(attempts, 0), 16))))


def retry_delay_ms(error: UpstreamError | None, attempts: int) -> int:
    """Delay before a released write is sent again: the backoff, or the backend's Retry-After if longer."""
    delay = backoff_ms(attempts)
    if isinstance(error, UpstreamRateLimitedError):
        delay = max(delay, int(error.retry_after * 1000))
    return delay


def _recheck_after_ms(elapsed_ms: int) -> int:
    """Status queries back off with the time already waited: half of it, within 0.5 s .. 60 s."""
    return int(min(60_000, max(500, elapsed_ms // 2)))


def reconcile_step(
    status: WriteStatus | None,
    contract: WriteContract,
    *,
    now_ms: int,
    first_dispatched_ms: int,
    dispatched_ms: int,
    execute_by_ms: int,
    horizon_ms: int,
    sends: int,
    wait_ms: int = 0,
) -> ReconcileStep:
    """What to do with an UNKNOWN write after a status query (`status` None: the query failed).

    Found -> SUCCEEDED or FAILED, at any time. Otherwise, once `horizon_ms` has passed since the
    first send (`first_dispatched_ms`), a person must reconcile: an uncertain write is never
    rescheduled or resent forever. Before that: not found within the settle period of the latest
    send (`dispatched_ms`) -> ask again later; not found after it -> resend with the same key, but only
    while the backend still remembers the key of the first send (with a margin), only before the
    card's `execute_by_ms` (a write is never sent late) and only while the card has been resent fewer
    than the contract's `max_resends` times (`sends` counts every send, the first included); otherwise
    a person must reconcile. The settle period doubles with each send (exponential backoff: after the
    n-th send a lookup waits ``settle * 2**(n-1)``), so resends thin out instead of following every
    lookup. A rescheduled query is never later than the horizon. `wait_ms`: the backend refused the status
    query with a 429 and asked for this wait (its ``Retry-After``); the next query is no sooner.
    """
    if status is not None and status.state == "applied":
        return ReconcileStep(next=Next.SUCCEEDED, reason="backend has the write")
    if status is not None and status.state == "refused":
        return ReconcileStep(next=Next.FAILED, reason="backend refused the write")
    horizon_at = first_dispatched_ms + horizon_ms
    if now_ms >= horizon_at:
        reason = f"not settled within {horizon_ms / 1000:g} s of the first send; a person must reconcile"
        return ReconcileStep(next=Next.NEEDS_RECONCILIATION, reason=reason)
    if status is None:
        at_ms = now_ms + max(_recheck_after_ms(now_ms - dispatched_ms), wait_ms)
        return ReconcileStep(next=Next.RESCHEDULE, at_ms=min(at_ms, horizon_at), reason="status query failed")
    settle_ms = int(contract.settle_seconds * 1000) * 2 ** min(max(sends - 1, 0), 16)
    if now_ms < dispatched_ms + settle_ms:
        at_ms = min(dispatched_ms + settle_ms, horizon_at)
        return ReconcileStep(next=Next.RESCHEDULE, at_ms=at_ms, reason="within settle period")
    # The first send may have landed and been remembered from then: a later resend does not make the
    # backend remember that record any longer, so "still remembered" counts from the first send.
    remembered_until = first_dispatched_ms + int(contract.key_retention_seconds * 1000 * 0.9)
    if contract.dedupes_on_key and now_ms < remembered_until:
        if now_ms >= execute_by_ms:
            reason = "not found after settling, but execute_by has passed: a resend would be late"
            return ReconcileStep(next=Next.NEEDS_RECONCILIATION, reason=reason)
        if sends - 1 >= contract.max_resends:
            reason = f"not found after {sends} sends; the contract allows {contract.max_resends} resends"
            return ReconcileStep(next=Next.NEEDS_RECONCILIATION, reason=reason)
        return ReconcileStep(next=Next.RESEND, reason="not found after settling; key still remembered")
    if not contract.dedupes_on_key:
        reason = "not found, and the backend does not dedupe: a resend could apply it twice; a person must reconcile"
        return ReconcileStep(next=Next.NEEDS_RECONCILIATION, reason=reason)
    return ReconcileStep(next=Next.NEEDS_RECONCILIATION, reason="not found and the key may be forgotten")
