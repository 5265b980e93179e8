"""The gateway's own signing keys (Ed25519), kept in Redis with the private half encrypted.

Who calls it: `gateway.signing.signer` (every gateway and worker process, through a short cache), the CLI
(``countersign signing-keys rotate|list``) and the demo wiring (a first key when there is none).
It knows nothing of what is signed with the keys.

Why Ed25519 (JWS ``EdDSA``): a signature needs no random nonce (an ECDSA nonce reused or biased
leaks the key), keys and signatures are small (32 and 64 bytes), and PyJWT with `cryptography`
signs and verifies it; every maintained JOSE library a backend author would reach for does too.

Redis layout: one hash, ``countersign:{signing}:keys`` (one slot, so it works on a Cluster):
``active`` -> the kid new signatures use; ``k:<kid>`` -> the key's JSON record (public JWK, the
encrypted private key); ``c:<kid>`` -> when it was made; ``r:<kid>`` -> when a rotated-out key stops being
published (ms, Redis clock). A rotation is one script: it checks that the active key is still the
one the caller saw, marks it to retire after the overlap, drops keys whose overlap ended, and makes
the new key active, so two operators rotating at once cannot both win.

At rest the private key is AES-256-GCM under a key derived (HKDF-SHA256) from the secret given to
the store (the audit secret, or ``COUNTERSIGN_KEY_ENCRYPTION_SECRET``), with the kid as associated
data, so a record copied under another kid does not decrypt. Nothing here prints a key.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gateway.errors import ConfigError
from gateway.store.client import store_boundary

__all__ = ["ALGORITHM", "KeySet", "PublishedKey", "SigningKeyStore", "public_jwk"]

ALGORITHM = "EdDSA"
_KEY = "countersign:{signing}:keys"

_ROTATE = """
local active = redis.call('HGET', KEYS[1], 'active') or ''
if active ~= ARGV[1] then return {0, active} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local name = fields[i]
  if string.sub(name, 1, 2) == 'r:' and tonumber(fields[i + 1]) <= now then
    local kid = string.sub(name, 3)
    redis.call('HDEL', KEYS[1], name, 'k:' .. kid, 'c:' .. kid)
  end
end
if active ~= '' then
  redis.call('HSET', KEYS[1], 'r:' .. active, now + tonumber(ARGV[4]))
end
redis.call('HSET', KEYS[1], 'k:' .. ARGV[2], ARGV[3], 'c:' .. ARGV[2], now, 'active', ARGV[2])
return {1, tostring(now)}
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedKey:
    """One key as the JWKS shows it: public half only."""

    kid: str
    jwk: Mapping[str, str]
    created_ms: int
    retire_at_ms: int | None
    """None for the active key; else when it stops being published."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KeySet:
    """The keys as stored now: the active one (with its private half) and every published one."""

    active_kid: str | None
    private_key: Ed25519PrivateKey | None
    published: tuple[PublishedKey, ...]
    now_ms: int
    """The Redis clock when read: a key whose ``retire_at_ms`` has passed is not in `published`."""

    def __repr__(self) -> str:
        return f"KeySet(active_kid={self.active_kid!r}, published={len(self.published)})"


def public_jwk(key: Ed25519PrivateKey, kid: str) -> dict[str, str]:
    """The public JWK (RFC 8037) of `key`: ``kty`` OKP, ``crv`` Ed25519, ``x``, with kid, alg and use."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": ALGORITHM, "use": "sig"}


@store_boundary
class SigningKeyStore:
    """The signing key set on one Redis."""

    def __init__(self, client: aioredis.Redis, *, secret: bytes) -> None:
        if not secret:
            raise ConfigError("signing keys need a key-encryption secret")
        self._redis = client
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"countersign signing keys v1")
        self._aead = AESGCM(hkdf.derive(secret))
        self._rotate = client.register_script(_ROTATE)

    async def load(self) -> KeySet:
        """The stored set, the active private key decrypted.

        Raises:
            ConfigError: the active key does not decrypt with this store's secret (another secret, or
                a record tampered with): nothing can be signed, and that is said, never papered over.
        """
        raw = await self._redis.hgetall(_KEY)
        seconds, micros = await self._redis.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        fields = {_text(name): _text(value) for name, value in raw.items()}
        active = fields.get("active") or None
        published: list[PublishedKey] = []
        private: Ed25519PrivateKey | None = None
        for name, value in sorted(fields.items()):
            if not name.startswith("k:"):
                continue
            kid = name[2:]
            retire = fields.get(f"r:{kid}")
            retire_at = int(retire) if retire is not None else None
            if kid != active and (retire_at is None or retire_at <= now_ms):
                continue
            record = json.loads(value)
            made = int(fields.get(f"c:{kid}", 0))
            published.append(PublishedKey(kid=kid, jwk=record["public"], created_ms=made, retire_at_ms=retire_at))
            if kid == active:
                private = self._decrypt(kid, record["private"])
        return KeySet(active_kid=active, private_key=private, published=tuple(published), now_ms=now_ms)

    async def rotate(self, *, overlap_ms: int, expected_active: str | None) -> tuple[bool, str]:
        """Make a new key active; the one active now stays published for `overlap_ms`, then goes.

        `expected_active` is the kid the caller saw active (None: none). Returns ``(True, new kid)``,
        or ``(False, the kid active now)`` when someone rotated in between (nothing changed).
        """
        kid = f"cs-{secrets.token_hex(8)}"
        key = Ed25519PrivateKey.generate()
        record = {"public": public_jwk(key, kid), "private": self._encrypt(kid, key)}
        args: list[str | int] = [expected_active or "", kid, json.dumps(record), overlap_ms]
        done, detail = await self._rotate(keys=[_KEY], args=args)
        return (True, kid) if int(done) == 1 else (False, _text(detail))

    def _encrypt(self, kid: str, key: Ed25519PrivateKey) -> str:
        raw = key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        nonce = os.urandom(12)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, raw, kid.encode())).decode()

    def _decrypt(self, kid: str, sealed: str) -> Ed25519PrivateKey:
        blob = base64.b64decode(sealed)
        try:
            raw = self._aead.decrypt(blob[:12], blob[12:], kid.encode())
        except InvalidTag as error:
            raise ConfigError(
                f"signing key {kid} does not decrypt: the key-encryption secret differs from the one it was "
                "stored with (every process on one Redis needs the same one)"
            ) from error
        return Ed25519PrivateKey.from_private_bytes(raw)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
