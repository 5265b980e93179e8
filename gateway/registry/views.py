"""What the registry's routes answer: registrations with their flags and diffs, as pydantic models.

Who uses it: the registry API serves exactly their ``model_dump(mode="json")``, the admin API's
OpenAPI document is generated from the same classes, and ``countersign adapters review`` prints
them. Each is built from the store's `Registration` by a classmethod; nothing here decides.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from gateway.registry.review import review_lines, tool_reviews
from gateway.registry.tools import model_sees
from gateway.review_answers import REVIEW_STATUS, ReviewResult, SafetyFlag
from gateway.store.registrations import Registration, RegistrationState

__all__ = [
    "AdapterActionDone",
    "AdapterDiff",
    "AdapterError",
    "AdapterErrorDetail",
    "AdapterList",
    "AdapterRegistration",
    "AdapterToolInput",
    "AdapterToolOutput",
    "AdapterToolReview",
]


def _no_default(schema: dict[str, Any]) -> None:
    # Left out when there is none, never sent as null: the schema must not offer null as a default.
    schema.pop("default", None)


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class AdapterDiff(_View):
    """What accepting the proposal would change, tool by tool."""

    added: list[str]
    removed: list[str]
    changed: dict[str, str]
    """A unified diff, pinned to proposed, of each changed tool."""
    settings_changed: bool
    """Whether anything besides the tools changed (base URL, credentials, other settings)."""
    settings: str = ""
    """A unified diff, pinned to proposed, of everything besides the tools (all of it, for a new adapter)."""
    attention: list[str] = Field(default_factory=list)
    """``base_url``, ``credential`` or ``signing_secret_env`` when the update changes them: where the gateway's
    credential, signed identities and receipts go. Accepting needs each acknowledged by name."""
    reviewed: dict[str, str] = Field(default_factory=dict)
    """A unified diff, pinned to proposed, of each changed tool's review (`AdapterToolReview`, as text): its method,
    path, inputs, output fields and what the model sees of them, approval and write contract, in words."""


class AdapterToolInput(_View):
    name: str
    type: str
    required: bool
    travels: str
    """``path``, ``query``, ``body``, ``header``, or ``<place> as <name on the wire>``."""


class AdapterToolOutput(_View):
    field: str
    """A field that holds a value, at any depth (``items[].title``)."""
    type: str
    model_sees: str
    """``shown`` (a number, a boolean), ``trusted: pattern``, ``trusted: enum``, ``trusted: date``, ``shown
    fenced as untrusted`` (third-party text the agent reads, which taints it) or ``withheld``."""


class AdapterToolReview(_View):
    """One proposed tool as a reviewer reads it (`gateway.registry.review`)."""

    name: str
    mode: str
    method: str
    path: str
    description: str
    access: str
    inputs: list[AdapterToolInput]
    outputs: list[AdapterToolOutput]
    agent_text: list[str]
    """Inputs the agent writes freely: shown to approvers as untrusted."""
    approval: str | None
    write_contract: dict[str, str] | None
    """For a write: where the key travels, how a lost answer is looked up, whether it is resent, the reference
    field, and which answers mean "not applied" and "applied"."""


class AdapterRegistration(_View):
    """An adapter's registry entry: what is pinned (served) and what is proposed (quarantined)."""

    name: str
    owner: str
    """Subject of the service key that registered it first."""
    state: RegistrationState
    pinned_hash: str | None
    proposed_hash: str | None
    """Send it back to accept exactly this proposal."""
    accepted_by: str | None
    flags: list[SafetyFlag]
    diff: AdapterDiff | None
    """None when nothing is proposed."""
    proposed: dict[str, Any] | None
    """The proposed manifest, as registered."""
    model_sees: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Per proposed tool, each string field of its output and what the model is shown of it: ``trusted:
    pattern``, ``trusted: enum``, ``shown fenced as untrusted`` (third-party text the agent reads, which
    taints it) or ``withheld`` (third-party text, the default for a string not declared trusted)."""
    tools: list[AdapterToolReview] = Field(default_factory=list)
    """Every proposed tool as a reviewer reads it: method, path, inputs, outputs, write contract."""

    @classmethod
    def from_registration(cls, registration: Registration) -> AdapterRegistration:
        proposed = registration.proposed
        return cls(
            name=registration.name,
            owner=registration.owner,
            state=registration.state,
            pinned_hash=registration.pinned_hash,
            proposed_hash=registration.proposed_hash,
            accepted_by=registration.accepted_by,
            flags=[SafetyFlag.model_validate(dict(flag)) for flag in registration.flags],
            diff=AdapterDiff.model_validate(registration.diff() | {"reviewed": _reviewed(registration)})
            if proposed is not None
            else None,
            proposed=dict(proposed) if proposed is not None else None,
            model_sees=model_sees(proposed) if proposed is not None else {},
            tools=[
                AdapterToolReview.model_validate({"name": name, **review})
                for name, review in (tool_reviews(proposed) if proposed is not None else {}).items()
            ],
        )


def _reviewed(registration: Registration) -> dict[str, str]:
    """The unified diff of each tool both pinned and proposed whose review differs."""
    if registration.pinned is None or registration.proposed is None:
        return {}
    before, after = tool_reviews(registration.pinned), tool_reviews(registration.proposed)
    changed = {}
    for name in sorted(before.keys() & after.keys()):
        old, new = review_lines(name, before[name]), review_lines(name, after[name])
        if old != new:
            changed[name] = "\n".join(difflib.unified_diff(old, new, "pinned", "proposed", lineterm=""))
    return changed


class AdapterList(_View):
    adapters: list[AdapterRegistration]


class AdapterActionDone(_View):
    """A registration, acceptance or removal that went through."""

    message: str
    adapter: AdapterRegistration | None
    """The registration as it is now; null after a removal."""

    @classmethod
    def of(cls, result: ReviewResult[Registration]) -> AdapterActionDone:
        return cls(message=result.message, adapter=_registration_view(result))


class AdapterErrorDetail(_View):
    code: str = Field(json_schema_extra={"enum": list(REVIEW_STATUS)})
    message: str
    problems: list[str] = Field(default_factory=list, exclude_if=lambda problems: not problems)
    """Everything wrong with the manifest or the body; absent when empty."""


class AdapterError(_View):
    error: AdapterErrorDetail
    adapter: AdapterRegistration | SkipJsonSchema[None] = Field(
        default=None, exclude_if=lambda adapter: adapter is None, json_schema_extra=_no_default
    )
    """The registration as it is now, when the refusal concerns one (a stale accept)."""

    @classmethod
    def of(cls, result: ReviewResult[Registration]) -> AdapterError:
        detail = AdapterErrorDetail(code=result.code, message=result.said, problems=list(result.problems))
        return cls(error=detail, adapter=_registration_view(result))


def _registration_view(result: ReviewResult[Registration]) -> AdapterRegistration | None:
    return AdapterRegistration.from_registration(result.entry) if result.entry is not None else None
