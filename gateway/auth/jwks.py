"""An issuer's signing keys, fetched with aiohttp and kept in a small bounded cache.

Who calls it: `gateway.auth.tokens`, once per token whose issuer it trusts. It asks only for the
key of a ``kid``; it never learns a token, and it fetches from exactly one place per issuer: the
configured ``jwks_url``, or the ``jwks_uri`` of the issuer's own metadata (RFC 8414:
``/.well-known/oauth-authorization-server``, then ``/.well-known/openid-configuration``), whose
``issuer`` must be the configured one. A URL a token names (``jku``, ``x5u``) is never fetched.

Why aiohttp and not PyJWT's `PyJWKClient`: that client is synchronous (urllib), so it would block
the event loop or need a thread per fetch; the gateway already speaks aiohttp to its backends.

The cache: keys are fetched on first use, again after `max_age_seconds` (a withdrawn key stops
verifying), and again when a token names a ``kid`` the cache lacks (the issuer rotated) — but at
most once per `min_refresh_seconds`, failed fetches included, and one fetch at a time, so a flood
of made-up ``kid`` values costs the issuer one request per interval. Only asymmetric signing keys
(``kty`` RSA, EC, OKP) are kept, at most `MAX_KEYS`; a symmetric key in a key set is ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

__all__ = ["MAX_JWKS_BYTES", "MAX_KEYS", "JwksSource"]

logger = logging.getLogger(__name__)

MAX_KEYS = 32
"""Keys kept per issuer. A key set rotates with two or three; more is a misconfiguration or an attack."""
MAX_JWKS_BYTES = 256 * 1024
"""The largest metadata or key-set document read."""
FETCH_TIMEOUT_SECONDS = 5.0

_ASYMMETRIC_KTY = frozenset({"RSA", "EC", "OKP"})


class JwksSource:
    """The signing keys of one issuer, as JWK dicts by ``kid``."""

    def __init__(
        self,
        *,
        issuer: str,
        jwks_url: str | None,
        min_refresh_seconds: float,
        max_age_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._issuer = issuer
        self._jwks_url = jwks_url
        self._min_refresh = min_refresh_seconds
        self._max_age = max_age_seconds
        self._clock = clock
        self._keys: dict[str, Mapping[str, Any]] | None = None
        self._fetched_at = 0.0
        self._attempted_at: float | None = None
        self._lock = asyncio.Lock()

    async def key(self, kid: str | None) -> Mapping[str, Any] | None:
        """The JWK `kid` names (with no `kid`: the only key, if there is exactly one), or None.

        Never raises for the issuer's faults: an unreachable issuer or a bad document is logged and
        leaves the keys fetched before, so tokens signed with them still verify.
        """
        now = self._clock()
        if self._keys is None or now - self._fetched_at >= self._max_age:
            await self._refresh(now)
        found = self._find(kid)
        if found is None:
            await self._refresh(now)
            found = self._find(kid)
        return found

    def _find(self, kid: str | None) -> Mapping[str, Any] | None:
        if not self._keys:
            return None
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self, now: float) -> None:
        async with self._lock:
            # Whoever waited on the lock finds the attempt just made and does not repeat it.
            if self._attempted_at is not None and self._clock() - self._attempted_at < self._min_refresh:
                return
            self._attempted_at = self._clock()
            try:
                url = self._jwks_url or await self._discover()
                self._keys = _signing_keys(await self._get(url))
                self._fetched_at = now
            except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                logger.warning("cannot fetch the keys of issuer %s: %s", self._issuer, error)

    async def _discover(self) -> str:
        """``jwks_uri`` of the issuer's metadata (RFC 8414 section 3, then OpenID Connect Discovery)."""
        parts = urlsplit(self._issuer)
        path = parts.path.rstrip("/")
        base = f"{parts.scheme}://{parts.netloc}"
        candidates = (
            f"{base}/.well-known/oauth-authorization-server{path}",
            f"{base}{path}/.well-known/openid-configuration",
        )
        last: Exception = ValueError("no metadata")
        for url in candidates:
            try:
                metadata = await self._get(url)
            except (aiohttp.ClientError, ValueError) as error:
                last = error
                continue
            if metadata.get("issuer") != self._issuer:  # RFC 8414 section 3.3: must be identical
                raise ValueError(f"metadata at {url} names issuer {metadata.get('issuer')!r}")
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://127.0.0.1")):
                raise ValueError(f"metadata at {url} has no usable jwks_uri")
            return jwks_uri
        raise last

    async def _get(self, url: str) -> dict[str, Any]:
        # A session per fetch: fetches are rare (a refresh), and nothing is left open to close.
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, allow_redirects=False) as response,
        ):
            if response.status != 200:
                raise ValueError(f"{url} answered {response.status}")
            body = await response.content.read(MAX_JWKS_BYTES + 1)
        if len(body) > MAX_JWKS_BYTES:
            raise ValueError(f"{url} sent more than {MAX_JWKS_BYTES} bytes")
        document = json.loads(body)
        if not isinstance(document, dict):
            raise ValueError(f"{url} did not send a JSON object")
        return document


def _signing_keys(document: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise ValueError("a key set without a keys array")
    found: dict[str, Mapping[str, Any]] = {}
    for index, jwk in enumerate(keys):
        if not isinstance(jwk, dict) or jwk.get("kty") not in _ASYMMETRIC_KTY or jwk.get("use", "sig") != "sig":
            continue
        found.setdefault(str(jwk.get("kid", f"#{index}")), jwk)
        if len(found) >= MAX_KEYS:
            break
    return found
