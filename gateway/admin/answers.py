"""How every admin API route answers: one JSON shape, one status per `ResultCode`, one refusal of a bad body.

Who uses it: the card routes (`gateway.admin.api`) and the passkey routes (`gateway.admin.passkeys`), so a
route of either answers alike: ``cache-control: no-store`` on every answer (they hold business data and
approval state), ``retry-after`` on a 503, an `AdminError` body for every refusal, and a body or query that
is refused before any service sees it audited (``admin.request``, VALIDATION_ERROR) like every refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admin.bodies import AdminError, AdminErrorDetail
from gateway.audit.events import AuditEvent, AuditSink
from gateway.auth.bearer import STORE_RETRY_AFTER_SECONDS, principal_of
from gateway.cards.views import ResultCode
from gateway.errors import StoreUnavailableError
from gateway.web.request_body import read_bounded
from gateway.web.route_table import Endpoint

__all__ = [
    "MAX_BODY_BYTES",
    "STATUS",
    "answer",
    "error",
    "problems",
    "refuse_invalid",
    "store_guarded",
    "with_body",
]

MAX_BODY_BYTES = 65_536

STATUS: dict[ResultCode, int] = {
    ResultCode.OK: 200,
    ResultCode.NOT_FOUND: 404,
    ResultCode.PERMISSION_DENIED: 403,
    ResultCode.CONFLICT: 409,
    ResultCode.VALIDATION_ERROR: 422,
    ResultCode.LEDGER_UNAVAILABLE: 503,
    ResultCode.PASSKEY_REQUIRED: 403,
    ResultCode.PASSKEY_INVALID: 403,
}

BodyModel = TypeVar("BodyModel", bound=BaseModel)


def answer(status: int, body: BaseModel | dict[str, Any]) -> JSONResponse:
    """`body` (a response model, dumped as JSON, or a document) with `status`, never cached."""
    content = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    headers = {"cache-control": "no-store"}
    if status == 503:  # the ledger could not answer, or not durably: a retry soon may succeed
        headers["retry-after"] = str(STORE_RETRY_AFTER_SECONDS)
    return JSONResponse(content, status_code=status, headers=headers)


def error(code: str, message: str, *, status: int, problems: Sequence[str] = ()) -> JSONResponse:
    """An `AdminError` answer: `code`, the sentence `message`, and what was wrong (`problems`) if anything."""
    return answer(status, AdminError(error=AdminErrorDetail(code=code, message=message, problems=list(problems))))


def problems(error: ValidationError) -> list[str]:
    """Where and what, per problem of `error`: location and message only, as pydantic's "input" would echo
    the request back."""
    return [f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()]


async def refuse_invalid(audit: AuditSink, request: Request, found: list[str], message: str) -> Response:
    """A body or query refused before any service saw it (422 VALIDATION_ERROR), audited like every refusal."""
    refusal = AuditEvent.refusal(
        principal_of(request.scope),
        "admin.request",
        ResultCode.VALIDATION_ERROR.value,
        message,
        {"path": request.url.path},
    )
    await audit.record(refusal)
    return error(ResultCode.VALIDATION_ERROR, message, status=422, problems=found)


def with_body(
    model: type[BodyModel], audit: AuditSink, call: Callable[[Request, BodyModel], Awaitable[Response]]
) -> Endpoint:
    """An endpoint that reads the request's body as `model` (at most `MAX_BODY_BYTES`; none reads as ``{}``)
    and answers with `call` of it, or refuses it (`refuse_invalid`) without calling `call`."""

    async def endpoint(request: Request) -> Response:
        raw = await read_bounded(request, MAX_BODY_BYTES)
        if raw is None:
            return await refuse_invalid(audit, request, [f"body: at most {MAX_BODY_BYTES} bytes"], "invalid body")
        try:
            body = model.model_validate_json(raw or b"{}")
        except ValidationError as invalid:
            return await refuse_invalid(audit, request, problems(invalid), "invalid body")
        return await call(request, body)

    return endpoint


def store_guarded(endpoint: Endpoint) -> Endpoint:
    """`endpoint`, answering 503 LEDGER_UNAVAILABLE (retryable) when Redis does not answer it."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except StoreUnavailableError as unavailable:
            return error(ResultCode.LEDGER_UNAVAILABLE, str(unavailable), status=503)

    return guarded
