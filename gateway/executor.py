"""The executor: the only code path that runs a tool.

Who calls it: the MCP surface, once per ``tools/call``, with the authenticated principal, the
tool name and the raw arguments the model proposed. It returns a sealed `Envelope`, never raises
for anything a caller did, and audits every call exactly once (allow or deny, with its outcome).

What it asks of its collaborators: the `Toolbox` (declarations), `Grants` (operator config), an
`AuditSink`, and one HTTP client per adapter, handed to adapters through `ToolContext`.

What it deliberately does not know: transports (no MCP, no Starlette), bearer tokens (a
`Principal` has none), and any particular tool (no per-tool branches: everything is read from
the declaration). The order of the steps in `execute` is the specification.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from gateway.audit import AuditEvent, AuditSink
from gateway.context import ToolContext
from gateway.decision import Code, Decision
from gateway.envelope import Envelope
from gateway.errors import UpstreamError, UpstreamProtocolError, UpstreamRefusedError, UpstreamTimeoutError
from gateway.grants import Grants
from gateway.principal import Principal
from gateway.tool import Mode, Tool
from gateway.toolbox import Toolbox
from gateway.untrusted import withhold_untrusted
from policies.access import decide_access

__all__ = ["Executor"]

logger = logging.getLogger(__name__)

_UNKNOWN_TOOL = Decision.deny(Code.PERMISSION_DENIED, "unknown tool")


class Executor:
    """Runs tools for principals: access, approval gate, validation, execution, sealing."""

    def __init__(
        self,
        *,
        tools: Toolbox,
        grants: Grants,
        audit: AuditSink,
        clients: Mapping[str, httpx.AsyncClient],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._tools = tools
        self._grants = grants
        self._audit = audit
        self._clients = clients
        self._clock = clock

    async def execute(self, principal: Principal, name: str, arguments: Mapping[str, Any] | None) -> Envelope:
        """Run tool `name` for `principal`. Every outcome is an envelope and one audit event."""
        started = self._clock()
        tool = self._tools.get(name)

        # 1. Access: the same function the catalog uses. An unknown name and a forbidden one
        #    answer identically, so the catalog cannot be probed.
        decision = _UNKNOWN_TOOL if tool is None else decide_access(tool, principal, self._grants)
        if tool is None or not decision.allowed:
            return await self._refuse(principal, name, decision, started)

        # 2. Approval gate: a write tool never executes on an agent's call.
        if tool.mode is Mode.WRITE:
            gate = Decision.deny(Code.APPROVAL_REQUIRED, "write tools run only from an approved card")
            return await self._refuse(principal, name, gate, started)

        # 3. Input validation against the same closed model the catalog's schema came from.
        try:
            args = tool.arguments.model_validate(arguments or {})
        except ValidationError as error:
            invalid = Decision.deny(Code.VALIDATION_ERROR, f"{error.error_count()} invalid argument(s)")
            return await self._refuse(principal, name, invalid, started, details={"errors": _error_summary(error)})

        # 4. Execute with the tool's deadline; 5. validate the output; 6. seal.
        try:
            envelope = await self._run(tool, args, principal)
        except UpstreamError as error:
            code = Code(error.code)
            failed = Decision.deny(code, f"{type(error).__name__}: {error}")
            details = {"reason": error.reason} if isinstance(error, UpstreamRefusedError) and error.reason else None
            return await self._refuse(principal, name, failed, started, details=details, allowed=True)

        await self._audit.record(
            AuditEvent(
                action="tool.call",
                outcome="ok",
                subject=principal.subject,
                org=principal.org,
                key_id=principal.key_id,
                tool=name,
                reason=decision.reason,
                latency_ms=(self._clock() - started) * 1000,
            )
        )
        return envelope

    async def _run(self, tool: Tool, args: BaseModel, principal: Principal) -> Envelope:
        ctx = ToolContext(principal=principal, http=self._clients[tool.adapter], service=tool.adapter)
        try:
            async with asyncio.timeout(tool.timeout_seconds):
                raw = await tool.execute(args, ctx)
        except TimeoutError as error:
            raise _timeout(tool) from error
        try:
            output = tool.output.model_validate(raw.model_dump() if isinstance(raw, BaseModel) else raw)
        except ValidationError as error:
            raise _protocol(tool, error.error_count()) from error
        safe = withhold_untrusted(output)
        model = tool.model_view(safe) if tool.model_view is not None else safe.model_dump(mode="json")
        human = tool.human_view(output) if tool.human_view is not None else None
        return Envelope.ok(model, human=human, untrusted=tool.emits_untrusted_text)

    async def _refuse(
        self,
        principal: Principal,
        name: str,
        decision: Decision,
        started: float,
        *,
        details: Mapping[str, Any] | None = None,
        allowed: bool = False,
    ) -> Envelope:
        code = decision.code or Code.INTERNAL_ERROR
        await self._audit.record(
            AuditEvent(
                action="tool.call",
                outcome="error" if allowed else "deny",
                subject=principal.subject,
                org=principal.org,
                key_id=principal.key_id,
                tool=name,
                code=code.value,
                reason=decision.reason,
                latency_ms=(self._clock() - started) * 1000,
            )
        )
        return Envelope.refused(code, details=details)


def _error_summary(error: ValidationError) -> list[dict[str, Any]]:
    """Field-level problems without echoing the input back (it may be long or hostile)."""
    return [
        {"field": ".".join(str(part) for part in item["loc"]), "type": item["type"], "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]


def _timeout(tool: Tool) -> UpstreamError:
    return UpstreamTimeoutError(f"no answer within {tool.timeout_seconds}s", service=tool.adapter)


def _protocol(tool: Tool, count: int) -> UpstreamError:
    return UpstreamProtocolError(f"backend answer failed {count} output check(s)", service=tool.adapter)
