"""What the review of fronted MCP servers answers: each one's listed tools, served or quarantined (pydantic models).

Who uses it: the admin API serves exactly their ``model_dump(mode="json")`` (and documents them in its
openapi.json), ``countersign upstreams review`` prints them, and the console renders them. Descriptions,
schemas and diffs are the upstream's own text: every surface shows them as text, never as markup.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gateway.review_answers import ReviewResult, SafetyFlag

__all__ = [
    "FrontedServer",
    "FrontedServerList",
    "FrontedTool",
    "ToolReviewDone",
    "ToolReviewRefusal",
    "ToolReviewRefusalDetail",
]


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class FrontedTool(_View):
    """One tool the server lists now, and whether agents are served it."""

    name: str
    """The upstream's name for it."""
    served_as: str
    """The namespaced name agents see (``<upstream>_<tool>``) once served."""
    state: Literal["served", "quarantined"]
    reason: str
    """Why it is held back (``unreviewed``, ``changed``, ``hidden``, ``shadows``, ``unusable: ...``); "" if served."""
    listed_hash: str
    """The hash of the definition listed now: what a reviewer pins to accept it as it is."""
    suggestion: dict[str, Any]
    """The upstream's own annotations (``readOnlyHint``, ``destructiveHint``...): shown, never trusted."""
    definition: dict[str, Any]
    """The definition listed now (upstream text)."""
    review: dict[str, Any] | None
    """The review in force (class, access, pinned hash), if any."""
    reviewed_by: str
    """``config`` (the config file), or the admin who accepted it through the gateway; "" when unreviewed."""
    diff: list[str]
    """For a changed definition: a unified diff from the definition reviewed to the one listed now."""
    flags: list[SafetyFlag] = []
    """What in the definition listed now a model would read and an admin should look at before classifying it (an
    instruction to the model, hidden characters, another tool named, a secret asked for): every key and string of
    it reviewed as a manifest's texts are (`policies.text_safety`), each flag's field a path in the definition."""


class FrontedServer(_View):
    """One ``[upstreams.<name>]`` and its listed tools, as the gateway last read them."""

    name: str
    transport: str
    url: str
    """The Streamable HTTP endpoint fronted ("" over stdio)."""
    proposed: dict[str, Any] | None = None
    """The section its service registered again with another server or credential, not fronted until a registry
    admin accepts it; None when there is none."""
    proposed_hash: str | None = None
    """Send it back, with `attention` acknowledged, to accept exactly this registration."""
    attention: list[str] = []
    """What the proposal changes of where the gateway connects and sends its credential (``url``, ``token_env``,
    ``oauth``); each must be acknowledged by name."""
    protocol: str
    """The protocol version negotiated with it ("" until a gateway read its list)."""
    listed_at_ms: int | None
    tools: list[FrontedTool]


class FrontedServerList(_View):
    upstreams: list[FrontedServer]


class ToolReviewDone(_View):
    message: str
    upstream: FrontedServer | None = None

    @classmethod
    def of(cls, result: ReviewResult[FrontedServer]) -> ToolReviewDone:
        return cls(message=result.message, upstream=result.entry)


class ToolReviewRefusalDetail(_View):
    code: str
    message: str
    problems: list[str] = []


class ToolReviewRefusal(_View):
    error: ToolReviewRefusalDetail

    @classmethod
    def of(cls, result: ReviewResult[FrontedServer]) -> ToolReviewRefusal:
        return cls(error=ToolReviewRefusalDetail(code=result.code, message=result.said, problems=list(result.problems)))
