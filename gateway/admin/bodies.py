"""The admin API's bodies: what a request may send, and what each answer holds, as pydantic models.

Who uses it: `gateway.admin.api` parses requests with the request models (unknown fields
refused; JSON bodies strictly typed) and sends every answer as a response model's
``model_dump(mode="json")``, and its OpenAPI document is generated from these same classes. The
cards inside the answers are the views of `gateway.cards.views`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import SkipJsonSchema

from gateway.approvals.service import MAX_LIST, MAX_TEXT
from gateway.cards.card import CardState
from gateway.cards.overview import OverviewWindow
from gateway.cards.views import AdminCard, AdminCardSummary, ResultCode
from gateway.store.ledger.pages import MAX_CURSOR

__all__ = [
    "ERROR_CODES",
    "AdminError",
    "AdminErrorDetail",
    "ApproveBody",
    "CancelBody",
    "CardActionDone",
    "CardDecisionBody",
    "CardList",
    "CardShown",
    "DecisionResult",
    "DecisionsBody",
    "DecisionsDone",
    "ListQuery",
    "OverviewQuery",
    "RejectBody",
    "ResolveBody",
]

ERROR_CODES = (
    *(code.value for code in ResultCode if code is not ResultCode.OK),
    "METHOD_NOT_ALLOWED",
    "HTTP_ERROR",
    "INTERNAL_ERROR",
)
"""Every ``error.code`` the card routes answer: a refusal's `ResultCode`, or why no route took the request."""

_Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
_RequiredText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT)]


# -- requests -------------------------------------------------------------------------------------


class ApproveBody(BaseModel):
    """Approve the card exactly as reviewed: its `version` and `args_hash` as shown."""

    model_config = ConfigDict(extra="forbid", strict=True)
    version: int = Field(ge=1)
    args_hash: str = Field(min_length=1, max_length=200)
    comment: _Text = ""
    passkey: dict[str, Any] | None = None
    """The approver's WebAuthn assertion over this card, version and args_hash (``navigator.credentials.get``
    with the options of ``POST /passkeys/challenge``, as JSON); required when the card needs a passkey."""


class RejectBody(BaseModel):
    """Veto the card; the reason is kept on it, attributed to the admin. With the `version` and
    `args_hash` reviewed (both or neither), only the card exactly as reviewed is vetoed."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: _RequiredText
    version: int | None = Field(default=None, ge=1)
    args_hash: str | None = Field(default=None, min_length=1, max_length=200)


class CardDecisionBody(BaseModel):
    """One reviewed card of a batch: the decision, bound to the version and args_hash reviewed."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)
    card_id: str = Field(min_length=1, max_length=100)
    decision: Literal["approve", "reject"]
    version: int = Field(ge=1)
    args_hash: str = Field(min_length=1, max_length=200)
    reason: _Text = ""
    """The approval's comment (optional), or the rejection's reason (required)."""


class DecisionsBody(BaseModel):
    """Several reviewed cards, each decided by its own transition; at most ``[limits] batch_decisions``."""

    model_config = ConfigDict(extra="forbid", strict=True)
    decisions: list[CardDecisionBody]


class CancelBody(BaseModel):
    """Cancel a PENDING or APPROVED card. The body may be empty."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ResolveBody(BaseModel):
    """Settle a NEEDS_RECONCILIATION card with what the admin checked at the backend."""

    model_config = ConfigDict(extra="forbid", strict=True)
    outcome: Literal["SUCCEEDED", "FAILED"]
    evidence: dict[str, Any] = Field(min_length=1)


class ListQuery(BaseModel):
    """Filters and paging of ``GET /cards``; query strings, so values are coerced (not strict)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    state: CardState | None = None
    tool: str | None = None
    requester: str | None = None
    """The requesting agent's subject."""
    limit: int = Field(default=100, ge=1, le=MAX_LIST)
    """Most cards in this page; a page may hold fewer and still have a next_cursor."""
    cursor: str | None = Field(default=None, min_length=1, max_length=MAX_CURSOR)
    """The next_cursor of the previous page, unchanged, with the same filters; absent for the first page."""


class OverviewQuery(BaseModel):
    """The window of ``GET /overview``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    window: OverviewWindow = OverviewWindow.DAY
    """``24h`` (hourly, the last day) or ``7d`` (hourly, the last week)."""


# -- responses ------------------------------------------------------------------------------------


def _no_default(schema: dict[str, Any]) -> None:
    # Left out when there is none, never sent as null: the schema must not offer null as a default.
    schema.pop("default", None)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class CardList(_Body):
    """One page of the matching cards. Follow next_cursor until it is null to see every one."""

    cards: list[AdminCardSummary]
    """Newest first."""
    next_cursor: str | None
    """Pass it as `cursor` for the next page; null when no matching card is left."""


class CardShown(_Body):
    card: AdminCard


class CardActionDone(_Body):
    """The decision was recorded."""

    code: Literal["OK"]
    message: str
    card: AdminCard
    """The card as it is now."""


class DecisionResult(_Body):
    """What came of one decision of a batch."""

    card_id: str
    decision: Literal["approve", "reject"]
    code: str = Field(json_schema_extra={"enum": [code.value for code in ResultCode]})
    """OK, or the stable code the same decision alone would have been refused with."""
    message: str
    state: CardState | None
    """The card's state now, when it is known (not for NOT_FOUND or VALIDATION_ERROR)."""
    version: int | None


class DecisionsDone(_Body):
    """The batch was taken: one result per decision, in the order sent."""

    code: Literal["OK"]
    message: str
    results: list[DecisionResult]


class AdminErrorDetail(_Body):
    code: str = Field(json_schema_extra={"enum": list(ERROR_CODES)})
    message: str
    problems: list[str] = Field(default_factory=list, exclude_if=lambda problems: not problems)
    """What was wrong with the request; only on VALIDATION_ERROR."""


class AdminError(_Body):
    error: AdminErrorDetail
    card: AdminCard | SkipJsonSchema[None] = Field(
        default=None, exclude_if=lambda card: card is None, json_schema_extra=_no_default
    )
    """The card as it is now; on PERMISSION_DENIED and CONFLICT only, so the admin can look again."""
