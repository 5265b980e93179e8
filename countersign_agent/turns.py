"""One turn of the loop: exactly one of ``tool_calls`` (proposals to run) or ``final`` (the answer).

The model's output must be one JSON object and nothing else (one Markdown code fence around it is
tolerated: models add it however often they are told not to). Anything else is a `TurnParseError`
carrying the head of the raw output, the one place any raw output is kept.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from countersign_agent.errors import TurnParseError

__all__ = ["ToolCall", "Turn", "parse_turn"]


class ToolCall(BaseModel):
    """A proposal to call one tool; the loop runs it only if the name was listed to this caller."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class Turn(BaseModel):
    """Exactly one of the two: more tool calls, or the final answer to the user."""

    model_config = ConfigDict(extra="forbid")

    tool_calls: list[ToolCall] | None = None
    final: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Turn:
        if (self.tool_calls is None) == (self.final is None):
            raise ValueError("a turn holds exactly one of tool_calls or final")
        if self.tool_calls is not None and not self.tool_calls:
            raise ValueError("tool_calls must not be empty: answer with final instead")
        if self.final is not None and not self.final.strip():
            raise ValueError("final must not be empty")
        return self


def _unfenced(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
        inner = stripped[3:-3]
        first_line, _, rest = inner.partition("\n")
        return (rest if first_line.strip() in ("", "json") else inner).strip()
    return stripped


def parse_turn(purpose: str, output: str) -> Turn:
    """The turn `output` holds.

    Raises:
        TurnParseError: not one JSON object, or not a valid turn.
    """
    try:
        value = json.loads(_unfenced(output))
    except ValueError:
        raise TurnParseError("not a single JSON object", purpose=purpose, raw=output) from None
    if not isinstance(value, dict):
        raise TurnParseError("the JSON value is not an object", purpose=purpose, raw=output)
    try:
        return Turn.model_validate(value)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'turn'}: {e['type']}" for e in error.errors())
        raise TurnParseError(f"not a valid turn ({problems})", purpose=purpose, raw=output) from None
