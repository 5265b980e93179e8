"""The agent's own failures, divided by who has to act.

```text
* AgentError
  x DriverError        (the model's API: unreachable, refused, or an answer of the wrong shape)
  x TurnParseError     (the model answered, but not one valid turn; carries the head of its output)
  x GatewayClientError (the gateway could not be reached or refused the connection)
  x ScenarioError      (an evaluation scenario file is not valid)
```
"""

from __future__ import annotations

__all__ = ["RAW_HEAD_CHARS", "AgentError", "DriverError", "GatewayClientError", "ScenarioError", "TurnParseError"]

RAW_HEAD_CHARS = 500
"""How much of a model's raw output a parse error keeps: the only place raw output is ever kept,
so a live failure that does not reproduce leaves a clue (the usage ledger never holds it)."""


class AgentError(Exception):
    """Base of every error this package raises on purpose."""


class DriverError(AgentError):
    """A model API call failed: transport error, non-2xx status, or an answer without text."""

    def __init__(self, message: str, *, provider: str, status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class TurnParseError(AgentError):
    """The model's output is not exactly one valid turn (one JSON object: ``tool_calls`` xor ``final``)."""

    def __init__(self, reason: str, *, purpose: str, raw: str) -> None:
        super().__init__(f"{purpose}: {reason}")
        self.reason = reason
        self.purpose = purpose
        self.head = raw[:RAW_HEAD_CHARS]
        """The first `RAW_HEAD_CHARS` characters of the raw output, nothing more."""


class GatewayClientError(AgentError):
    """The gateway did not answer as an MCP server should (unreachable, 401, a protocol error)."""


class ScenarioError(AgentError):
    """An evaluation scenario file is not valid TOML or not a valid scenario; the message names the file."""
