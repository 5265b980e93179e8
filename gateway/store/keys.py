"""API keys: minted once, stored only as a hash, resolved to a `Principal` per request.

Who calls it: the auth middleware (`resolve`), the CLI and the composition root (`create`,
`list`, `revoke`). A key is ``csk_<kind>_<43 url-safe chars>`` (256 random bits). Only its
SHA-256 is stored: the keys are random, so a slow password hash would add latency and no
strength. The plaintext is returned once, by `create`, and never again.

Redis layout (one hash tag per key so each operation touches one slot):
``countersign:key:{<hash>}`` -> hash of the key's metadata; ``countersign:keys`` -> hash of
key id -> key hash, for listing and revoking by id; ``countersign:revoked-subjects`` -> hash of
``<org> <identity>`` -> the revocation as JSON, for subjects revoked as a whole (every key of theirs,
every token an issuer mints for them, every approved card they proposed that has not run).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.errors import AuthError
from gateway.principal import KeyKind, Principal, identity_of, mixes_scripts, normalize_subject
from gateway.printable import is_printable
from gateway.store.client import store_boundary

__all__ = ["KeyCache", "KeyRecord", "KeyStore", "SubjectRevocation", "hash_token"]

_INDEX = "countersign:keys"
_REVOKED_SUBJECTS = "countersign:revoked-subjects"
_PREFIX = "csk_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _record_key(token_hash: str) -> str:
    return f"countersign:key:{{{token_hash}}}"


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyRecord:
    """What is stored about a key: everything but the key itself."""

    key_id: str
    kind: KeyKind
    subject: str
    org: str
    roles: frozenset[str]
    created_at: str
    revoked: bool = False

    def principal(self) -> Principal:
        return Principal(subject=self.subject, org=self.org, roles=self.roles, kind=self.kind, key_id=self.key_id)


@dataclass(frozen=True, kw_only=True, slots=True)
class SubjectRevocation:
    """A subject revoked as a whole: every spelling of it (`identity_of`) in its org."""

    subject: str
    """The subject as the operator wrote it, in its normal form."""
    org: str
    at: str
    """When, by the Redis clock (``seconds.micros``)."""
    by: str
    """Who revoked it (the operator's login, or an admin's subject)."""


def _revocation_field(org: str, subject: str) -> str:
    return f"{org.strip()} {identity_of(subject)}"


@store_boundary
class KeyStore:
    """Creates, lists, revokes and resolves API keys in Redis."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    async def create(
        self, *, kind: KeyKind, subject: str, org: str, roles: Iterable[str], allow_mixed_scripts: bool = False
    ) -> tuple[str, KeyRecord]:
        """Mint a key for `subject`, stored in its normal form (`normalize_subject`). Returns the
        plaintext (shown once) and its record.

        A subject that mixes writing systems (`mixes_scripts`: Latin with Cyrillic, say, the stuff of
        look-alikes) is refused unless the operator allows it with `allow_mixed_scripts`; allowed, it is
        still one identity with every look-alike of it (`identity_of`).

        Raises:
            AuthError: when subject or org is empty or holds a character that is not printable
                (`gateway.printable`: no control, separator or bidi character), the subject mixes scripts
                and that was not allowed, or a role is not a plain word.
        """
        role_set = frozenset(role.strip() for role in roles if role.strip())
        subject, org = normalize_subject(subject), org.strip()
        if not subject or not org:
            raise AuthError("a key needs a subject and an org")
        if not is_printable(subject) or not is_printable(org):
            raise AuthError("a subject and an org are printable text: no control, separator or bidi characters")
        if mixes_scripts(subject) and not allow_mixed_scripts:
            raise AuthError(
                "the subject mixes writing systems (a look-alike of another subject?); "
                "an operator may allow it with --allow-mixed-scripts"
            )
        if any(not role.replace("-", "").replace("_", "").isalnum() for role in role_set):
            raise AuthError("roles are plain words (letters, digits, - and _)")
        token = f"{_PREFIX}{kind.value}_{secrets.token_urlsafe(32)}"
        token_hash = hash_token(token)
        key_id = f"key_{secrets.token_hex(6)}"
        seconds, micros = await self._client.time()
        record = KeyRecord(
            key_id=key_id,
            kind=kind,
            subject=subject,
            org=org,
            roles=role_set,
            created_at=f"{seconds}.{micros:06d}",
        )
        # The index entry first, then the record, each in its own slot (a Cluster refuses a
        # transaction across slots): interrupted between them, an index entry names a key that
        # does not exist, which nothing can use, rather than a working key nobody can list or revoke.
        await self._client.hset(_INDEX, key_id, token_hash)
        # One HSET: the record appears whole or not at all.
        await self._client.hset(
            _record_key(token_hash),
            mapping={
                "key_id": key_id,
                "kind": kind.value,
                "subject": record.subject,
                "org": record.org,
                "roles": ",".join(sorted(role_set)),
                "created_at": record.created_at,
                "revoked": "0",
            },
        )
        return token, record

    async def resolve(self, token: str) -> Principal | None:
        """The principal of a live key, or None for a malformed, unknown or revoked one, or one whose
        subject is revoked."""
        if not token.startswith(_PREFIX) or len(token) > 200:
            return None
        token_hash = hash_token(token)
        fields = await self._client.hgetall(_record_key(token_hash))
        record = _parse(fields)
        if record is None or record.revoked or await self.subject_revoked(record.org, record.subject):
            return None
        return record.principal()

    async def list(self) -> Sequence[KeyRecord]:
        """Every key ever created, revoked ones included, oldest first."""
        index = await self._client.hgetall(_INDEX)
        records = []
        for token_hash in index.values():
            record = _parse(await self._client.hgetall(_record_key(_text(token_hash))))
            if record is not None:
                records.append(record)
        return sorted(records, key=lambda r: (float(r.created_at), r.key_id))

    async def get(self, key_id: str) -> KeyRecord | None:
        token_hash = await self._client.hget(_INDEX, key_id)
        if token_hash is None:
            return None
        return _parse(await self._client.hgetall(_record_key(_text(token_hash))))

    async def live_principal(self, key_id: str) -> Principal | None:
        """The principal of key `key_id` as it stands now: None when the key is unknown or revoked, or
        its subject is (`revoke_subject`)."""
        record = await self.get(key_id)
        if record is None or record.revoked or await self.subject_revoked(record.org, record.subject):
            return None
        return record.principal()

    async def revoke_subject(self, org: str, subject: str, *, by: str) -> SubjectRevocation:
        """Revoke `subject` of `org` as a whole, under every spelling of it (`identity_of`): its keys
        stop resolving, tokens minted for it are refused, and an approved card it proposed that has not
        run yet does not run. Revoking twice keeps the first record.

        Raises:
            AuthError: when subject or org is empty.
        """
        subject, org = normalize_subject(subject), org.strip()
        if not subject or not org:
            raise AuthError("revoking a subject needs the subject and its org")
        seconds, micros = await self._client.time()
        revocation = SubjectRevocation(subject=subject, org=org, at=f"{seconds}.{micros:06d}", by=by)
        record = json.dumps({"subject": subject, "org": org, "at": revocation.at, "by": by})
        await self._client.hsetnx(_REVOKED_SUBJECTS, _revocation_field(org, subject), record)
        return revocation

    async def subject_revoked(self, org: str, subject: str) -> bool:
        """Whether `subject` of `org`, or a look-alike of it, has been revoked (`revoke_subject`)."""
        return bool(await self._client.hexists(_REVOKED_SUBJECTS, _revocation_field(org, subject)))

    async def revoked_subjects(self) -> Sequence[SubjectRevocation]:
        """Every subject revoked, oldest first."""
        rows = [json.loads(_text(raw)) for raw in (await self._client.hgetall(_REVOKED_SUBJECTS)).values()]
        return sorted(
            (SubjectRevocation(subject=r["subject"], org=r["org"], at=r["at"], by=r["by"]) for r in rows),
            key=lambda r: float(r.at),
        )

    async def revoke(self, key_id: str) -> KeyRecord:
        """Revoke a key by id; it stops working on the next request.

        Raises:
            AuthError: when no key has that id.
        """
        token_hash = await self._client.hget(_INDEX, key_id)
        if token_hash is None:
            raise AuthError(f"no key with id {key_id}")
        await self._client.hset(_record_key(_text(token_hash)), "revoked", "1")
        record = await self.get(key_id)
        if record is None:  # the index and the record are written together; this is corruption
            raise AuthError(f"key {key_id} has an index entry but no record")
        return record


class KeyCache:
    """Resolved keys, remembered for `ttl_seconds` so a request costs no Redis round trip.

    The trade-off is stated, not hidden: a key revoked by another process stops working within
    `ttl_seconds` (one second by default) rather than at once. Unknown tokens are never cached,
    so a made-up token cannot poison the cache, and the cache holds hashes, never tokens.
    """

    def __init__(
        self,
        store: KeyStore,
        *,
        ttl_seconds: float = 1.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl = ttl_seconds
        self._max = max_entries
        self._clock = clock
        self._entries: dict[str, tuple[Principal, float]] = {}

    async def subject_revoked(self, org: str, subject: str) -> bool:
        """`KeyStore.subject_revoked`, asked each time: a token's subject is checked once a request."""
        return await self._store.subject_revoked(org, subject)

    async def resolve(self, token: str) -> Principal | None:
        key = hash_token(token)
        now = self._clock()
        cached = self._entries.get(key)
        if cached is not None and now - cached[1] < self._ttl:
            return cached[0]
        principal = await self._store.resolve(token)
        if principal is None:
            self._entries.pop(key, None)
            return None
        if len(self._entries) >= self._max:
            self._entries.pop(next(iter(self._entries)))  # oldest insertion first
        self._entries[key] = (principal, now)
        return principal


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _parse(fields: Mapping[Any, Any]) -> KeyRecord | None:
    if not fields:
        return None
    data = {_text(k): _text(v) for k, v in fields.items()}
    try:
        return KeyRecord(
            key_id=data["key_id"],
            kind=KeyKind(data["kind"]),
            subject=normalize_subject(data["subject"]),  # keys stored before subjects were normalized
            org=data["org"],
            roles=frozenset(r for r in data.get("roles", "").split(",") if r),
            created_at=data.get("created_at", "0"),
            revoked=data.get("revoked") == "1",
        )
    except (KeyError, ValueError):
        return None
