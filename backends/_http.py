"""HTTP vocabulary shared by the demo backends: caller identity, error bodies, argument parsing.

This is a leaf: it imports Starlette, pydantic and the gateway's published `verify_identity` only,
never another ``backends`` module, so the idempotency layer, the fault switch and every service can
all build on it.

A backend learns who is asking from one thing: ``X-Countersign-Identity``, a JWT the gateway signed
for this service with a key the two share. The plain ``X-Countersign-Subject`` and
``X-Countersign-Org`` headers the gateway also sends are not trusted: anyone on the network path
could write them.

Error bodies are always ``{"error": <machine code>}`` (plus extra fields only where a contract says
so), so the gateway and the tests compare codes, never prose.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import jwt
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.signing.identity import verify_identity

IDENTITY_HEADER = "x-countersign-identity"
"""Who is asking, as the gateway authenticated them: a JWT signed for this service (`gateway.signing.identity`)."""
CALLER_SCOPE_KEY = "countersign.caller"
"""Where the service shell puts the verified `Caller` in the ASGI scope, for `caller_of`."""

ArgsT = TypeVar("ArgsT")
Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Caller:
    """The person on whose behalf the gateway calls, read from the identity headers."""

    subject: str
    """The caller's stable id, e.g. ``alice@acme.example``."""
    org: str
    """The caller's org; an object of another org must look exactly like a missing one."""


def verified_caller(token: str, *, signing_key: str, audience: str) -> Caller | None:
    """The caller an HS256-signed identity names, or ``None`` when it does not verify.

    It does not verify when its signature is not by `signing_key` (none: nothing verifies), it was
    signed for another service than `audience`, it has expired, its issuer is not the gateway, or its
    subject or org is blank.
    """
    try:
        claims = verify_identity(token, key=signing_key, adapter=audience)
    except jwt.InvalidTokenError:
        return None
    return caller_from(claims)


def caller_from(claims: Mapping[str, str] | None) -> Caller | None:
    """The caller of verified identity claims; None for none, or a blank subject or org."""
    if claims is None:
        return None
    subject, org = claims["sub"].strip(), claims["org"].strip()
    return Caller(subject=subject, org=org) if subject and org else None


def caller_of(request: Request) -> Caller:
    """Return the caller of a request the service shell has already admitted.

    Raises:
        RuntimeError: if no verified caller is in the request's scope, which means a route was
            reached without passing through the shell (a wiring bug, not a client error).
    """
    caller = request.scope.get(CALLER_SCOPE_KEY)
    if not isinstance(caller, Caller):
        raise RuntimeError("route reached without caller identity; is the service shell installed?")
    return caller


def error(status_code: int, code: str, *, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """Build the uniform error response ``{"error": code}``."""
    return JSONResponse({"error": code}, status_code=status_code, headers=headers)


def not_found() -> JSONResponse:
    """The one answer for a missing object and for another org's object, so the two cannot be told apart."""
    return error(404, "not_found")


def parse_args(adapter: TypeAdapter[ArgsT], body: bytes) -> ArgsT | None:
    """Validate a JSON request body against ``adapter``; ``None`` means it is malformed.

    Validation is strict (no ``"5"`` for ``5``, no ``true`` for ``1``) because a write that guesses what
    the caller meant is worse than a 400.
    """
    try:
        return adapter.validate_json(body or b"{}", strict=True)
    except ValidationError:
        return None


def invalid_request() -> JSONResponse:
    """The answer for a body that does not match the endpoint's arguments."""
    return error(400, "invalid_request")
