"""Signing with the gateway's key set, as every process on one Redis sees it.

Who calls it: the write path (a receipt per send of an approved card), `gateway.signing.identity` (the
identity token of every backend call), and the JWKS route (the public keys). It asks the key store
(`gateway.store.signing_keys`) for the set, at most once per `cache_seconds` (so a rotation reaches
every process within that), and signs synchronously with the copy it holds; it never decides what
a claim says.

A rotated-out key stays published for `OVERLAP_SECONDS`: the longest a token signed by a process
that had not yet seen the rotation is good for, plus clock skew, plus the cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jwt

from gateway.cards.card import Card
from gateway.errors import ConfigError, StoreUnavailableError
from gateway.signing.receipts import (
    ALGORITHMS,
    RECEIPT_HEADER,
    RECEIPT_TTL_SECONDS,
    RECEIPT_TYPE,
    receipt_claims,
    request_hash,
)
from gateway.store.signing_keys import KeySet
from gateway.tools.context import RequestSigner

__all__ = ["CACHE_SECONDS", "IDENTITY_TTL_SECONDS", "IDENTITY_TYPE", "OVERLAP_SECONDS", "KeySource", "Signer"]

logger = logging.getLogger(__name__)

CACHE_SECONDS = 5.0
IDENTITY_TTL_SECONDS = 60
SKEW_SECONDS = 60
OVERLAP_SECONDS = max(RECEIPT_TTL_SECONDS, IDENTITY_TTL_SECONDS) + SKEW_SECONDS + int(CACHE_SECONDS) + 1
"""How long a rotated-out key stays in the JWKS."""
IDENTITY_TYPE = "countersign-identity+jwt"


class KeySource(Protocol):
    async def load(self) -> KeySet: ...


class Signer:
    """The key set of one Redis, cached; signs receipts and identity tokens, publishes the JWKS."""

    def __init__(
        self, source: KeySource, *, cache_seconds: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._source = source
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._keys: KeySet | None = None
        self._loaded_at = 0.0

    async def refresh(self, *, force: bool = False) -> KeySet:
        """The key set, read again when the copy held is older than `cache_seconds` (or `force`).

        Raises:
            StoreUnavailableError: Redis did not answer (the copy held, if any, stays).
            ConfigError: the active key does not decrypt with this gateway's secret.
        """
        now = self._clock()
        if force or self._keys is None or now - self._loaded_at >= self._cache_seconds:
            self._keys = await self._source.load()
            self._loaded_at = now
        return self._keys

    async def poll(self) -> None:
        """Read the key set again (at startup, and the background refresh of every gateway process); a
        store that does not answer, or a key that does not decrypt, is logged, and the copy held is kept."""
        try:
            await self.refresh(force=True)
        except (ConfigError, StoreUnavailableError) as error:
            logger.error("cannot read the signing keys: %s", error)

    @property
    def can_sign(self) -> bool:
        """Whether an active key is held (production starts with none until an operator rotates one in)."""
        return self._keys is not None and self._keys.private_key is not None

    @property
    def active_kid(self) -> str | None:
        """The id of the key `sign` signs with now; None when none is held."""
        return self._keys.active_kid if self._keys is not None and self._keys.private_key is not None else None

    async def jwks(self) -> dict[str, Any]:
        """``{"keys": [...]}``: the public JWK of every key published now (active first)."""
        keys = await self.refresh()
        ordered = sorted(keys.published, key=lambda key: key.kid != keys.active_kid)
        return {"keys": [dict(key.jwk) for key in ordered]}

    def sign(self, claims: Mapping[str, Any], *, typ: str) -> str | None:
        """`claims` signed with the active key held, or None when there is none."""
        keys = self._keys
        if keys is None or keys.private_key is None or keys.active_kid is None:
            return None
        return jwt.encode(
            dict(claims), keys.private_key, algorithm=ALGORITHMS[0], headers={"kid": keys.active_kid, "typ": typ}
        )

    async def receipts_for(self, card: Card, adapter: str) -> RequestSigner | None:
        """What signs the receipt of each request of one send of `card`; None when there is no key.

        The key set is refreshed first (within the cache), so a card approved before a rotation is
        signed with whichever key is active at its send.
        """
        try:
            await self.refresh()
            if not self.can_sign:  # none held: read again now, so a first key an operator just made is used
                await self.refresh(force=True)
        except ConfigError as error:  # a key that does not decrypt: said loudly, and nothing is sent
            logger.error("cannot sign approval receipts: %s", error)
            return None
        if not self.can_sign:
            return None

        def sign(method: str, path: str, query: Mapping[str, str] | None, body: Any) -> Mapping[str, str]:
            claims = receipt_claims(
                card, adapter=adapter, request=request_hash(method, path, query, body), now=int(time.time())
            )
            token = self.sign(claims, typ=RECEIPT_TYPE)
            return {RECEIPT_HEADER: token} if token is not None else {}

        return sign
