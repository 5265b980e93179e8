"""The admin API's passkey routes, under ``/admin/api/passkeys``: an approver's own passkeys.

Who calls it: the composition root passes `passkey_table(...)` to `admin_routes` among its tables,
so these routes sit behind the same session-or-key check as the card routes. They translate and
decide nothing: `gateway.passkeys.service.PasskeyService` does, and audits.

* ``GET /passkeys``: the approver's passkeys (never a secret: ids, names, public keys, counters).
* ``POST /passkeys/registration``: options for ``navigator.credentials.create``.
* ``POST /passkeys``: the authenticator's answer, and a name; the passkey is kept.
* ``DELETE /passkeys/{credential_id}``: forget one.
* ``POST /passkeys/challenge``: options for ``navigator.credentials.get`` whose challenge is the
  card's (`gateway.passkeys.assertion.approval_challenge`), to approve it as reviewed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admin.bodies import AdminError, AdminErrorDetail
from gateway.auth.bearer import principal_of
from gateway.cards.views import ResultCode
from gateway.errors import StoreUnavailableError
from gateway.passkeys.service import MAX_NAME, PasskeyResult, PasskeyService
from gateway.store.passkeys import StoredPasskey
from gateway.web.request_body import read_bounded
from gateway.web.route_table import Answer, Endpoint, Operation, RouteTable

__all__ = ["PasskeyList", "passkey_table"]

_MAX_BODY = 65_536
_STATUS = {
    ResultCode.OK: 200,
    ResultCode.NOT_FOUND: 404,
    ResultCode.PERMISSION_DENIED: 403,
    ResultCode.CONFLICT: 409,
    ResultCode.VALIDATION_ERROR: 422,
    ResultCode.PASSKEY_REQUIRED: 403,
    ResultCode.PASSKEY_INVALID: 403,
    ResultCode.LEDGER_UNAVAILABLE: 503,
}


class PasskeyShown(BaseModel):
    credential_id: str
    name: str
    public_key: str
    """COSE, base64url: what a backend verifies an approval receipt's assertion with."""
    sign_count: int
    created_ms: int
    aaguid: str


class PasskeyList(BaseModel):
    passkeys: list[PasskeyShown]


class Options(BaseModel):
    code: Literal["OK"]
    message: str
    options: dict[str, Any]
    """Hand to the browser's WebAuthn call (base64url strings where it takes bytes)."""


class Done(BaseModel):
    code: Literal["OK"]
    message: str


class RegisterBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=MAX_NAME)
    credential: dict[str, Any]
    """The authenticator's answer to ``navigator.credentials.create``, as JSON."""


class ChallengeBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    card_id: str = Field(min_length=1, max_length=200)
    version: int = Field(ge=1)
    args_hash: str = Field(min_length=1, max_length=200)
    decision: Literal["approve"] = "approve"


class EmptyBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _shown(passkey: StoredPasskey) -> PasskeyShown:
    return PasskeyShown(
        credential_id=passkey.credential_id,
        name=passkey.name,
        public_key=passkey.public_key,
        sign_count=passkey.sign_count,
        created_ms=passkey.created_ms,
        aaguid=passkey.aaguid,
    )


def _json(status: int, body: BaseModel) -> JSONResponse:
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers={"cache-control": "no-store"})


def _answer(result: PasskeyResult) -> JSONResponse:
    if not result.ok:
        return _json(
            _STATUS[result.code], AdminError(error=AdminErrorDetail(code=result.code.value, message=result.message))
        )
    if result.options is not None:
        return _json(200, Options(code="OK", message=result.message, options=dict(result.options)))
    return _json(200, Done(code="OK", message=result.message))


def _invalid(error: ValidationError | str) -> JSONResponse:
    problems = (
        [error]
        if isinstance(error, str)
        else [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()]
    )
    detail = AdminErrorDetail(code=ResultCode.VALIDATION_ERROR.value, message="invalid body", problems=problems)
    return _json(422, AdminError(error=detail))


async def _body(request: Request, model: type[BaseModel]) -> Any:
    raw = await read_bounded(request, _MAX_BODY)
    if raw is None:
        return _invalid(f"body: at most {_MAX_BODY} bytes")
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as error:
        return _invalid(error)


def _store_guarded(endpoint: Endpoint) -> Endpoint:
    """`endpoint`, answering 503 LEDGER_UNAVAILABLE (retryable) when Redis does not."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except StoreUnavailableError as error:
            detail = AdminErrorDetail(code=ResultCode.LEDGER_UNAVAILABLE.value, message=str(error))
            return _json(503, AdminError(error=detail))

    return guarded


def passkey_table(service: PasskeyService, *, mount: str) -> RouteTable:
    """The passkey routes, to be mounted at `mount` (``/admin/api``); each answers 503 while Redis does not."""

    async def listing(request: Request) -> Response:
        found = await service.list(principal_of(request.scope))
        return _json(200, PasskeyList(passkeys=[_shown(p) for p in found]))

    async def registration(request: Request) -> Response:
        body = await _body(request, EmptyBody)
        if isinstance(body, Response):
            return body
        return _answer(await service.registration_options(principal_of(request.scope)))

    async def register(request: Request) -> Response:
        body = await _body(request, RegisterBody)
        if isinstance(body, Response):
            return body
        return _answer(await service.register(principal_of(request.scope), body.credential, name=body.name))

    async def remove(request: Request) -> Response:
        return _answer(await service.remove(principal_of(request.scope), request.path_params["credential_id"]))

    async def challenge(request: Request) -> Response:
        body = await _body(request, ChallengeBody)
        if isinstance(body, Response):
            return body
        result = await service.assertion_options(
            principal_of(request.scope),
            card_id=body.card_id,
            version=body.version,
            args_hash=body.args_hash,
            decision=body.decision,
        )
        return _answer(result)

    refused = Answer(description="refused (the code says why)", model=AdminError)
    return RouteTable(
        mount=mount,
        operations=(
            Operation(
                method="GET",
                path="/passkeys",
                name="listPasskeys",
                summary="Your passkeys",
                endpoint=_store_guarded(listing),
                answers={200: Answer(description="your passkeys", model=PasskeyList)},
            ),
            Operation(
                method="POST",
                path="/passkeys/registration",
                name="passkeyRegistrationOptions",
                summary="Start registering a passkey (signed in with the company sign-in; a key only in demo mode)",
                endpoint=_store_guarded(registration),
                body=EmptyBody,
                body_required=False,
                answers={
                    200: Answer(description="options for navigator.credentials.create", model=Options),
                    403: refused,
                },
            ),
            Operation(
                method="POST",
                path="/passkeys",
                name="registerPasskey",
                summary="Finish registering a passkey: the authenticator's answer, verified (user verified)",
                endpoint=_store_guarded(register),
                body=RegisterBody,
                answers={
                    200: Answer(description="registered", model=Done),
                    403: refused,
                    409: refused,
                    422: Answer(description="invalid body", model=AdminError),
                },
            ),
            Operation(
                method="DELETE",
                path="/passkeys/{credential_id}",
                name="removePasskey",
                summary="Forget one of your passkeys",
                endpoint=_store_guarded(remove),
                answers={200: Answer(description="removed", model=Done), 404: refused},
            ),
            Operation(
                method="POST",
                path="/passkeys/challenge",
                name="passkeyApprovalOptions",
                summary="Options to sign the approval of a card as reviewed (id, version, args_hash) with a passkey",
                endpoint=_store_guarded(challenge),
                body=ChallengeBody,
                answers={
                    200: Answer(description="options for navigator.credentials.get", model=Options),
                    403: Answer(description="you have no passkey registered (PASSKEY_REQUIRED)", model=AdminError),
                    422: Answer(description="invalid body", model=AdminError),
                },
            ),
        ),
    )
