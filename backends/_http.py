"""HTTP vocabulary shared by the demo backends: caller identity, error bodies, argument parsing.

This is a leaf: it imports Starlette and pydantic only, never another ``backends`` module, so the
idempotency layer, the fault switch and both services can all build on it.

Error bodies are always ``{"error": <machine code>}`` (plus extra fields only where a contract says
so), so the gateway and the tests compare codes, never prose.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

SUBJECT_HEADER = "x-countersign-subject"
"""Who is asking, as the gateway authenticated them (``alice@acme.example``)."""
ORG_HEADER = "x-countersign-org"
"""The org the subject acts for (``acme``); every object is scoped to exactly one org."""

ArgsT = TypeVar("ArgsT")
Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Caller:
    """The person on whose behalf the gateway calls, read from the identity headers."""

    subject: str
    """The caller's stable id, e.g. ``alice@acme.example``."""
    org: str
    """The caller's org; an object of another org must look exactly like a missing one."""


def caller_from_headers(headers: Headers) -> Caller | None:
    """Return the caller named by the identity headers, or ``None`` when either is missing or blank."""
    subject = headers.get(SUBJECT_HEADER, "").strip()
    org = headers.get(ORG_HEADER, "").strip()
    if not subject or not org:
        return None
    return Caller(subject=subject, org=org)


def caller_of(request: Request) -> Caller:
    """Return the caller of a request the service shell has already admitted.

    Raises:
        RuntimeError: if the identity headers are missing, which means a route was reached without
            passing through the shell (a wiring bug, not a client error).
    """
    caller = caller_from_headers(request.headers)
    if caller is None:
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
