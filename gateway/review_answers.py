"""What a registry admin's review answers, for both kinds of backend a service brings: registered adapters
(`gateway.registry`) and fronted MCP servers (`gateway.upstreams`).

Both reviews answer with one type (`ReviewResult`, of the entry each reviews), refuse with the same four codes,
answered with the same HTTP statuses (`REVIEW_STATUS`), and list every problem of a refused body the same way
(`validation_problems`), and show what in the texts a model would read an admin should look at the same way
(`SafetyFlag`), so a script that drives one drives the other. Plain data: no layer, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gateway.audit.events import AuditEvent
from gateway.codes import Code
from gateway.principal import Principal
from policies.text_safety import FlagCode

__all__ = ["REVIEW_STATUS", "ReviewResult", "SafetyFlag", "validation_problems"]

REVIEW_STATUS: Mapping[str, int] = MappingProxyType(
    {Code.VALIDATION_ERROR: 422, Code.PERMISSION_DENIED: 403, Code.NOT_FOUND: 404, Code.CONFLICT: 409}
)
"""Every refusal code of a review, with the status the review's routes answer it with."""


class SafetyFlag(BaseModel):
    """Something in a text the model would read (a manifest's, or a fronted tool's definition) that an admin should
    look at before accepting it (`policies.text_safety`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    code: FlagCode
    field: str
    """Where the text is, e.g. ``tools[2].input_schema.properties.amount.description``."""
    excerpt: str


def validation_problems(error: ValidationError, whole: str) -> tuple[str, ...]:
    """Each problem of a refused body, by where it is (`whole` when it is the body itself), without the input."""
    return tuple(
        f"{'.'.join(str(part) for part in item['loc']) or whole}: {item['msg']}"
        for item in error.errors(include_url=False, include_input=False)
    )


Reviewed = TypeVar("Reviewed", covariant=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class ReviewResult(Generic[Reviewed]):
    """What a review service answers one request: it went through (``OK``), or it was refused with a code of
    `REVIEW_STATUS`; and the entry the answer concerns, as it is now.

    The registry's review answers it of a `Registration` (`gateway.registry.service`), the review of fronted MCP
    servers of a `FrontedServer` (`gateway.upstreams.tool_reviews`); their routes and commands read it alike.
    """

    code: str
    """``OK``, ``VALIDATION_ERROR``, ``PERMISSION_DENIED``, ``NOT_FOUND`` or ``CONFLICT``."""
    message: str = ""
    """One sentence for the person; "" when the code says it all (see `said`)."""
    problems: tuple[str, ...] = ()
    """Everything wrong with a refused body or manifest, one line each."""
    entry: Reviewed | None = None
    """What the answer concerns, as it is now; None when there is nothing to show (a removal, most refusals)."""
    extra: Mapping[str, str] = field(default_factory=dict)
    """Recorded in the answer's audit event, beside what the service records of every answer."""

    @property
    def ok(self) -> bool:
        return self.code == "OK"

    @property
    def said(self) -> str:
        """What a refusal says: the message, or the code in lower case when there is none."""
        return self.message or self.code.lower()

    def audit_event(self, who: Principal, action: str, about: Mapping[str, str]) -> AuditEvent:
        """The audit event of this answer to `who`'s `action`: ``ok``, or ``deny`` with the code and the message.
        Its extra fields are `about` (what the request concerns: the adapter, the upstream) and `extra`."""
        return AuditEvent.by(
            who,
            action=action,
            outcome="ok" if self.ok else "deny",
            code="" if self.ok else self.code,
            reason=self.message,
            extra={**about, **self.extra},
        )
