"""The gateway's signing key set on a real Redis: encrypted at rest, rotated with an overlap, seen by every
process within the cache, published with public halves only."""

from __future__ import annotations

import base64

import anyio
import pytest
from cryptography.hazmat.primitives import serialization
from redis.asyncio import Redis

from gateway.errors import ConfigError
from gateway.signing.signer import CACHE_SECONDS, OVERLAP_SECONDS, Signer
from gateway.store.signing_keys import SigningKeyStore
from tests.support.services import TEST_AUDIT_SECRET

pytestmark = pytest.mark.anyio

SECRET = TEST_AUDIT_SECRET.encode()


async def test_the_private_key_is_stored_encrypted_and_only_the_public_half_is_published(redis: Redis) -> None:
    """Nothing in Redis holds the raw private key; the JWKS has OKP/Ed25519 public fields, kid, alg, use."""
    store = SigningKeyStore(redis, secret=SECRET)
    keys = await store.load()
    assert keys.private_key is not None and keys.active_kid is not None
    raw = keys.private_key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    stored = b"".join(v for v in (await redis.hgetall("countersign:{signing}:keys")).values())
    for form in (raw, base64.b64encode(raw), base64.urlsafe_b64encode(raw).rstrip(b"=")):
        assert form not in stored
    document = await Signer(store).jwks()
    [jwk] = document["keys"]
    assert jwk == {"kty": "OKP", "crv": "Ed25519", "x": jwk["x"], "kid": keys.active_kid, "alg": "EdDSA", "use": "sig"}


async def test_a_store_with_another_secret_cannot_use_the_key(redis: Redis) -> None:
    """A process with another key-encryption secret gets a ConfigError, never a made-up key."""
    with pytest.raises(ConfigError):
        await SigningKeyStore(redis, secret=b"another-secret-entirely").load()
    with pytest.raises(ConfigError):
        SigningKeyStore(redis, secret=b"")


async def test_a_rotation_keeps_the_old_key_published_for_the_overlap_then_drops_it(redis: Redis) -> None:
    """After a rotation the new key signs and both are published; once the overlap has passed the old one is
    gone from the set, and the next rotation deletes it from Redis."""
    store = SigningKeyStore(redis, secret=SECRET)
    old = (await store.load()).active_kid
    done, new = await store.rotate(overlap_ms=300, expected_active=old)
    assert done and new != old
    keys = await store.load()
    assert keys.active_kid == new and [k.kid for k in keys.published if k.kid == old] == [old]
    retiring = next(k for k in keys.published if k.kid == old)
    assert retiring.retire_at_ms is not None and retiring.retire_at_ms > keys.now_ms
    with anyio.fail_after(5):
        while old in {k.kid for k in (await store.load()).published}:
            await anyio.sleep(0.05)
    await store.rotate(overlap_ms=OVERLAP_SECONDS * 1000, expected_active=new)
    assert f"k:{old}".encode() not in await redis.hkeys("countersign:{signing}:keys")


async def test_two_rotations_from_the_same_view_cannot_both_win(redis: Redis) -> None:
    """A rotation names the key it saw active; the second of two racing rotations changes nothing."""
    store = SigningKeyStore(redis, secret=SECRET)
    seen = (await store.load()).active_kid
    first = await store.rotate(overlap_ms=1000, expected_active=seen)
    second = await store.rotate(overlap_ms=1000, expected_active=seen)
    assert first[0] and not second[0] and second[1] == first[1]
    assert (await store.load()).active_kid == first[1]


async def test_every_process_signs_with_the_new_key_within_the_cache(redis: Redis) -> None:
    """Two gateway processes on one Redis: after a rotation by one, the other signs with the new key as soon
    as its cached copy is older than CACHE_SECONDS (a fake clock stands in for the wait)."""
    now = [0.0]
    store = SigningKeyStore(redis, secret=SECRET)
    here, there = (
        Signer(store, clock=lambda: now[0]),
        Signer(SigningKeyStore(redis, secret=SECRET), clock=lambda: now[0]),
    )
    before = (await there.refresh()).active_kid
    await here.refresh()
    _done, after = await store.rotate(overlap_ms=OVERLAP_SECONDS * 1000, expected_active=before)
    assert (await there.refresh()).active_kid == before  # still cached
    now[0] += CACHE_SECONDS
    assert (await there.refresh()).active_kid == after
    kids = [key["kid"] for key in (await there.jwks())["keys"]]
    assert kids[0] == after and before in kids  # active first; the one before it in its overlap


async def test_without_any_key_nothing_is_signed(redis: Redis) -> None:
    """An empty store (production before an operator's first rotate): no receipt signer, no identity token."""
    await redis.delete("countersign:{signing}:keys")
    signer = Signer(SigningKeyStore(redis, secret=SECRET))
    assert (await signer.jwks()) == {"keys": []}
    assert not signer.can_sign and signer.sign({"sub": "x"}, typ="t") is None
