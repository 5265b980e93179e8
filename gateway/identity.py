"""Who is asking, as a backend learns it: a signed identity header, and plain ones beside it.

The gateway never forwards an agent's bearer token. A backend learns the caller from
``X-Countersign-Identity``: a JWT (HS256) with ``sub``, ``org``, ``aud`` (the adapter),
``iss`` ``countersign`` and a short ``exp``, so the backend can verify the claim rather than
trust the network (`verify_identity` is what it does with it). ``X-Countersign-Subject`` /
``X-Countersign-Org`` say the same in plain text, for logs; a backend must not trust them.

Every configured adapter has a signing key (the composition root refuses to start without one),
and the gateway generates one for each demo backend it starts; a registered adapter's manifest must
name a ``signing_secret_env``, and the adapter is not served unless that variable is set. A call to a
backend without the signed header is refused before it is sent (`gateway.adapter_http`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import jwt

from gateway.principal import Principal

__all__ = ["IDENTITY_HEADER", "ISSUER", "IdentityHeaders", "verify_identity"]

IDENTITY_HEADER = "x-countersign-identity"
ISSUER = "countersign"


class IdentityHeaders:
    """Builds the identity headers for one call to one adapter's backend."""

    def __init__(
        self,
        signing_keys: Mapping[str, str] | None = None,
        *,
        ttl_seconds: int = 60,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = dict(signing_keys or {})
        self._ttl = ttl_seconds
        self._clock = clock
        # The claims change only with the second (`iat`, `exp`), so within one second a caller's header
        # for one adapter is the same bytes: signed once, not on every call (HS256 through PyJWT was a
        # measurable part of a read's CPU).
        self._signed: dict[tuple[str, str, str], str] = {}
        self._second = -1

    def with_key(self, adapter: str, key: str) -> None:
        """Sign for `adapter` with `key` from now on (remote adapters are added while running)."""
        self._keys[adapter] = key
        self._signed.clear()

    def __call__(self, principal: Principal, adapter: str) -> dict[str, str]:
        """Plain subject/org headers, plus the signed header when `adapter` has a key (built-in tools
        that call no backend have none)."""
        headers = {"x-countersign-subject": principal.subject, "x-countersign-org": principal.org}
        key = self._keys.get(adapter)
        if key:
            now = int(self._clock())
            if now != self._second:
                self._signed.clear()
                self._second = now
            signed = self._signed.get((principal.subject, principal.org, adapter))
            if signed is None:
                claims = {"iss": ISSUER, "sub": principal.subject, "org": principal.org, "aud": adapter,
                          "iat": now, "exp": now + self._ttl}  # fmt: skip
                signed = self._signed[(principal.subject, principal.org, adapter)] = jwt.encode(
                    claims, key, algorithm="HS256"
                )
            headers[IDENTITY_HEADER] = signed
        return headers


def verify_identity(token: str, *, key: str, adapter: str) -> dict[str, str]:
    """What a backend does with the signed header: verify it and return ``{"sub", "org"}``.

    Raises:
        jwt.InvalidTokenError: bad signature, wrong audience or issuer, expired, or a claim missing.
    """
    claims = jwt.decode(token, key, algorithms=["HS256"], audience=adapter, issuer=ISSUER,
                        options={"require": ["exp", "sub", "org", "aud", "iss"]})  # fmt: skip
    return {"sub": str(claims["sub"]), "org": str(claims["org"])}
