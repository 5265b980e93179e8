"""The demo backends' check of the gateway's signatures against its published keys (JWKS).

Switched on per service by giving it the gateway's ``/.well-known/jwks.json`` URL (``jwks_url``; on
in the demo and in the tests that need it). Then:

* the identity token may be the gateway's ``EdDSA`` one, verified with the JWKS (a shared HS256
  key, when the service still has one, keeps working beside it: the transition);
* every request that can change something (not GET/HEAD/OPTIONS) needs ``X-Countersign-Receipt``,
  a receipt the gateway signed for exactly this request (method, path, query, body and
  ``Idempotency-Key``): 403 ``missing_receipt`` without one, 403 ``invalid_receipt`` when it does
  not verify or is for another request. So a write that did not come through an approval fails.

Keys are fetched with `gateway.auth.jwks.JwksSource` (cached; fetched again for a ``kid`` it has not
seen, at most once a second), so a rotation needs no restart.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

import jwt
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope

from gateway.auth.jwks import JwksSource
from gateway.signing.identity import verify_identity
from gateway.signing.receipts import RECEIPT_HEADER, verify_receipt

__all__ = ["SAFE_METHODS", "GatewayKeys"]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_BODY_BYTES = 1024 * 1024


class GatewayKeys:
    """The gateway's public keys, as one service checks identities and receipts with them."""

    def __init__(self, jwks_url: str, *, audience: str) -> None:
        self._source = JwksSource(issuer="countersign", jwks_url=jwks_url, min_refresh_seconds=1.0,
                                  max_age_seconds=60.0)  # fmt: skip
        self._audience = audience

    async def _jwks_for(self, token: str) -> dict[str, Any]:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.InvalidTokenError:
            return {"keys": []}
        key = await self._source.key(kid) if isinstance(kid, str) else None
        return {"keys": [dict(key)] if key is not None else []}

    async def identity(self, token: str) -> dict[str, str] | None:
        """``{"sub", "org"}`` of an EdDSA identity token, or None when it does not verify."""
        try:
            return verify_identity(token, adapter=self._audience, jwks=await self._jwks_for(token))
        except jwt.InvalidTokenError:
            return None

    async def receipt_refusal(self, scope: Scope, body: bytes) -> str | None:
        """None when the request carries a valid receipt for itself; else the error code to answer 403 with."""
        headers = Headers(scope=scope)
        token = headers.get(RECEIPT_HEADER)
        if not token:
            return "missing_receipt"
        try:
            payload = json.loads(body) if body else None
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            verify_receipt(token, jwks=await self._jwks_for(token), audience=self._audience, method=scope["method"],
                           path=scope["path"], query=query, body=payload,
                           idempotency_key=headers.get("idempotency-key"))  # fmt: skip
        except (jwt.InvalidTokenError, ValueError):
            return "invalid_receipt"
        return None


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body (at most `MAX_BODY_BYTES`; more is cut, and then no receipt matches), and a
    `receive` that gives it to the app again."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size <= MAX_BODY_BYTES:
            chunks.append(chunk)
        more = message.get("more_body", False)
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay
