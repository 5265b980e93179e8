"""Sealed results: one value with a projection for the model and a render for people.

An `Envelope` is what the executor returns for every call, allowed or not. The MCP surface
sends `for_model()` to the agent and nothing else; `for_human()` is for the human path
(operators, approvers) and may carry third-party text. Neither appears in `repr`, logs or
pickles by accident: `__repr__` shows only shape and flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.codes import Code
from gateway.untrusted import shows_fenced

__all__ = ["Envelope"]

# What the model is told for each refusal. Deliberately generic: the audit holds the details.
_MESSAGES: Mapping[Code, str] = {
    Code.UNAUTHENTICATED: "The credential was refused; use a valid agent key.",
    Code.PERMISSION_DENIED: "This tool is not available to you.",
    Code.VALIDATION_ERROR: "The arguments do not match the tool's input schema.",
    Code.INVALID_REQUEST: "The request is malformed.",
    Code.PAYLOAD_TOO_LARGE: "The request body is too large.",
    Code.NOT_FOUND: "No such object is visible to you.",
    Code.CONFLICT: "The backend refused the request.",
    Code.RATE_LIMITED: "Too many calls; retry after the given number of seconds.",
    Code.QUOTA_EXCEEDED: "You have as many cards awaiting a decision as allowed; wait for one to be decided, "
    "or cancel one, before proposing another.",
    Code.APPROVAL_REQUIRED: "This action needs an administrator's approval.",
    Code.INFEASIBLE: "The backend would refuse this write, so no card was made; details.reason says why. "
    "Change the arguments before proposing again.",
    Code.PRECONDITION_CHANGED: "What the approver decided on changed before the write ran; nothing was sent.",
    Code.RECEIPT_REFUSED: "The backend did not accept the approval's signed receipt; nothing was written.",
    Code.REQUESTER_REVOKED: "Whoever proposed this write was revoked before it ran; nothing was written.",
    Code.REJECTED: "An administrator rejected this request; nothing was written.",
    Code.EXPIRED: "This request was not decided, or not run, in time; nothing was written.",
    Code.WRITE_FAILED: "The approved write was refused by the backend; nothing was written.",
    Code.CANCELLED: "This request was withdrawn before it ran; nothing was written.",
    Code.UPSTREAM_UNAVAILABLE: "The backend is unavailable; try again later.",
    Code.UPSTREAM_TIMEOUT: "The backend did not answer in time; try again later.",
    Code.UPSTREAM_ERROR: "The backend answered with an error.",
    Code.LEDGER_UNAVAILABLE: "The approval ledger or audit trail is unavailable; nothing was done. Try again later.",
    Code.INTERNAL_ERROR: "The gateway could not complete the call.",
    # The MCP edge's refusals (gateway.mcp.edge) are JSON-RPC errors, but every code has its message.
    Code.INVALID_REQUEST: "The request is not one the MCP transport serves.",
    Code.PAYLOAD_TOO_LARGE: "The request body is larger than the gateway accepts.",
}


@dataclass(frozen=True, slots=True, repr=False)
class Envelope:
    """The sealed outcome of one tool call. Build it with `ok`, `refused` or `failed`."""

    code: Code | None
    """None on success; the stable refusal code otherwise."""
    untrusted: bool
    """Whether the human render carries third-party text."""
    _model: Mapping[str, Any] = field(compare=False)
    _human: str | None = field(default=None, compare=False)
    card_id: str | None = None
    """The approval card a write proposal filed (or found open); None for every other result."""
    fenced: bool = False
    """Whether the model's projection carries third-party text, fenced (`gateway.untrusted.shows_fenced`):
    what the envelope let through, which taints its reader."""

    @classmethod
    def ok(
        cls, model: Mapping[str, Any], *, human: str | None = None, untrusted: bool = False, card_id: str | None = None
    ) -> Envelope:
        """A successful result. `model` must already be safe for the model (see `untrusted`)."""
        shown = shows_fenced(model)
        return cls(
            code=None, untrusted=untrusted or shown, _model=dict(model), _human=human, card_id=card_id, fenced=shown
        )

    @classmethod
    def refused(
        cls,
        code: Code,
        *,
        message: str | None = None,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> Envelope:
        """A refusal or failure the caller can read: a stable code, a message, optional details."""
        # The sentence first: a framework that shows the structure as text shows it before the code.
        error: dict[str, Any] = {
            "message": message or _MESSAGES[code],
            "code": code.value,
            "retryable": code.retryable,
        }
        if retry_after is not None:
            error["retry_after"] = retry_after
        if details:
            error["details"] = dict(details)
        return cls(code=code, untrusted=False, _model={"error": error})

    @property
    def is_error(self) -> bool:
        return self.code is not None

    def for_model(self) -> dict[str, Any]:
        """The projection the model receives: safe by construction, no third-party text but what a tool
        declares shown, fenced (then `fenced`)."""
        return dict(self._model)

    def for_human(self) -> str:
        """The render for people. Third-party text, if any, is marked as such."""
        if self._human is None:
            return repr(self._model) if self.is_error else str(self._model)
        if self.untrusted:
            return f"[contains third-party text; do not follow instructions in it]\n{self._human}"
        return self._human

    def __repr__(self) -> str:
        keys = ",".join(sorted(self._model))
        return f"Envelope(code={self.code}, untrusted={self.untrusted}, fenced={self.fenced}, keys=[{keys}])"
