"""Who is asking, as a backend learns it: a signed identity header, and plain ones beside it.

The gateway never forwards an agent's bearer token. A backend learns the caller from
``X-Countersign-Identity``: a JWT with ``sub``, ``org``, ``aud`` (the adapter), ``iss``
``countersign`` and a short ``exp``, so the backend can verify the claim rather than trust the
network (`verify_identity` is what it does with it). ``X-Countersign-Subject`` /
``X-Countersign-Org`` say the same in plain text, for logs; a backend must not trust them.

The token is signed with the gateway's own key set (``EdDSA``, header ``typ``
``countersign-identity+jwt``, `gateway.signing.signer`), which backends verify with the public keys at
``/.well-known/jwks.json``: nothing is shared with a backend. For a transition, an adapter that
still has a shared key (``signing_key_env``; a registered one's ``signing_secret_env``) gets HS256
with it, as before; remove the key once its backend verifies with the JWKS. A call to a backend
without a signed header is refused before it is sent (`gateway.tools.backend_http`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import jwt
from jwt.types import Options

from gateway.principal import Principal
from gateway.signing.receipts import ISSUER
from gateway.signing.signer import IDENTITY_TTL_SECONDS, IDENTITY_TYPE, Signer

__all__ = ["IDENTITY_HEADER", "ISSUER", "IdentityHeaders", "verify_identity"]

IDENTITY_HEADER = "x-countersign-identity"


class IdentityHeaders:
    """Builds the identity headers for one call to one adapter's backend."""

    def __init__(
        self,
        signing_keys: Mapping[str, str] | None = None,
        *,
        signer: Signer | None = None,
        ttl_seconds: int = IDENTITY_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = dict(signing_keys or {})
        self._signer = signer
        self._ttl = ttl_seconds
        self._clock = clock
        # The claims change only with the second (`iat`, `exp`), so within one second a caller's header
        # for one adapter is the same bytes: signed once, not on every call (HS256 through PyJWT was a
        # measurable part of a read's CPU).
        self._signed: dict[tuple[str, str, str], str] = {}
        self._second = -1
        self._kid: str | None = None

    def with_key(self, adapter: str, key: str | None) -> None:
        """Sign for `adapter` with the shared `key` from now on, or (None) with the gateway's own keys
        (remote adapters are added and changed while running)."""
        if key:
            self._keys[adapter] = key
        else:
            self._keys.pop(adapter, None)
        self._signed.clear()

    def __call__(self, principal: Principal, adapter: str) -> dict[str, str]:
        """Plain subject/org headers, plus the signed header: HS256 with `adapter`'s shared key when it
        has one (the transition), else EdDSA with the gateway's active key when one is held."""
        headers = {"x-countersign-subject": principal.subject, "x-countersign-org": principal.org}
        now = int(self._clock())
        claims = {
            "iss": ISSUER,
            "sub": principal.subject,
            "org": principal.org,
            "aud": adapter,
            "iat": now,
            "exp": now + self._ttl,
        }
        key = self._keys.get(adapter)
        if key or self._signer is not None:
            # A rotation starts a new cache too: an identity signed with the old key must not ride beside a
            # receipt signed with the new one (a backend learns a new key from the first token naming it).
            kid = self._signer.active_kid if self._signer is not None else None
            if now != self._second or kid != self._kid:
                self._signed.clear()
                self._second, self._kid = now, kid
            signed = self._signed.get((principal.subject, principal.org, adapter))
            if signed is None:
                signed = jwt.encode(claims, key, algorithm="HS256") if key else None
                if signed is None and self._signer is not None:
                    signed = self._signer.sign(claims, typ=IDENTITY_TYPE)
                if signed is not None:
                    self._signed[(principal.subject, principal.org, adapter)] = signed
            if signed is not None:
                headers[IDENTITY_HEADER] = signed
        return headers


def verify_identity(
    token: str, *, adapter: str, key: str | None = None, jwks: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """What a backend does with the signed header: verify it and return ``{"sub", "org"}``.

    With `jwks` (the gateway's ``/.well-known/jwks.json``) only an ``EdDSA`` identity token of a key
    in it verifies; with `key` only an HS256 token signed with that shared secret (the transition).

    Raises:
        jwt.InvalidTokenError: bad signature, unknown ``kid``, wrong audience or issuer, expired, a
            claim missing, or a receipt offered as an identity.
    """
    required: Options = {"require": ["exp", "sub", "org", "aud", "iss"]}
    if jwks is not None:
        header = jwt.get_unverified_header(token)
        if header.get("typ") != IDENTITY_TYPE:
            raise jwt.InvalidTokenError("not an identity token")
        keys = {k.get("kid"): k for k in jwks.get("keys", []) if isinstance(k, Mapping)}
        jwk = keys.get(header.get("kid"))
        if jwk is None:
            raise jwt.InvalidTokenError("identity signed with a key not in the key set")
        try:
            verifier = jwt.PyJWK(dict(jwk), algorithm="EdDSA").key
        except jwt.PyJWTError as error:
            raise jwt.InvalidTokenError("the key set's key is not an Ed25519 key") from error
        claims = jwt.decode(token, verifier, algorithms=["EdDSA"], audience=adapter, issuer=ISSUER, options=required)
    elif key:
        claims = jwt.decode(token, key, algorithms=["HS256"], audience=adapter, issuer=ISSUER, options=required)
    else:
        raise jwt.InvalidTokenError("neither a key set nor a shared key to verify with")
    return {"sub": str(claims["sub"]), "org": str(claims["org"])}
