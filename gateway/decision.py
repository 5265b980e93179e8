"""Verdicts and the stable codes every refusal carries."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Code", "Decision"]


class Code(StrEnum):
    """Stable refusal codes. Agents and tooling match on these, never on messages."""

    PERMISSION_DENIED = "PERMISSION_DENIED"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    NOT_FOUND = "NOT_FOUND"
    CONFLICT = "CONFLICT"
    RATE_LIMITED = "RATE_LIMITED"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
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


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """The verdict of a policy: allowed, or denied with a code and a reason.

    Policies return a `Decision` rather than raising, so the executor can audit every verdict
    the same way. `reason` is for the audit trail and operators; it may name internal facts (the
    role that was missing) and is not shown to the model as is.
    """

    allowed: bool
    code: Code | None = None
    reason: str = ""

    @classmethod
    def allow(cls, reason: str = "") -> Decision:
        return cls(allowed=True, reason=reason)

    @classmethod
    def deny(cls, code: Code, reason: str) -> Decision:
        return cls(allowed=False, code=code, reason=reason)
