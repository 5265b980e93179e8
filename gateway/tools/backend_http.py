"""Calling a backend from an adapter: identity headers, status mapping, error translation.

Part of the public `gateway` API, so an adapter package declares its tools and calls its backend
with nothing but `gateway`.

Every adapter goes through `request_json`, so the executor never sees a library's exception and
every backend learns who is asking the same way. The caller's bearer token is not available
here (a `Principal` has none), so it cannot be forwarded.

`lookup_by_key` is the status lookup of every write whose backend keeps an idempotency record
(``GET /idempotency/{key}``): what became of a write whose answer was lost.
"""

from __future__ import annotations

import math
import re
import time
import unicodedata
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote

from gateway.errors import (
    PathArgumentError,
    UpstreamError,
    UpstreamNotFoundError,
    UpstreamProtocolError,
    UpstreamRateLimitedError,
    UpstreamRefusedError,
    UpstreamUnavailableError,
)
from gateway.tools.context import ToolContext
from gateway.tools.declarations import StatusLookup, WriteContract, WriteStatus
from gateway.tools.upstream import UpstreamResponse

__all__ = [
    "RECEIPT_REFUSALS",
    "fill_path",
    "keyed_contract",
    "lookup_by_key",
    "path_segment_problem",
    "request_json",
    "retry_after_of",
    "status_by_key",
]

_IDENTITY_HEADER = "x-countersign-identity"
"""`gateway.signing.identity.IDENTITY_HEADER` (that module stands above this one, so it is not imported)."""
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
RECEIPT_REFUSALS = frozenset({"missing_receipt", "invalid_receipt"})
"""The codes of a backend's 403 for a write whose approval receipt it did not accept: nothing applied."""


def fill_path(template: str, **values: str) -> str:
    """Fill a path template so that no value can change which endpoint is called.

    Every value is percent-encoded whole (a ``/`` in it cannot add a segment). A value that is empty,
    is a dot segment (``.``, ``..``) or holds one, whether written plainly, percent-encoded at any depth,
    behind a backslash or in full-width dots, is refused: an HTTP client or server would normalise it
    away (``/notes/../detail`` is sent as ``GET /detail``).

    Raises:
        PathArgumentError: for such a value, or one that is not valid text (a lone surrogate); nothing is sent.
    """
    filled = {}
    for key, value in values.items():
        problem = path_segment_problem(value)
        if problem is not None:
            raise PathArgumentError(f"path argument {key!r} {problem}", argument=key)
        filled[key] = quote(value, safe="")
    return template.format(**filled)


_DOT_SEGMENTS = frozenset({".", ".."})
_MAX_DECODINGS = 8


_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
"""ASCII letters, digits, ``-`` and ``_`` only: no dot, separator or ``%``, and NFKC leaves them as they are."""


def path_segment_problem(value: str) -> str | None:
    """Why `value` cannot be one path segment, or None when it can (see `fill_path`)."""
    if _PLAIN.fullmatch(value):
        return None  # the common id: nothing below could find a problem in it
    if not value:
        return "is empty"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid text"
    seen = value
    for _ in range(_MAX_DECODINGS):
        for form in (seen, unicodedata.normalize("NFKC", seen)):
            if _DOT_SEGMENTS & set(re.split(r"[/\\;]", form)):
                return "is or holds a dot segment"
        decoded = unquote(seen, errors="replace") if "%" in seen else seen
        if decoded == seen:
            return None
        seen = decoded
    return "is percent-encoded too many times"


async def request_json(
    ctx: ToolContext,
    method: str,
    url: str,
    *,
    params: Mapping[str, str] | None = None,
    json: Mapping[str, Any] | list[Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """Send one request for the caller in `ctx` and return the decoded JSON body of a 2xx answer: any JSON
    value, and ``{}`` for an answer without a body (204 No Content, or an empty 200).

    `headers` are the API's own (a manifest's header parameters); the gateway's (identity, receipt, key)
    are set after them and win.

    Raises:
        UpstreamNotFoundError: 404 or 410 (a missing object and another org's object look the same).
        UpstreamRefusedError: 403, 409 or 422, a definitive refusal (a 403 with a `RECEIPT_REFUSALS` code: the
            approval's receipt was not accepted).
        UpstreamRateLimitedError: 429, with the seconds of its ``Retry-After`` (`retry_after_of`).
        UpstreamUnavailableError: connect failures, 502/503/504.
        UpstreamTimeoutError: no answer within the client's read timeout.
        UpstreamProtocolError: any other status, or a body that is not JSON.

    Each error of a non-2xx answer carries the backend's body in `UpstreamError.answer`, for people.
    """
    response = await _send(ctx, method, url, params=params, json=json, headers=headers)
    status = response.status
    if 200 <= status < 300:
        if status == 204 or not response.body.strip():
            return {}
        try:
            return response.json()
        except ValueError as error:
            raise UpstreamProtocolError("2xx answer is not JSON", service=ctx.service, status=status) from error
    raise _status_error(ctx.service, response)


async def lookup_by_key(
    ctx: ToolContext, key: str, *, reference_field: str, path_template: str = "/idempotency/{key}"
) -> WriteStatus:
    """What became of the write sent with idempotency `key`, as the backend remembers it.

    200 ``applied`` or ``refused`` is the backend's record (``reference`` is the applied answer's
    `reference_field`); 404 ``{"state": "unknown"}`` means it has none for this caller's org.

    Raises:
        UpstreamError: no usable answer (transport, 5xx, any other 404 or shape); ask again later.
    """
    response = await _send(ctx, "GET", fill_path(path_template, key=key))
    body = _json_object(response)
    if response.status == 404 and body.get("state") == "unknown":
        return WriteStatus(state="unknown", detail=body)
    if response.status != 200:
        raise _status_error(ctx.service, response)
    state, answer = body.get("state"), body.get("response")
    if body.get("key") != key or state not in ("applied", "refused") or not isinstance(answer, dict):
        raise UpstreamProtocolError("unexpected idempotency record", service=ctx.service, status=200)
    if state == "refused":
        return WriteStatus(state="refused", detail=body)
    reference = answer.get(reference_field)
    return WriteStatus(state="applied", reference=reference if isinstance(reference, str) else None, detail=body)


def keyed_contract(reference_field: str, *, key_retention_seconds: float = 86400.0) -> WriteContract:
    """The write contract of a backend that dedupes on ``Idempotency-Key`` and answers
    ``GET /idempotency/{key}``; 400/403/404/409/422 mean "not applied" (the demo backends' contract:
    403 is a receipt refused before anything was done)."""
    return WriteContract(
        dedupes_on_key=True,
        key_retention_seconds=key_retention_seconds,
        status_lookup=status_by_key(reference_field),
        reference_field=reference_field,
        not_applied_statuses=frozenset({400, 403, 404, 409, 422}),
    )


def status_by_key(reference_field: str, path_template: str = "/idempotency/{key}") -> StatusLookup:
    """A `WriteContract.status_lookup` that calls `lookup_by_key` with `reference_field`."""

    async def lookup(key: str, ctx: ToolContext) -> WriteStatus:
        return await lookup_by_key(ctx, key, reference_field=reference_field, path_template=path_template)

    return lookup


async def _send(
    ctx: ToolContext,
    method: str,
    url: str,
    *,
    params: Mapping[str, str] | None = None,
    json: Mapping[str, Any] | list[Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> UpstreamResponse:
    # The executor computed who is asking, signed with this adapter's key. A backend cannot verify the
    # plain subject/org headers, so without the signed one nothing is sent: every backend is keyed (the
    # composition root and the live registry see to it), and a missing key is a wiring bug.
    http = ctx.http
    if http is None:  # only built-in tools run without a backend client; for an adapter it is a wiring bug
        raise UpstreamUnavailableError("no client for this backend", service=ctx.service, sent=False)
    if not ctx.identity.get(_IDENTITY_HEADER):
        raise UpstreamUnavailableError("no signed identity for this backend", service=ctx.service, sent=False)
    headers = {**(headers or {}), **ctx.identity}
    if ctx.idempotency_key is not None:
        # An approved write: each request that can change something carries a receipt signed for exactly
        # that request (a status lookup by key, and a read inside a write, need none).
        if ctx.receipt is not None:
            headers.update(ctx.receipt(method, url, params, json))
        elif method.upper() not in _SAFE_METHODS:
            raise UpstreamUnavailableError("no signed receipt for this write", service=ctx.service, sent=False)
        headers["idempotency-key"] = ctx.idempotency_key
    response = await http.request(method, url, params=params, json=json, headers=headers)
    if ctx.answered is not None and method.upper() not in _SAFE_METHODS:
        ctx.answered(response.status)
    return response


def _json_object(response: UpstreamResponse) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _status_error(service: str, response: UpstreamResponse) -> UpstreamError:
    """The error of a non-2xx answer, by the default refusal table (README, "Refusals"): what the model is told
    is its code; the backend's own body rides along as `UpstreamError.answer`, for people."""
    status, answer = response.status, _answer(response)
    if status in (404, 410):
        return UpstreamNotFoundError("not found", service=service, status=status, answer=answer)
    if status in (403, 409, 422):
        reason = _reason(response)
        return UpstreamRefusedError("refused", service=service, status=status, reason=reason, answer=answer)
    if status == 429:
        wait = retry_after_of(response.retry_after)
        return UpstreamRateLimitedError(
            f"backend answered 429; retry after {wait:g} s", service=service, retry_after=wait, answer=answer
        )
    if status in (502, 503, 504):
        return UpstreamUnavailableError(f"backend answered {status}", service=service, status=status, answer=answer)
    return UpstreamProtocolError(f"backend answered {status}", service=service, status=status, answer=answer)


MAX_ANSWER_CHARS = 2000
"""How much of a backend's error body a card keeps for approvers (GitHub's refusals are a few hundred bytes)."""


def _answer(response: UpstreamResponse) -> str:
    """The backend's error body as text, cut to `MAX_ANSWER_CHARS`: backend text, for people only."""
    text = response.body[: MAX_ANSWER_CHARS * 4].decode("utf-8", errors="replace").strip()
    return text if len(text) <= MAX_ANSWER_CHARS else text[:MAX_ANSWER_CHARS] + "…"


DEFAULT_RETRY_AFTER_SECONDS = 1.0
"""The wait reported for a 429 without a usable ``Retry-After``: a rate limit always says when to retry."""
MAX_RETRY_AFTER_SECONDS = 3600.0
"""The longest wait a backend's ``Retry-After`` is taken at: its text is a backend's, and a card's own
deadlines bound a write's retries anyway."""


def retry_after_of(header: str | None, *, now: float | None = None) -> float:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds or an HTTP-date (RFC 9110 10.2.3),
    within 0 .. `MAX_RETRY_AFTER_SECONDS`; `DEFAULT_RETRY_AFTER_SECONDS` when it is missing or unreadable.
    `now` (Unix seconds) defaults to this process's clock, against which an HTTP-date is measured."""
    text = (header or "").strip()
    if text.isascii() and text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_SECONDS)
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return DEFAULT_RETRY_AFTER_SECONDS
    wait = when - (time.time() if now is None else now)
    return float(min(max(0.0, math.ceil(wait)), MAX_RETRY_AFTER_SECONDS))


def _reason(response: UpstreamResponse) -> str:
    """The backend's machine code for a refusal (``slot_taken``), if it is a short plain word: for the audit
    and the card's evidence, which people read. It is never shown to the model."""
    try:
        code = response.json().get("error", "")
    except (ValueError, AttributeError):
        return ""
    return code if isinstance(code, str) and code.replace("_", "").isalnum() and len(code) <= 40 else ""
