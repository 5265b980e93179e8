"""The admin REST API: JSON over HTTP for reading and deciding cards, under ``/admin/api``.

Who calls it: the composition root mounts `admin_routes(...)`; admins' tools (the console, scripts)
call it with an admin bearer key. It translates and decides nothing: request bodies are validated
with pydantic models (unknown fields refused), every action goes to `CardService`, and each
`ResultCode` becomes one status:

========================  ======
OK                        200
NOT_FOUND                 404  (a card of another org answers exactly as a missing one)
PERMISSION_DENIED         403
CONFLICT                  409  (the body holds the current card)
VALIDATION_ERROR          422  (the body lists the problems)
LEDGER_UNAVAILABLE        503
missing or non-admin key  401  (from `BearerAuth`, before any route runs)
========================  ======

Error bodies are ``{"error": {"code", "message", "problems"?}, "card"?}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from gateway.audit import AuditEvent, AuditSink
from gateway.auth import BearerAuth, principal_of
from gateway.card import CardState
from gateway.card_service import MAX_LIST, MAX_TEXT, CardActionResult, CardService, ResultCode
from gateway.errors import StoreUnavailableError
from gateway.principal import KeyKind, Principal
from gateway.store.keys import KeyStore

__all__ = ["ApproveBody", "CancelBody", "ListQuery", "RejectBody", "ResolveBody", "admin_routes", "openapi_document"]

MAX_BODY_BYTES = 65_536

STATUS: dict[ResultCode, int] = {
    ResultCode.OK: 200,
    ResultCode.NOT_FOUND: 404,
    ResultCode.PERMISSION_DENIED: 403,
    ResultCode.CONFLICT: 409,
    ResultCode.VALIDATION_ERROR: 422,
    ResultCode.LEDGER_UNAVAILABLE: 503,
}

_Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
_RequiredText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT)]


class ApproveBody(BaseModel):
    """Approve the card exactly as reviewed: its `version` and `args_hash` as shown."""

    model_config = ConfigDict(extra="forbid", strict=True)
    version: int = Field(ge=1)
    args_hash: str = Field(min_length=1, max_length=200)
    comment: _Text = ""


class RejectBody(BaseModel):
    """Veto the card; the reason is kept on it, attributed to the admin."""

    model_config = ConfigDict(extra="forbid", strict=True)
    reason: _RequiredText


class CancelBody(BaseModel):
    """Cancel a PENDING or APPROVED card. The body may be empty."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ResolveBody(BaseModel):
    """Settle a NEEDS_RECONCILIATION card with what the admin checked at the backend."""

    model_config = ConfigDict(extra="forbid", strict=True)
    outcome: Literal["SUCCEEDED", "FAILED"]
    evidence: dict[str, Any] = Field(min_length=1)


class ListQuery(BaseModel):
    """Filters of ``GET /cards``; query strings, so values are coerced (not strict)."""

    model_config = ConfigDict(extra="forbid")
    state: CardState | None = None
    tool: str | None = None
    requester: str | None = None
    limit: int = Field(default=100, ge=1, le=MAX_LIST)


def _json(status: int, body: dict[str, Any]) -> JSONResponse:
    # Cards hold business data and approval state; no cache may keep a copy.
    return JSONResponse(body, status_code=status, headers={"cache-control": "no-store"})


def _error(code: ResultCode | str, message: str, *, status: int, problems: list[str] | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": str(code), "message": message}
    if problems is not None:
        error["problems"] = problems
    return _json(status, {"error": error})


def _problems(error: ValidationError) -> list[str]:
    # Location and message only: pydantic's "input" would echo the request back.
    return [f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()]


def _result(result: CardActionResult) -> JSONResponse:
    body: dict[str, Any]
    if result.ok:
        body = {"code": result.code.value, "message": result.message}
    else:
        error: dict[str, Any] = {"code": result.code.value, "message": result.message}
        if result.problems:
            error["problems"] = list(result.problems)
        body = {"error": error}
    if result.card_view is not None:
        body["card"] = result.card_view.to_json()
    return _json(STATUS[result.code], body)


Action = Callable[[CardService, Principal, str, Any], Awaitable[CardActionResult]]


class _Endpoints:
    def __init__(self, service: CardService, audit: AuditSink) -> None:
        self._service = service
        self._audit = audit

    async def _invalid(self, request: Request, problems: list[str], message: str) -> Response:
        """A body or query refused before the card service saw it: audited like every refusal."""
        refusal = AuditEvent.refusal(principal_of(request.scope), "admin.request", ResultCode.VALIDATION_ERROR.value,
                                     message, {"path": request.url.path})  # fmt: skip
        await self._audit.record(refusal)
        return _error(ResultCode.VALIDATION_ERROR, message, status=422, problems=problems)

    async def list_cards(self, request: Request) -> Response:
        try:
            query = ListQuery.model_validate(dict(request.query_params))
        except ValidationError as error:
            return await self._invalid(request, _problems(error), "invalid query")
        try:
            items = await self._service.list(
                principal_of(request.scope),
                state=query.state,
                tool=query.tool,
                requester=query.requester,
                limit=query.limit,
            )
        except StoreUnavailableError as error:
            return _error(ResultCode.LEDGER_UNAVAILABLE, str(error), status=503)
        return _json(200, {"cards": [item.to_json() for item in items]})

    async def show_card(self, request: Request) -> Response:
        try:
            view = await self._service.show(principal_of(request.scope), request.path_params["card_id"])
        except StoreUnavailableError as error:
            return _error(ResultCode.LEDGER_UNAVAILABLE, str(error), status=503)
        if view is None:
            return _error(ResultCode.NOT_FOUND, "no such card", status=404)
        return _json(200, {"card": view.to_json()})

    def action(self, model: type[BaseModel], call: Action) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            raw = await _read_body(request)
            if raw is None:
                return await self._invalid(request, [f"body: at most {MAX_BODY_BYTES} bytes"], "invalid body")
            try:
                body = model.model_validate_json(raw or b"{}")
            except ValidationError as error:
                return await self._invalid(request, _problems(error), "invalid body")
            admin = principal_of(request.scope)
            return _result(await call(self._service, admin, request.path_params["card_id"], body))

        return endpoint


async def _read_body(request: Request) -> bytes | None:
    """The body, or None once it passes `MAX_BODY_BYTES` (read no further)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _approve(service: CardService, admin: Principal, card_id: str, body: ApproveBody) -> CardActionResult:
    return await service.approve(admin, card_id, version=body.version, args_hash=body.args_hash, comment=body.comment)


async def _reject(service: CardService, admin: Principal, card_id: str, body: RejectBody) -> CardActionResult:
    return await service.reject(admin, card_id, reason=body.reason)


async def _cancel(service: CardService, admin: Principal, card_id: str, body: CancelBody) -> CardActionResult:
    return await service.cancel(admin, card_id)


async def _resolve(service: CardService, admin: Principal, card_id: str, body: ResolveBody) -> CardActionResult:
    return await service.resolve(admin, card_id, outcome=body.outcome, evidence=body.evidence)


async def _http_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):
        return _error("INTERNAL_ERROR", "internal error", status=500)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "HTTP_ERROR")
    response = _error(code, exc.detail, status=exc.status_code)
    response.headers.update(exc.headers or {})
    return response


def admin_routes(service: CardService, *, keys: KeyStore, audit: AuditSink) -> list[BaseRoute]:
    """The admin API as one `Mount("/admin/api")`, every route behind an admin bearer key.

    openapi.json is behind the key too: it holds no secret, but the admin surface tells a caller
    without an admin key nothing at all, and every legitimate consumer of it holds one.
    """
    endpoints = _Endpoints(service, audit)
    document = openapi_document()

    async def openapi(request: Request) -> Response:
        return _json(200, document)

    api = Starlette(
        routes=[
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/cards", endpoints.list_cards, methods=["GET"]),
            Route("/cards/{card_id}", endpoints.show_card, methods=["GET"]),
            Route("/cards/{card_id}/approve", endpoints.action(ApproveBody, _approve), methods=["POST"]),
            Route("/cards/{card_id}/reject", endpoints.action(RejectBody, _reject), methods=["POST"]),
            Route("/cards/{card_id}/cancel", endpoints.action(CancelBody, _cancel), methods=["POST"]),
            Route("/cards/{card_id}/resolve", endpoints.action(ResolveBody, _resolve), methods=["POST"]),
        ],
        # JSON only, even for a wrong path or method and for a bug.
        exception_handlers={HTTPException: _http_error, Exception: _http_error},
    )
    return [Mount("/admin/api", app=BearerAuth(api, keys=keys, kind=KeyKind.ADMIN, audit=audit, realm="admin"))]


# -- the OpenAPI document: request bodies from the models above, responses written as data ----------

_REF = "#/components/schemas/{model}"
_CARD_PATH = {"name": "card_id", "in": "path", "required": True, "schema": {"type": "string"}}
_TIME = {"type": ["string", "null"], "format": "date-time"}


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema(ref_template=_REF)


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF.format(model=name)}


def _response(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


_ERRORS = {
    "401": {"description": "missing, unknown, revoked or non-admin key"},
    "404": _response("no such card (or a card of another org)", "Error"),
    "503": _response("the ledger is unreachable or not durable; nothing changed", "Error"),
}

_CARD_PROPERTIES: dict[str, Any] = {
    "card_id": {"type": "string"},
    "tool": {"type": "string"},
    "tool_version": {"type": "string"},
    "state": {"enum": [state.value for state in CardState]},
    "decision": {"enum": ["pending", "approved", "rejected", "expired", "cancelled"]},
    "outcome": {"enum": ["none", "in_progress", "succeeded", "failed", "unknown"]},
    "version": {"type": "integer", "description": "send it back with an approval"},
    "args_hash": {"type": "string", "description": "send it back with an approval"},
    "arguments": {"type": "object", "description": "canonical arguments the write will run with"},
    "summary": {"type": "string", "description": "rendered by the server"},
    "agent_text": {
        "type": "object",
        "description": "the requesting agent's own words: untrusted, never instructions",
        "required": ["untrusted", "note", "fields"],
        "properties": {
            "untrusted": {"const": True},
            "note": {"type": "string"},
            "fields": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "requester": {"type": "object", "properties": {k: {"type": "string"} for k in ("subject", "org", "key_id")}},
    "approvals": {
        "type": "object",
        "properties": {
            "required": {"type": "integer"},
            "received": {"type": "integer"},
            "by": {"type": "array", "items": {"type": "string"}},
            "role": {"type": "string"},
        },
    },
    "rejection": {
        "type": ["object", "null"],
        "properties": {"by": {"type": "string"}, "reason": {"type": "string"}},
    },
    "reference": {"type": ["string", "null"]},
    "evidence": {"type": "object"},
    "attempts": {"type": "integer"},
    "idempotency_key": {"type": "string"},
    "created_at": _TIME,
    "decide_by": _TIME,
    "execute_by": _TIME,
    "events": {"type": "array", "items": {"type": "object"}},
    "chain_valid": {"type": "boolean", "description": "whether the event history's hash chain is unbroken"},
}
_CARD = {"type": "object", "required": list(_CARD_PROPERTIES), "properties": _CARD_PROPERTIES}


def openapi_document() -> dict[str, Any]:
    """An OpenAPI 3.1 description of the admin API (paths relative to ``/admin/api``)."""
    bodies = {model.__name__: model for model in (ApproveBody, RejectBody, CancelBody, ResolveBody)}
    schemas: dict[str, Any] = {name: _schema(model) for name, model in bodies.items()}
    schemas |= {
        "Card": _CARD,
        "CardList": {
            "type": "object",
            "properties": {"cards": {"type": "array", "items": {"type": "object"}}},
        },
        "CardEnvelope": {"type": "object", "properties": {"card": _ref("Card")}},
        "ActionResult": {
            "type": "object",
            "properties": {"code": {"const": "OK"}, "message": {"type": "string"}, "card": _ref("Card")},
        },
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"enum": [code.value for code in ResultCode if code is not ResultCode.OK]},
                        "message": {"type": "string"},
                        "problems": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "card": _ref("Card"),
            },
        },
    }

    def action(name: str, summary: str) -> dict[str, Any]:
        return {
            "post": {
                "operationId": f"{name}Card",
                "summary": summary,
                "parameters": [_CARD_PATH],
                "requestBody": {
                    "required": name != "cancel",
                    "content": {"application/json": {"schema": _ref(f"{name.capitalize()}Body")}},
                },
                "responses": {
                    "200": _response("done; the card as it is now", "ActionResult"),
                    "403": _response("the requester itself, or the admin lacks the approver role", "Error"),
                    "409": _response("stale version or args_hash, wrong state, same approver twice, expired", "Error"),
                    "422": _response("the body is invalid", "Error"),
                    **_ERRORS,
                },
            }
        }

    filters = [
        {"name": "state", "in": "query", "schema": {"enum": [state.value for state in CardState]}},
        {"name": "tool", "in": "query", "schema": {"type": "string"}},
        {"name": "requester", "in": "query", "schema": {"type": "string"}},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIST}},
    ]
    return {
        "openapi": "3.1.0",
        "info": {"title": "Countersign admin API", "version": "1"},
        "servers": [{"url": "/admin/api"}],
        "security": [{"adminKey": []}],
        "components": {
            "securitySchemes": {
                "adminKey": {"type": "http", "scheme": "bearer", "description": "an admin key (csk_admin_...)"}
            },
            "schemas": schemas,
        },
        "paths": {
            "/cards": {
                "get": {
                    "operationId": "listCards",
                    "summary": "Cards of the admin's org, newest first",
                    "parameters": filters,
                    "responses": {
                        "200": _response("matching cards", "CardList"),
                        "401": _ERRORS["401"],
                        "422": _response("invalid query", "Error"),
                        "503": _ERRORS["503"],
                    },
                }
            },
            "/cards/{card_id}": {
                "get": {
                    "operationId": "showCard",
                    "summary": "One card with its full, hash-chained history",
                    "parameters": [_CARD_PATH],
                    "responses": {"200": _response("the card", "CardEnvelope"), **_ERRORS},
                }
            },
            "/cards/{card_id}/approve": action("approve", "Approve the card as reviewed (version, args_hash)"),
            "/cards/{card_id}/reject": action("reject", "Veto the card, with a reason"),
            "/cards/{card_id}/cancel": action("cancel", "Cancel a PENDING or APPROVED card"),
            "/cards/{card_id}/resolve": action(
                "resolve", "Settle a NEEDS_RECONCILIATION card as SUCCEEDED or FAILED, with evidence"
            ),
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": {"200": {"description": "OpenAPI 3.1"}, "401": _ERRORS["401"]},
                }
            },
        },
    }
