"""Console sessions of approvers signed in through the identity provider, and the sign-ins under way, in Redis.

Who calls it: `gateway.signin` (opening a session at the end of a sign-in, resolving the cookie of
each console request, ending it at sign-out) and the operator's CLI (listing and revoking the
sessions of an approver). The cookie holds a random token (256 bits); only its SHA-256 is stored,
as for API keys, so a copy of Redis opens no session.

A session ends at whichever comes first: `idle_ms` without a request (the key's TTL, renewed by
each request that resolves it), its absolute end (`absolute_ms` after sign-in, checked by the Redis
clock in the same script that renews it), sign-out, or revocation. Nothing else lengthens one.

Redis layout: ``countersign:session:{<hash>}`` -> hash of the session (subject, org, roles, csrf,
ends_ms, id_token); ``countersign:sessions:{<org>|<subject>}`` -> set of that person's session
hashes (for revocation; a hash whose session ended is dropped when met);
``countersign:signin:{<state>}`` -> a sign-in under way (PKCE verifier and nonce), for
`SIGNIN_TTL_SECONDS`, taken once.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.principal import SESSION_KEY_PREFIX, KeyKind, Principal
from gateway.store.client import store_boundary

__all__ = ["SIGNIN_TTL_SECONDS", "ConsoleSession", "SessionStore", "SignIn"]

SIGNIN_TTL_SECONDS = 600
"""How long a sign-in may take at the provider (from the redirect there to the callback)."""

# KEYS: the session. ARGV: idle ms. Over (or past its absolute end): gone, and nothing answered.
_RESOLVE = """
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return nil end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ends
for i = 1, #fields, 2 do if fields[i] == 'ends_ms' then ends = tonumber(fields[i + 1]) end end
if not ends or now >= ends then
  redis.call('DEL', KEYS[1])
  return nil
end
redis.call('PEXPIRE', KEYS[1], math.min(tonumber(ARGV[1]), ends - now))
return fields
"""

# KEYS: the session. ARGV: its fields as JSON, idle ms, absolute ms. Its end is set by the Redis clock.
_OPEN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = cjson.decode(ARGV[1])
fields.created_ms = tostring(now)
fields.ends_ms = tostring(now + tonumber(ARGV[3]))
for k, v in pairs(fields) do redis.call('HSET', KEYS[1], k, v) end
redis.call('PEXPIRE', KEYS[1], math.min(tonumber(ARGV[2]), tonumber(ARGV[3])))
return fields.ends_ms
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsoleSession:
    """One approver's console session (never its token)."""

    session_hash: str
    subject: str
    org: str
    roles: frozenset[str]
    csrf: str
    """The token every state-changing request of this session must carry (``X-CSRF-Token``)."""
    created_ms: int
    ends_ms: int
    """Its absolute end, by the Redis clock."""
    id_token: str = ""
    """The provider's ID token, kept only as the ``id_token_hint`` of a sign-out at the provider."""

    def principal(self) -> Principal:
        """The admin this session stands for; its key id names the session, never its token."""
        return Principal(
            subject=self.subject,
            org=self.org,
            roles=self.roles,
            kind=KeyKind.ADMIN,
            key_id=f"{SESSION_KEY_PREFIX}{self.session_hash[:16]}",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class SignIn:
    """A sign-in under way: what the callback needs to finish it."""

    verifier: str
    """The PKCE code verifier (RFC 7636)."""
    nonce: str
    """The nonce the ID token must carry."""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _session_key(session_hash: str) -> str:
    return f"countersign:session:{{{session_hash}}}"


def _person_key(org: str, subject: str) -> str:
    return f"countersign:sessions:{{{org}|{subject}}}"


def _signin_key(state: str) -> str:
    return f"countersign:signin:{{{_hash(state)}}}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@store_boundary
class SessionStore:
    """Console sessions and sign-ins under way."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._resolve = client.register_script(_RESOLVE)
        self._open = client.register_script(_OPEN)

    async def open(
        self, *, subject: str, org: str, roles: Iterable[str], idle_ms: int, absolute_ms: int, id_token: str = ""
    ) -> tuple[str, ConsoleSession]:
        """A new session: its token (for the cookie, returned once) and the session."""
        token = secrets.token_urlsafe(32)
        session_hash = _hash(token)
        fields = {
            "subject": subject,
            "org": org,
            "roles": ",".join(sorted(roles)),
            "csrf": secrets.token_urlsafe(32),
            "id_token": id_token,
        }
        ends = await self._open(keys=[_session_key(session_hash)], args=[json.dumps(fields), idle_ms, absolute_ms])
        person = _person_key(org, subject)
        await self._redis.sadd(person, session_hash)
        await self._redis.pexpire(person, absolute_ms)  # the newest session ends last
        session = await self._resolved(session_hash, idle_ms)
        if session is None:  # the idle window is not shorter than a round trip; only a flush can do this
            raise RuntimeError(f"the session just opened (ending at {_text(ends)}) is gone")
        return token, session

    async def resolve(self, token: str, *, idle_ms: int) -> ConsoleSession | None:
        """The live session of `token`, its idle window renewed; None when it ended (or never was)."""
        if not token or len(token) > 128:
            return None
        return await self._resolved(_hash(token), idle_ms)

    async def end(self, token: str) -> ConsoleSession | None:
        """End the session of `token` (sign-out); the session it was, or None."""
        session_hash = _hash(token)
        raw = await self._redis.hgetall(_session_key(session_hash))
        await self._redis.delete(_session_key(session_hash))
        if not raw:
            return None
        session = _parse(session_hash, raw)
        await self._redis.srem(_person_key(session.org, session.subject), session_hash)
        return session

    async def revoke(self, org: str, subject: str) -> int:
        """End every session of the approver (`org`, `subject`); how many were live."""
        person = _person_key(org, subject)
        hashes = [_text(h) for h in await self._redis.smembers(person)]
        ended = 0
        for session_hash in hashes:
            ended += int(await self._redis.delete(_session_key(session_hash)))
        await self._redis.delete(person)
        return ended

    async def list(self, org: str, subject: str) -> Sequence[ConsoleSession]:
        """The approver's live sessions (read only: listing renews none)."""
        found = []
        for session_hash in sorted(_text(h) for h in await self._redis.smembers(_person_key(org, subject))):
            raw = await self._redis.hgetall(_session_key(session_hash))
            if raw:
                found.append(_parse(session_hash, raw))
        return found

    async def begin_signin(self, *, state: str, signin: SignIn) -> None:
        fields = json.dumps({"verifier": signin.verifier, "nonce": signin.nonce})
        await self._redis.set(_signin_key(state), fields, ex=SIGNIN_TTL_SECONDS)

    async def take_signin(self, state: str) -> SignIn | None:
        """The sign-in `state` names, once: a replayed callback finds none."""
        if not state or len(state) > 128:
            return None
        raw = await self._redis.getdel(_signin_key(state))
        if raw is None:
            return None
        fields = json.loads(raw)
        return SignIn(verifier=str(fields["verifier"]), nonce=str(fields["nonce"]))

    async def _resolved(self, session_hash: str, idle_ms: int) -> ConsoleSession | None:
        raw = await self._resolve(keys=[_session_key(session_hash)], args=[idle_ms])
        if not raw:
            return None
        pairs = [_text(item) for item in raw]
        return _parse(session_hash, dict(zip(pairs[::2], pairs[1::2], strict=True)))


def _parse(session_hash: str, raw: Mapping[Any, Any]) -> ConsoleSession:
    fields = {_text(k): _text(v) for k, v in raw.items()}
    return ConsoleSession(
        session_hash=session_hash,
        subject=fields["subject"],
        org=fields["org"],
        roles=frozenset(role for role in fields.get("roles", "").split(",") if role),
        csrf=fields["csrf"],
        created_ms=int(fields["created_ms"]),
        ends_ms=int(fields["ends_ms"]),
        id_token=fields.get("id_token", ""),
    )
