"""The ``outputSchema`` a tool is listed with: every ``structuredContent`` it can answer, declared.

MCP says that when a tool has an output schema, "Servers MUST provide structured results that conform
to this schema", and makes no exception for ``isError`` results. Countersign's refusals carry their
stable code as structured data, so a tool's schema is one of two shapes:

* what the model receives on success: the output model (untrusted text withheld keeps every field a
  string), the declared projection model when the tool has a `Tool.model_view`, or, for a write
  tool, the approval card receipt (`AgentCard`) its call answers with, since a write never runs on
  an agent's call;
* the refusal every tool can answer with (`Envelope.refused`): ``{"error": {code, message, ...}}``.

The root is ``type: object`` (required through 2025-11-25) with the two shapes under ``anyOf``, and
the definitions of both hoisted to one root ``$defs`` so every ``$ref`` resolves in the document.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.cards.views import AgentCard
from gateway.codes import Code
from gateway.errors import ToolDeclarationError
from gateway.tools.declarations import Mode, Tool

__all__ = ["Refusal", "RefusalBody", "output_schema", "success_model"]


class RefusalBody(BaseModel):
    """Why a call was refused or failed. Match on `code`, never on `message`."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    code: str = Field(json_schema_extra={"enum": [code.value for code in Code]})
    """The stable refusal code."""
    message: str
    """A fixed sentence for the code."""
    retryable: bool
    """Whether the same call may succeed later unchanged."""
    retry_after: float | None = None
    """Seconds to wait before retrying, when known."""
    details: dict[str, Any] | None = None
    """Field-level problems of the arguments, for VALIDATION_ERROR."""


class Refusal(BaseModel):
    """A refused or failed call (the result has isError set)."""

    error: RefusalBody


def success_model(tool: Tool) -> type[BaseModel]:
    """The model of what `tool` answers the model with when the call succeeds."""
    if tool.mode is Mode.WRITE:
        return AgentCard
    return tool.model_view_output or tool.output


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    # Serialization mode and field names, not aliases: the executor sends `model_dump(mode="json")`.
    return model.model_json_schema(mode="serialization", by_alias=False)


def output_schema(tool: Tool) -> dict[str, Any]:
    """The ``outputSchema`` of `tool`: its success shape or the refusal shape.

    Raises:
        ToolDeclarationError: (code ``schema_clash``) when the success model defines a schema under
            a name the refusal's definitions use, with different content.
    """
    success, refusal = _schema(success_model(tool)), _schema(Refusal)
    definitions = dict(success.pop("$defs", {}))
    for name, definition in refusal.pop("$defs", {}).items():
        if definitions.setdefault(name, definition) != definition:
            raise ToolDeclarationError(
                f"output model of {tool.name!r} defines {name!r}, which the refusal schema uses",
                code="schema_clash",
                tool=tool.name,
            )
    schema: dict[str, Any] = {"type": "object", "anyOf": [success, refusal]}
    if definitions:
        schema["$defs"] = definitions
    return schema
