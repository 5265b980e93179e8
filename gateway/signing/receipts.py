"""Signed approval receipts: what a backend gets with every approved write, and how it checks one.

(Not the receipt an agent gets when it proposes a write, `gateway.cards.views.AgentCard`: this one is
the backend's proof that the write it receives was approved.)

For each send of an approved card the worker signs a short-lived JWS (``EdDSA``, the gateway's
key set, `gateway.signing.signer`) and the adapter sends it as ``X-Countersign-Receipt`` beside the
``Idempotency-Key``. Its claims:

* ``iss`` the gateway's issuer, ``aud`` the adapter, ``iat``/``exp`` (a few minutes), header ``kid``
  and ``typ`` ``countersign-receipt+jwt`` (an identity token is never taken for a receipt);
* ``card_id``, ``tool``, ``args_hash`` (what the approvers approved, as the console and audit show
  it), ``idempotency_key``;
* ``sub``/``org`` the requester, ``act`` ``{"sub": <client id>}`` when an agent acted for them;
* ``approvers`` (people, and ``policy:<rule>`` for a rule's approval), ``approved_at`` (ms);
* ``passkeys``, when an approver signed with a passkey: each verified WebAuthn assertion as the card
  records it (`gateway.passkeys.assertion.ApprovalAssertion`: the approver, the card id, version and
  args_hash it was bound to, the credential and its public key, the authenticator data, client data
  and signature), so a backend can check with `gateway.passkeys.assertion.verify_approval_assertion`
  that a registered authenticator, with its user verified, approved exactly these arguments;
* ``request_hash``: SHA-256 over the request the backend receives (method, path, query, canonical
  JSON body; `request_hash`). The backend receives the adapter's request, not the tool's arguments
  (a refund puts the order id in the path; a cancel has no body), so this is the hash it can
  recompute; ``args_hash`` ties the receipt to the approved card.

A resend after a crash is signed afresh: a new receipt, equally valid, for the same card and key.

`verify_receipt` is what a backend does with it, in a few lines (the README shows them); it takes
the gateway's JWKS (``/.well-known/jwks.json``) as a document, so the backend fetches and caches
it as it likes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import jwt

from gateway.canonical import canonical_json

if TYPE_CHECKING:  # only the gateway mints receipts; a backend that imports this module to verify needs no card
    from gateway.cards.card import Card

__all__ = [
    "ALGORITHMS",
    "ISSUER",
    "RECEIPT_HEADER",
    "RECEIPT_TTL_SECONDS",
    "RECEIPT_TYPE",
    "ReceiptMismatchError",
    "receipt_claims",
    "request_hash",
    "verify_receipt",
]

RECEIPT_HEADER = "x-countersign-receipt"
RECEIPT_TYPE = "countersign-receipt+jwt"
ISSUER = "countersign"
"""The gateway's issuer (``iss``) in receipts and identity tokens."""
ALGORITHMS = ("EdDSA",)
"""The only algorithm a receipt is accepted with: never ``none``, never an HMAC."""
RECEIPT_TTL_SECONDS = 120
"""How long a receipt is good for: it is signed just before its one send."""
REQUIRED = ("iss", "aud", "exp", "iat", "card_id", "tool", "args_hash", "idempotency_key", "request_hash")


class ReceiptMismatchError(jwt.InvalidTokenError):
    """A receipt that verifies but is for another request (another body, path or idempotency key)."""


def request_hash(method: str, path: str, query: Mapping[str, str] | None, body: Any) -> str:
    """SHA-256 of ``METHOD path``, the query and the canonical JSON body (None when there is none).

    `path` is taken without its query and percent-decoded, as an ASGI server gives it (``scope["path"]``).
    """
    target = f"{method.upper()} {unquote(urlsplit(path).path)}"
    text = f"{target}\n{canonical_json(dict(query or {}))}\n{canonical_json(body)}"
    return hashlib.sha256(text.encode()).hexdigest()


def receipt_claims(card: Card, *, adapter: str, request: str, now: int) -> dict[str, Any]:
    """The claims of the receipt for one send of `card` to `adapter`; `request` is its `request_hash`."""
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": adapter,
        "iat": now,
        "exp": now + RECEIPT_TTL_SECONDS,
        "sub": card.requester_subject,
        "org": card.requester_org,
        "card_id": card.card_id,
        "tool": card.tool,
        "args_hash": card.args_hash,
        "idempotency_key": card.idempotency_key,
        "approvers": list(card.approvers),
        "approved_at": card.approved_ms,
        "request_hash": request,
    }
    if card.passkeys:
        claims["passkeys"] = [json.loads(assertion) for assertion in card.passkeys]
    if card.acting_client:
        claims["act"] = {"sub": card.acting_client}
    return claims


def verify_receipt(
    token: str,
    *,
    jwks: Mapping[str, Any],
    audience: str,
    method: str,
    path: str,
    query: Mapping[str, str] | None,
    body: Any,
    idempotency_key: str | None,
    issuer: str = ISSUER,
    leeway_seconds: float = 30.0,
) -> dict[str, Any]:
    """Check a receipt against the gateway's JWKS and the request it came with; its claims.

    Raises:
        jwt.InvalidTokenError: not a receipt of this gateway for this backend (signature, ``kid``
            not in `jwks`, algorithm, ``typ``, issuer, audience, expiry, a claim missing), or
            `ReceiptMismatchError` (a subclass) for another request or idempotency key.
    """
    header = jwt.get_unverified_header(token)
    if header.get("typ") != RECEIPT_TYPE or header.get("alg") not in ALGORITHMS:
        raise jwt.InvalidTokenError("not a receipt")
    keys = {jwk.get("kid"): jwk for jwk in jwks.get("keys", []) if isinstance(jwk, Mapping)}
    jwk = keys.get(header.get("kid"))
    if jwk is None:
        raise jwt.InvalidTokenError("receipt signed with a key not in the key set")
    try:
        key = jwt.PyJWK(dict(jwk), algorithm=ALGORITHMS[0]).key
    except jwt.PyJWTError as error:
        raise jwt.InvalidTokenError("the key set's key is not an Ed25519 key") from error
    claims: dict[str, Any] = jwt.decode(
        token,
        key,
        algorithms=list(ALGORITHMS),
        audience=audience,
        issuer=issuer,
        leeway=leeway_seconds,
        options={"require": list(REQUIRED)},
    )
    if claims["request_hash"] != request_hash(method, path, query, body):
        raise ReceiptMismatchError("receipt is for another request")
    if claims["idempotency_key"] != idempotency_key:
        raise ReceiptMismatchError("receipt is for another idempotency key")
    return claims
