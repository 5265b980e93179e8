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

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admin.answers import STATUS, answer, error, store_guarded, with_body
from gateway.admin.bodies import AdminError
from gateway.audit.events import AuditSink
from gateway.auth.bearer import principal_of
from gateway.passkeys.service import MAX_NAME, PasskeyResult, PasskeyService
from gateway.web.route_table import Answer, Operation, RouteTable

__all__ = ["PasskeyList", "passkey_table"]


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


def _answer(result: PasskeyResult) -> JSONResponse:
    if not result.ok:
        return error(result.code, result.message, status=STATUS[result.code])
    if result.options is not None:
        return answer(200, Options(code="OK", message=result.message, options=dict(result.options)))
    return answer(200, Done(code="OK", message=result.message))


def passkey_table(service: PasskeyService, *, mount: str, audit: AuditSink) -> RouteTable:
    """The passkey routes, to be mounted at `mount` (``/admin/api``); each answers 503 while Redis does not, and
    a body refused before the service saw it is audited to `audit`."""

    async def listing(request: Request) -> Response:
        found = await service.list(principal_of(request.scope))
        # Each field shown is the stored passkey's own field of that name.
        shown = [PasskeyShown.model_validate(passkey, from_attributes=True) for passkey in found]
        return answer(200, PasskeyList(passkeys=shown))

    async def registration(request: Request, body: EmptyBody) -> Response:
        return _answer(await service.registration_options(principal_of(request.scope)))

    async def register(request: Request, body: RegisterBody) -> Response:
        return _answer(await service.register(principal_of(request.scope), body.credential, name=body.name))

    async def remove(request: Request) -> Response:
        return _answer(await service.remove(principal_of(request.scope), request.path_params["credential_id"]))

    async def challenge(request: Request, body: ChallengeBody) -> Response:
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
                endpoint=store_guarded(listing),
                answers={200: Answer(description="your passkeys", model=PasskeyList)},
            ),
            Operation(
                method="POST",
                path="/passkeys/registration",
                name="passkeyRegistrationOptions",
                summary="Start registering a passkey (signed in with the company sign-in; a key only in demo mode)",
                endpoint=store_guarded(with_body(EmptyBody, audit, registration)),
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
                endpoint=store_guarded(with_body(RegisterBody, audit, register)),
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
                endpoint=store_guarded(remove),
                answers={200: Answer(description="removed", model=Done), 404: refused},
            ),
            Operation(
                method="POST",
                path="/passkeys/challenge",
                name="passkeyApprovalOptions",
                summary="Options to sign the approval of a card as reviewed (id, version, args_hash) with a passkey",
                endpoint=store_guarded(with_body(ChallengeBody, audit, challenge)),
                body=ChallengeBody,
                answers={
                    200: Answer(description="options for navigator.credentials.get", model=Options),
                    403: Answer(description="you have no passkey registered (PASSKEY_REQUIRED)", model=AdminError),
                    422: Answer(description="invalid body", model=AdminError),
                },
            ),
        ),
    )
