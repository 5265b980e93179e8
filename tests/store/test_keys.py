"""Keys on a real Redis: only hashes are stored, and the resolve cache bounds revocation delay."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given, settings
from redis.asyncio import Redis

from gateway.errors import AuthError
from gateway.principal import KeyKind
from gateway.store.keys import KeyCache, KeyStore, hash_token
from tests.support.examples import examples
from tests.support.hostile_text import hostile_text

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_revoked_key_stops_resolving_once_the_cache_entry_ages_out(redis: Redis) -> None:
    """Within the TTL the cached principal answers; after it, the revocation is seen."""
    store, clock = KeyStore(redis), Clock()
    cache = KeyCache(store, ttl_seconds=1.0, clock=clock)
    token, record = await store.create(kind=KeyKind.AGENT, subject="a@acme.example", org="acme", roles=("staff",))
    assert (await cache.resolve(token)) == record.principal()
    await store.revoke(record.key_id)
    clock.now += 0.5
    assert await cache.resolve(token) is not None  # the stated delay: at most ttl_seconds
    clock.now += 0.6
    assert await cache.resolve(token) is None


async def test_unknown_tokens_are_not_cached_and_only_hashes_are_stored(redis: Redis) -> None:
    """A made-up token costs a lookup each time and never enters the cache; Redis holds no token."""
    store = KeyStore(redis)
    cache = KeyCache(store)
    assert await cache.resolve("csk_agent_made-up") is None
    assert cache._entries == {}
    token, _ = await store.create(kind=KeyKind.AGENT, subject="a@acme.example", org="acme", roles=())
    await cache.resolve(token)
    assert list(cache._entries) == [hash_token(token)]
    for key in await redis.keys("*"):
        if await redis.type(key) == b"hash":
            assert token.encode() not in b"".join(v for kv in (await redis.hgetall(key)).items() for v in kv)


async def _create(redis_url: str, subject: str) -> tuple[type[Exception] | None, int]:
    client = Redis.from_url(redis_url)
    try:
        await client.flushdb()
        try:
            await KeyStore(client).create(kind=KeyKind.ADMIN, subject=subject, org="acme", roles=("approver",))
        except AuthError as error:
            return type(error), len(await KeyStore(client).list())
        return None, len(await KeyStore(client).list())
    finally:
        await client.aclose()


@settings(max_examples=examples(60), deadline=None)
@given(hostile=hostile_text)
def test_a_subject_with_a_control_character_is_refused_and_nothing_is_stored(
    quiet_redis_url: str, hostile: str
) -> None:
    """A subject must show as what it is: control, separator and bidi characters inside it are refused."""
    refused, stored = anyio.run(_create, quiet_redis_url, f"alice{hostile}@acme.example")
    assert (refused, stored) == (AuthError, 0)
