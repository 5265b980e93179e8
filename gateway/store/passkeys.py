"""Approvers' registered passkeys, and the one-use challenges of their registration, in Redis.

Who calls it: `gateway.passkeys.service.PasskeyService` (registering, verifying an approval's
assertion, listing and removing) and the operator's CLI (listing and resetting an approver's
passkeys). It knows nothing of WebAuthn: it keeps what the service verified, as strings.

Redis layout, one hash tag per approver so every operation touches one slot:
``countersign:passkeys:{<org>|<subject>}`` -> hash of credential id (base64url) -> the credential's
JSON (`StoredPasskey`); ``countersign:passkey-challenge:{<org>|<subject>}`` -> the pending
registration challenge (base64url), for `REGISTRATION_TTL_SECONDS`, taken once.

The signature counter moves only forward, checked and written in one script (`advance`): two
approvals racing with one assertion, or an assertion replayed after a later one, find the counter
already past theirs and are refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import redis.asyncio as aioredis

from gateway.store.client import store_boundary

__all__ = ["REGISTRATION_TTL_SECONDS", "PasskeyStore", "StoredPasskey"]

REGISTRATION_TTL_SECONDS = 300
"""How long a registration challenge waits for the authenticator's answer."""

# KEYS: the approver's passkeys. ARGV: credential id, the counter the assertion carries.
# The stored counter must be below the new one; an authenticator that keeps no counter (0 both
# times) passes, and the approval's own binding to the card (state, version) is then what stops a replay.
_ADVANCE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 'ERR_NOT_FOUND' end
local stored = cjson.decode(raw)
local new = tonumber(ARGV[2])
local old = tonumber(stored.sign_count)
if not (new > old or (new == 0 and old == 0)) then return 'ERR_COUNTER' end
stored.sign_count = new
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(stored))
return 'OK'
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredPasskey:
    """One registered passkey of one approver."""

    credential_id: str
    """base64url, as the authenticator names it."""
    public_key: str
    """The credential's COSE public key, base64url."""
    sign_count: int
    """The highest signature counter seen."""
    name: str
    """What the approver called it (``laptop``, ``YubiKey``)."""
    created_ms: int
    aaguid: str = ""


def _tag(org: str, subject: str) -> str:
    return f"{{{org}|{subject}}}"


def _passkeys_key(org: str, subject: str) -> str:
    return f"countersign:passkeys:{_tag(org, subject)}"


def _challenge_key(org: str, subject: str) -> str:
    return f"countersign:passkey-challenge:{_tag(org, subject)}"


@store_boundary
class PasskeyStore:
    """The passkeys of every approver, by org and normalised subject."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._advance = client.register_script(_ADVANCE)

    async def list(self, org: str, subject: str) -> Sequence[StoredPasskey]:
        """The approver's passkeys, oldest first."""
        raw = await self._redis.hgetall(_passkeys_key(org, subject))
        found = [StoredPasskey(**json.loads(value)) for value in raw.values()]
        return sorted(found, key=lambda passkey: (passkey.created_ms, passkey.credential_id))

    async def get(self, org: str, subject: str, credential_id: str) -> StoredPasskey | None:
        raw = await self._redis.hget(_passkeys_key(org, subject), credential_id)
        return StoredPasskey(**json.loads(raw)) if raw else None

    async def add(self, org: str, subject: str, passkey: StoredPasskey) -> bool:
        """Keep `passkey`; False when the approver already has one with its credential id."""
        stored = json.dumps(asdict(passkey), separators=(",", ":"))
        return bool(await self._redis.hsetnx(_passkeys_key(org, subject), passkey.credential_id, stored))

    async def remove(self, org: str, subject: str, credential_id: str) -> bool:
        """Forget one passkey; False when the approver had none with that id."""
        return bool(await self._redis.hdel(_passkeys_key(org, subject), credential_id))

    async def reset(self, org: str, subject: str) -> int:
        """Forget every passkey of the approver; how many there were."""
        key = _passkeys_key(org, subject)
        count = int(await self._redis.hlen(key))
        await self._redis.delete(key, _challenge_key(org, subject))
        return count

    async def advance(self, org: str, subject: str, credential_id: str, sign_count: int) -> str:
        """Move the passkey's counter to `sign_count`: ``OK``, ``ERR_COUNTER`` (not past the stored one:
        a replay or a cloned authenticator) or ``ERR_NOT_FOUND`` (removed meanwhile)."""
        answer = await self._advance(keys=[_passkeys_key(org, subject)], args=[credential_id, sign_count])
        return answer.decode() if isinstance(answer, bytes) else str(answer)

    async def offer_challenge(self, org: str, subject: str, challenge: str) -> None:
        """Remember the registration challenge just sent (a newer one replaces it)."""
        await self._redis.set(_challenge_key(org, subject), challenge, ex=REGISTRATION_TTL_SECONDS)

    async def take_challenge(self, org: str, subject: str) -> str | None:
        """The pending registration challenge, once: a second answer to it finds none."""
        raw = await self._redis.getdel(_challenge_key(org, subject))
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)
