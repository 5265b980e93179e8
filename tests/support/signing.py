"""The gateway's signing key in tests: production makes none by itself, so each test's store gets one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.cards.card import Card, CardState
from gateway.signing.signer import OVERLAP_SECONDS, Signer
from gateway.store.signing_keys import KeySet, PublishedKey, SigningKeyStore, public_jwk
from gateway.tools.context import RequestSigner
from tests.support.services import TEST_AUDIT_SECRET


async def ensure_signing_key(client: Any, secret: str = TEST_AUDIT_SECRET) -> str:
    """The active kid of the store on `client`, after making the first key if there is none (as an
    operator's ``countersign signing-keys rotate`` does)."""
    store = SigningKeyStore(client, secret=secret.encode())
    keys = await store.load()
    if keys.active_kid is not None:
        return keys.active_kid
    _done, kid = await store.rotate(overlap_ms=OVERLAP_SECONDS * 1000, expected_active=None)
    return kid


TEST_KEY = Ed25519PrivateKey.generate()
TEST_KID = "cs-tests"
TEST_JWKS = {"keys": [public_jwk(TEST_KEY, TEST_KID)]}
"""A key set held in memory, for tests that check tokens without a gateway (no Redis)."""


class StaticKeys:
    """A `KeySource` of one fixed key."""

    def __init__(self, key: Ed25519PrivateKey = TEST_KEY, kid: str = TEST_KID) -> None:
        published = PublishedKey(kid=kid, jwk=public_jwk(key, kid), created_ms=0, retire_at_ms=None)
        self._set = KeySet(active_kid=kid, private_key=key, now_ms=0, published=(published,))

    async def load(self) -> KeySet:
        return self._set


async def receipts_for_key(adapter: str, idempotency_key: str, *, tool: str = "test") -> RequestSigner:
    """What signs the receipts of an adapter's requests sent with `idempotency_key`, as the write path does for
    a card (a card made up for the key), with `TEST_KEY`: for adapter tests that send writes themselves."""
    card = Card(card_id="crd_test", tool=tool, tool_version="v", arguments={}, args_hash="-",
                requester_subject="test", requester_org="acme", requester_key_id="k", state=CardState.EXECUTING,
                version=1, idempotency_key=idempotency_key, transaction_id="t", approvals_required=1,
                approvers=("root@acme.example",), summary="", agent_text={}, created_ms=0, decide_by_ms=0)  # fmt: skip
    signer = Signer(StaticKeys())
    sign = await signer.receipts_for(card, adapter)
    assert sign is not None
    return sign


_FLUSH_KEEPING = """
for _, name in ipairs(redis.call('KEYS', '*')) do
  if name ~= ARGV[1] then redis.call('DEL', name) end
end
return 1
"""


async def flush_keeping_signing_key(client: Any) -> None:
    """Empty the database but for the gateway's signing key set, then make sure it has a key: a gateway
    running across tests keeps signing with the key it holds (in production keys outlive any data)."""
    await client.eval(_FLUSH_KEEPING, 0, "countersign:{signing}:keys")
    await ensure_signing_key(client)


@asynccontextmanager
async def client_keeping_signing_key(url: str) -> AsyncIterator[Any]:
    """A client (bytes replies) on the database at `url`, flushed but for the signing key before and after."""
    from redis.asyncio import Redis

    client = Redis.from_url(url, decode_responses=False)
    try:
        await flush_keeping_signing_key(client)
        yield client
        await flush_keeping_signing_key(client)
    finally:
        await client.aclose()


def signing_key_before_start(url: str) -> None:
    """Make the first signing key of the database at `url` before a session gateway starts on it, as an
    operator would (a gateway holding no key signs nothing until its next read of the set)."""
    import asyncio

    from redis.asyncio import Redis

    async def make() -> None:
        client = Redis.from_url(url)
        try:
            await ensure_signing_key(client)
        finally:
            await client.aclose()

    asyncio.run(make())
