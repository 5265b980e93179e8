"""The gateway's signing key in tests: production makes none by itself, so each test's store gets one."""

from __future__ import annotations

from typing import Any

from gateway.signer import OVERLAP_SECONDS
from gateway.store.signing_keys import SigningKeyStore
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
