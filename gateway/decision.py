"""A policy's verdict: allowed, or denied with one of the stable refusal codes of `gateway.codes`."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.codes import Code

__all__ = ["Decision"]


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
