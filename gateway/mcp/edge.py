"""The MCP endpoint's edge: what the Streamable HTTP transport refuses that the SDK lets through.

Two ASGI layers of the ``/mcp`` stack, one before authentication and one after it (`gateway.mcp.stack`
assembles the stack and says why each layer stands where it does). Each fixes one measured gap of the
SDK (mcp 2.3.0) and leaves everything the SDK already answers correctly to the SDK:

`HeaderChecks`, before authentication, looks at the header lines only (read once for the whole
edge, `gateway.mcp.headers`):

* a ``Host`` the gateway does not answer to is 421 and an ``Origin`` it does not serve is 403
  (DNS-rebinding protection, always on; a request without ``Origin`` passes, as a non-browser
  client sends none). The SDK's own check is off: it answered in plain text, after the key
  lookup, with no stable code and no audit event; this one is the only one;
* two ``Authorization`` lines are 400: `BearerAuth` would authenticate on the first while a proxy
  in front may have checked the second; no key is resolved for such a request;
* two ``MCP-Protocol-Version`` lines are 400: the SDK picks its era from the first and checks for
  a second only on the 2026-07-28 path, so ``2025-11-25`` then ``2026-07-28`` was served;
* surrounding whitespace (SP, HTAB) is trimmed from every ``Mcp-*`` value, as RFC 9110 says it is
  no part of a field value and the 2026-07-28 header rules require ("Mcp-Name:  foo " matches
  ``foo``). uvicorn's httptools parser keeps trailing whitespace, so the SDK's comparison of
  ``Mcp-Method``/``Mcp-Name`` with the body failed with HeaderMismatch.

`MessageChecks`, after authentication (the caller is known and audited), looks at the body and
the SDK's answer:

* a POST body over `MAX_BODY_BYTES` is 413 before anything parses it;
* a body whose top-level ``id`` is not a string or an integer (null, a bool, a fraction, an
  object, an array) is 400 with a JSON-RPC error whose id is null. The handshake-era SDK path
  validated such a request as a notification (its model ignores unknown keys) and answered 202;
* a batch (a JSON array) is 400 with Invalid Request: no era the SDK serves accepts batches, and
  its handshake path named the refusal Invalid Params;
* a message carrying both ``result`` and ``error`` is 400 with Invalid Request (JSON-RPC 2.0 says a
  response holds exactly one of them): the handshake-era SDK took it as a response and answered 202;
* in a handshake-era session, a request whose ``id`` is that of a request of the same session still
  being answered is 400 with Invalid Request: the SDK routes answers by id, so the two got each other's
  answer and one of them never ended. The first goes on; the id is free again once it is answered;
* an error answer to a request that named no session carries no ``Mcp-Session-Id``: the SDK
  opens a session for every such request, stamps its id on the refusal, then discards it, so the
  caller was handed an id that already answers 404. Session refusals are audited.

Refusals from here are JSON-RPC error bodies with ``error.data.code`` a stable `Code`, and are
audited as ``mcp.reject``; before authentication only when the request presented a credential,
as `BearerAuth` does, so an anonymous flood cannot fill the audit stream through this door.

The hot path parses no JSON: a byte scan (`needs_parse`) admits the bodies whose every ``"id"``
member is a plain string or integer, and only the others are parsed to decide.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import pydantic_core
from mcp_types import HEADER_MISMATCH, INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.audit.events import AuditEvent, AuditSink
from gateway.auth.bearer import caller_of
from gateway.codes import Code
from gateway.mcp.headers import OWS, SINGLE, mcp_headers
from gateway.web.asgi_replay import replay_body

__all__ = ["MAX_BODY_BYTES", "HeaderChecks", "MessageChecks", "bad_id_or_batch", "needs_parse"]

MAX_BODY_BYTES: Final = 1024 * 1024
"""The largest POST body ``/mcp`` reads (1 MiB). A JSON-RPC message for this gateway is a tool call
whose arguments become a card of a few hundred bytes; the SDK's own cap (4 MiB) would let each request
make the gateway buffer and parse four times as much before any tool schema could refuse it."""

ACTION: Final = "mcp.reject"
"""The audit action of every refusal made here."""

_HANDSHAKE_VERSIONS: Final = frozenset(v.encode() for v in HANDSHAKE_PROTOCOL_VERSIONS)
_SESSION_ID: Final = b"mcp-session-id"
_MCP_PREFIX: Final = b"mcp-"
_ROUTING: Final = frozenset({b"mcp-protocol-version", b"mcp-method", b"mcp-name"})
"""Of the headers a request may carry once (`SINGLE`), the ones that say what the request is; two of
them are a header mismatch (-32020)."""

# An "id" member whose value does not start as a string or an integer (an integer is digits not
# followed by a fraction or an exponent). A member name can also be written with \u escapes, so any
# body containing one is parsed too: the scan may send a body to the parser needlessly, never wave a
# bad one through. The quantifiers are possessive: a backtracking \s* would stop before the space of
# '"id": 1' and read that space as a value that is neither.
_UNPLAIN_ID: Final = re.compile(rb'"id"\s*+:\s*+(?!"|-?\d++(?![.eE]))')
_ESCAPE: Final = re.compile(rb"\\u")
_BATCH: Final = re.compile(rb"\s*+\[")
_RESULT: Final = b'"result"'
_ERROR: Final = b'"error"'


def needs_parse(body: bytes) -> bool:
    """Whether `body` may hold a top-level ``id`` that is neither a string nor an integer, or is a batch.

    Two regular-expression scans that build no objects: on what clients send, no dearer than
    pydantic-core's parse of a small body and a fraction of it as bodies grow.
    """
    # A one-byte find is memchr; CPython's search for the two-byte needle is many times slower.
    escaped = body.find(b"\\") != -1 and _ESCAPE.search(body) is not None
    return escaped or _BATCH.match(body) is not None or _UNPLAIN_ID.search(body) is not None


def bad_id_or_batch(body: bytes) -> str | None:
    """Why `body` is refused (a batch, or a top-level ``id`` of another type), or None to pass it on.

    Parses as the SDK does (pydantic-core, the last of duplicated members wins), so both read the
    same ``id``. A body that is not JSON passes: the SDK answers it with its parse error.
    """
    try:
        message = pydantic_core.from_json(body)
    except ValueError:
        return None
    if isinstance(message, list):
        return "batch requests are not accepted"
    if isinstance(message, dict) and "id" in message:
        value = message["id"]
        if isinstance(value, bool) or not isinstance(value, str | int):
            return f"a request id must be a string or an integer, not {_json_type(value)}"
    if isinstance(message, dict) and "result" in message and "error" in message:
        return "a message carries both result and error; a response holds exactly one"
    return None


def _request_id(body: bytes) -> str | None:
    """The ``id`` of a request (a message with a ``method``) in `body`, typed (``s:`` or ``i:``), else None."""
    try:
        message = pydantic_core.from_json(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    value = message["id"]
    return f"s:{value}" if isinstance(value, str) else f"i:{value}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a fraction"
    return "an array" if isinstance(value, list) else "an object"


async def _refuse(send: Send, status: int, rpc_code: int, code: Code, message: str) -> None:
    error = {"code": rpc_code, "message": message, "data": {"code": code.value}}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class HostPatterns:
    """``Host`` or ``Origin`` values a gateway answers to: exact values, or ``base:*`` for any port of `base`."""

    def __init__(self, patterns: list[str]) -> None:
        self._exact = frozenset(p.encode() for p in patterns if not p.endswith(":*"))
        self._any_port = tuple(p[:-1].encode() for p in patterns if p.endswith(":*"))  # "base:"

    def admits(self, value: bytes) -> bool:
        if value in self._exact:
            return True
        return any(value.startswith(base) and value[len(base) :].isdigit() for base in self._any_port)


class HeaderChecks:
    """Refuse foreign ``Host``/``Origin`` values and a second line of any header a request carries once
    (`SINGLE`: ``Authorization``, ``Host``, ``Origin``, ``Mcp-Session-Id``, the routing headers); trim
    ``Mcp-*`` values.

    Sits outside `BearerAuth`: a request it refuses is never authenticated.
    """

    def __init__(self, app: ASGIApp, *, audit: AuditSink, allowed_hosts: list[str], allowed_origins: list[str]) -> None:
        """Raises:
        ValueError: `allowed_hosts` is empty, which would refuse every request."""
        if not allowed_hosts:
            raise ValueError("allowed_hosts must name at least one Host the gateway answers to")
        self.app = app
        self._audit = audit
        self._hosts = HostPatterns(allowed_hosts)
        self._origins = HostPatterns(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        facts = mcp_headers(scope)
        if facts.duplicated:  # which of two lines a later reader takes is not ours to guess: refuse both
            reason = f"the {SINGLE[facts.duplicated]} header appears more than once"
            if facts.authorizations:  # a credential was presented: audited, as BearerAuth audits a bad key
                await self._audit.record(_event(scope, Code.INVALID_REQUEST, reason))
            rpc_code = HEADER_MISMATCH if facts.duplicated in _ROUTING else INVALID_REQUEST
            await _refuse(send, 400, rpc_code, Code.INVALID_REQUEST, reason)
            return
        host_admitted = self._hosts.admits(facts.host)
        if not host_admitted or (facts.origin and not self._origins.admits(facts.origin)):
            foreign = "Host" if not host_admitted else "Origin"
            reason = f"the {foreign} header names a site this gateway does not serve"
            if facts.authorizations:  # a credential was presented: audited, as BearerAuth audits a bad key
                await self._audit.record(_event(scope, _FOREIGN[foreign], reason))
            status = 421 if foreign == "Host" else 403
            await _refuse(send, status, INVALID_REQUEST, _FOREIGN[foreign], reason)
            return
        if facts.padded:
            scope["headers"] = _trimmed(facts.source)
        await self.app(scope, receive, send)


def _trimmed(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` with SP and HTAB trimmed from both ends of every ``Mcp-*`` value (names in any casing)."""
    return [
        (name, value.strip(OWS)) if name.lower().startswith(_MCP_PREFIX) else (name, value) for name, value in headers
    ]


class MessageChecks:
    """Cap and screen POST bodies, and keep dead session ids off refusals (after `BearerAuth`)."""

    def __init__(self, app: ASGIApp, *, audit: AuditSink, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self._audit = audit
        self._max = max_body_bytes
        self._in_flight: set[tuple[bytes, str]] = set()
        """(session id, request id) of every handshake-era session request being answered in this process
        (a session lives in the process that opened it)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        facts = mcp_headers(scope)
        session, version = facts.session, facts.version
        body = b""
        if scope["method"] == "POST":
            read = await self._body(scope, receive, send, facts.length)
            if read is None:
                return
            body = read
            both = body.find(_RESULT) != -1 and body.find(_ERROR) != -1
            if (both or needs_parse(body)) and (reason := bad_id_or_batch(body)) is not None:
                await self._reject(scope, Code.INVALID_REQUEST, reason)
                await _refuse(send, 400, INVALID_REQUEST, Code.INVALID_REQUEST, reason)
                return
            receive = replay_body(body, receive)
        if version is not None and version not in _HANDSHAKE_VERSIONS:
            # The 2026-07-28 path has no sessions: the SDK never stamps an id there.
            await self.app(scope, receive, send)
            return
        key = _in_session(scope, body) if session and body else None
        if key is not None and key in self._in_flight:
            reason = "a request with this id is still being answered in this session; use another id"
            await self._reject(scope, Code.INVALID_REQUEST, reason)
            await _refuse(send, 400, INVALID_REQUEST, Code.INVALID_REQUEST, reason)
            return
        if key is None:
            await self.app(scope, receive, self._session_answer(scope, send, session))
            return
        self._in_flight.add(key)
        try:
            await self.app(scope, receive, self._session_answer(scope, send, session))
        finally:
            self._in_flight.discard(key)

    async def _body(self, scope: Scope, receive: Receive, send: Send, length: bytes | None) -> bytes | None:
        """The whole body, or None once it has been refused (413) or the client has gone."""
        if length is not None and length.isdigit() and int(length) > self._max:
            await self._too_large(scope, send)
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client disconnected: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max:
                await self._too_large(scope, send)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        reason = f"the body is larger than {self._max} bytes"
        await self._reject(scope, Code.PAYLOAD_TOO_LARGE, reason)
        await _refuse(send, 413, INVALID_REQUEST, Code.PAYLOAD_TOO_LARGE, reason)

    def _session_answer(self, scope: Scope, send: Send, session: bool) -> Send:
        """`send`, dropping the id of a session that never was and auditing session refusals."""
        started = False

        async def answer(message: Message) -> None:
            nonlocal started
            if not started and message["type"] == "http.response.start":
                started = True
                status: int = message["status"]
                headers = message.get("headers", [])
                if status >= 400 and not session and any(k.lower() == _SESSION_ID for k, _ in headers):
                    # The SDK discards the session it opened for a request it answers with an error.
                    message = {**message, "headers": [(k, v) for k, v in headers if k.lower() != _SESSION_ID]}
                    code = Code.INVALID_REQUEST if status < 500 else Code.INTERNAL_ERROR
                    await self._reject(scope, code, f"refused with HTTP {status} before a session was established")
                elif status == 404 and session:
                    await self._reject(scope, Code.NOT_FOUND, "unknown or expired session")
            await send(message)

        return answer

    async def _reject(self, scope: Scope, code: Code, reason: str) -> None:
        await self._audit.record(_event(scope, code, reason))


def _in_session(scope: Scope, body: bytes) -> tuple[bytes, str] | None:
    """(session id, request id) of a request made in a session, or None (a response, a notification)."""
    request_id = _request_id(body)
    if request_id is None:
        return None
    session = next((value for name, value in scope["headers"] if name.lower() == _SESSION_ID), b"")
    return session, request_id


_FOREIGN: Final = {"Host": Code.INVALID_REQUEST, "Origin": Code.PERMISSION_DENIED}
"""The stable code of each foreign-site refusal: a wrong Host is a misdirected request (421); a
foreign Origin is a page of another site that may not call the gateway (403)."""


def _event(scope: Scope, code: Code, reason: str) -> AuditEvent:
    """The audit event of a refusal, naming the caller once `BearerAuth` has established one."""
    extra = {"surface": "mcp", "path": str(scope.get("path", ""))}
    who = caller_of(scope)
    if who is None:
        return AuditEvent(action=ACTION, outcome="deny", code=code.value, reason=reason, extra=extra)
    return AuditEvent.refusal(who, ACTION, code.value, reason, extra)
