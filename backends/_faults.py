"""Switchable faults for the demo backends, so timeouts, outages and lost answers can be tested for real.

A service holds one :class:`FaultSwitch`. ``PUT /_faults`` installs a :class:`FaultSpec`, ``DELETE``
clears it and ``GET`` reads it (``{"faults": <spec or null>}``, where ``times`` is what is left). The
service shell calls :meth:`FaultSwitch.take` for every admitted non-control request and hands a matching
spec to :func:`inject`, which applies its parts in this order:

1. ``latency_ms``: wait, then carry on with the rest.
2. ``hang``: do not answer; wait until the client disconnects, or answer 504 ``injected_fault`` after
   ``HANG_BOUND_SECONDS``. Nothing is applied.
3. ``status``: answer ``{"error": "injected_fault"}`` with that status (and ``retry_after``, if given,
   as its ``Retry-After``). Nothing is applied.
4. ``drop_after_commit``: run the request to completion (the write and its idempotency record happen),
   send only the response head, then raise :class:`InjectedDropError` so the server aborts the
   connection; the client sees a response cut short, not an answer.
5. ``reply_after_commit_ms``: run the request to completion at once, then hold the answer this long (a
   client that gives up, or dies, meanwhile never learns the write landed).

This module knows nothing of auth, identity or which paths are control paths; the shell decides that.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any

import anyio
from pydantic import ConfigDict, Field, TypeAdapter, with_config
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backends._http import Endpoint, error, parse_args

HANG_BOUND_SECONDS = 300.0
"""A hanging request gives up after this long even if the client never does."""


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True, kw_only=True, slots=True)
class FaultSpec:
    """One fault to inject; every field is optional and the defaults inject nothing."""

    latency_ms: Annotated[int, Field(ge=0, le=600_000)] = 0
    """Delay before handling the request."""
    status: Annotated[int, Field(ge=400, le=599)] | None = None
    """Answer every matching request with this status and apply nothing."""
    retry_after: Annotated[int, Field(ge=0)] | None = None
    """With `status`: the ``Retry-After`` seconds of that answer (a 429 or 503 that says when to retry)."""
    hang: bool = False
    """Never answer; wait for the client to give up."""
    drop_after_commit: bool = False
    """Apply the request, then cut the connection before the body is sent."""
    reply_after_commit_ms: Annotated[int, Field(ge=0, le=600_000)] = 0
    """Apply the request at once, then wait this long before answering (a slow network back)."""
    paths: tuple[str, ...] = ()
    """Path prefixes the fault applies to; empty means every non-control path."""
    times: Annotated[int, Field(ge=1)] | None = None
    """How many more matching requests get the fault before it clears itself; ``None`` means until cleared."""

    def matches(self, path: str) -> bool:
        return not self.paths or any(path.startswith(prefix) for prefix in self.paths)


FAULT_SPEC = TypeAdapter(FaultSpec)


class InjectedDropError(RuntimeError):
    """Raised after a response head was sent, so the server aborts the connection mid-response."""


class FaultSwitch:
    """The single active fault of one service, consumed request by request when it has ``times``."""

    def __init__(self) -> None:
        self._spec: FaultSpec | None = None

    @property
    def active(self) -> FaultSpec | None:
        return self._spec

    def install(self, spec: FaultSpec) -> None:
        self._spec = spec

    def clear(self) -> None:
        self._spec = None

    def take(self, path: str) -> FaultSpec | None:
        """Return the fault for a request to ``path`` (or ``None``), counting it against ``times``."""
        spec = self._spec
        if spec is None or not spec.matches(path):
            return None
        if spec.times is not None:
            self._spec = replace(spec, times=spec.times - 1) if spec.times > 1 else None
        return spec


async def inject(spec: FaultSpec, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Handle one request through ``app`` with ``spec`` applied, in the order given in the module docstring."""
    if spec.latency_ms:
        await anyio.sleep(spec.latency_ms / 1000)
    if spec.hang:
        if not await _wait_for_disconnect(receive):
            await error(504, "injected_fault")(scope, receive, send)
        return
    if spec.status is not None:
        wait = {"retry-after": str(spec.retry_after)} if spec.retry_after is not None else None
        await error(spec.status, "injected_fault", headers=wait)(scope, receive, send)
        return
    if spec.drop_after_commit:
        head = await _run_keeping_head(app, scope, receive)
        await send(head)
        raise InjectedDropError(f"fault injection dropped the response to {scope['method']} {scope['path']}")
    if spec.reply_after_commit_ms:
        messages = await _run_keeping_all(app, scope, receive)
        await anyio.sleep(spec.reply_after_commit_ms / 1000)
        for message in messages:
            await send(message)
        return
    await app(scope, receive, send)


async def _wait_for_disconnect(receive: Receive) -> bool:
    """Consume messages until the client disconnects; ``False`` if ``HANG_BOUND_SECONDS`` ran out first."""
    with anyio.move_on_after(HANG_BOUND_SECONDS):
        while (await receive())["type"] != "http.disconnect":
            pass
        return True
    return False


async def _run_keeping_head(app: ASGIApp, scope: Scope, receive: Receive) -> Message:
    head: Message | None = None

    async def keep_head(message: Message) -> None:
        nonlocal head
        if message["type"] == "http.response.start":
            head = message

    await app(scope, receive, keep_head)
    if head is None:
        raise RuntimeError("application finished without starting a response")
    return head


async def _run_keeping_all(app: ASGIApp, scope: Scope, receive: Receive) -> list[Message]:
    """Run the request to completion (the write is applied) and keep its response for later."""
    messages: list[Message] = []

    async def keep(message: Message) -> None:
        messages.append(message)

    await app(scope, receive, keep)
    return messages


def faults_endpoint(switch: FaultSwitch) -> Endpoint:
    """``GET``/``PUT``/``DELETE /_faults``: read, install or clear the service's fault."""

    async def endpoint(request: Request) -> Response:
        if request.method == "PUT":
            spec = parse_args(FAULT_SPEC, await request.body())
            if spec is None:
                return error(400, "invalid_faults")
            switch.install(spec)
        elif request.method == "DELETE":
            switch.clear()
        return JSONResponse({"faults": describe(switch.active)})

    return endpoint


def describe(spec: FaultSpec | None) -> dict[str, Any] | None:
    """The JSON form of a fault, as ``GET /_faults`` shows it."""
    return None if spec is None else asdict(spec)
