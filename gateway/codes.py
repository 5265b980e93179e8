"""The stable refusal codes: what every refusal carries, to the model, the admin and the audit trail."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Code"]


class Code(StrEnum):
    """Stable refusal codes. Agents and tooling match on these, never on messages."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    """The request carried no credential the surface accepts (missing, unknown, revoked, wrong-kind key,
    or an invalid token); which of these is never said, so a refusal does not tell whether a key exists."""
    PERMISSION_DENIED = "PERMISSION_DENIED"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    INVALID_REQUEST = "INVALID_REQUEST"
    """The transport request itself is malformed (a duplicated header, a bad JSON-RPC id, a batch)."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    RATE_LIMITED = "RATE_LIMITED"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    """A standing quota is full (open cards per requester, sessions per key). Not retryable as a code:
    waiting a backoff does not free a card slot; a decision on a card does. The session quota's refusal
    says ``retryable: true`` with ``Retry-After`` in its own data, as an idle session frees by itself."""
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    INFEASIBLE = "INFEASIBLE"
    """The backend would certainly refuse this write (slot taken, date past, amount above the refundable
    maximum); no card was made. The details say why; the same call fails again unless something changes."""
    PRECONDITION_CHANGED = "PRECONDITION_CHANGED"
    """What the approver decided on changed before an approved write was sent; nothing was sent."""
    RECEIPT_REFUSED = "RECEIPT_REFUSED"
    """The backend refused the approved write's signed receipt (missing, not verifying with the gateway's
    published keys, or for another request); it applied nothing. An operator checks the gateway's keys."""
    REQUESTER_REVOKED = "REQUESTER_REVOKED"
    """The key or the person (or an agent acting for them) that proposed an approved write was revoked before
    it ran; the card ends FAILED and nothing was sent."""
    REJECTED = "REJECTED"
    """An administrator rejected the proposed write: nothing was written."""
    EXPIRED = "EXPIRED"
    """The proposed write was not decided, or not run, within its card's window: nothing was written."""
    WRITE_FAILED = "WRITE_FAILED"
    """The approved write was sent and the backend definitively refused it."""
    CANCELLED = "CANCELLED"
    """The requester withdrew the proposed write before it ran: nothing was written."""
    UPSTREAM_UNAVAILABLE = "UPSTREAM_UNAVAILABLE"
    UPSTREAM_TIMEOUT = "UPSTREAM_TIMEOUT"
    UPSTREAM_ERROR = "UPSTREAM_ERROR"
    LEDGER_UNAVAILABLE = "LEDGER_UNAVAILABLE"
    INTERNAL_ERROR = "INTERNAL_ERROR"

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed later without changing its arguments."""
        return self in _RETRYABLE


_RETRYABLE = frozenset({Code.RATE_LIMITED, Code.UPSTREAM_UNAVAILABLE, Code.UPSTREAM_TIMEOUT, Code.LEDGER_UNAVAILABLE})
