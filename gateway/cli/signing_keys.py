"""``countersign signing-keys rotate|list``: the gateway's own signing keys, as an operator manages them.

Production never makes a signing key by itself: the first ``rotate`` on an empty store makes the
first key (until then approved writes wait, unsent, and backends get no identity token they can
verify with the JWKS). Each later ``rotate`` makes a new key active at once; the one it replaces
stays published in ``/.well-known/jwks.json`` for `gateway.signing.signer.OVERLAP_SECONDS`, long enough for
every token signed with it to expire, and is dropped by the first rotation after that. Every gateway
process sees the new key within `gateway.signing.signer.CACHE_SECONDS`. Nothing here prints a private key.
"""

from __future__ import annotations

import getpass
import sys

from gateway.audit.events import AuditEvent, AuditSink
from gateway.canonical import iso_from_ms
from gateway.signing.signer import OVERLAP_SECONDS
from gateway.store.signing_keys import SigningKeyStore

__all__ = ["list_signing_keys", "rotate_signing_key"]


async def rotate_signing_key(store: SigningKeyStore, audit: AuditSink) -> int:
    """Make a new active key; exit status 1 when another rotation won the race (nothing changed)."""
    before = await store.load()
    done, kid = await store.rotate(overlap_ms=OVERLAP_SECONDS * 1000, expected_active=before.active_kid)
    await audit.record(
        AuditEvent(
            action="signing_key.rotate",
            outcome="ok" if done else "conflict",
            subject=getpass.getuser(),
            extra={"kid": kid, "previous": before.active_kid or ""},
        )
    )
    if not done:
        print(f"another rotation made {kid} active meanwhile; nothing changed", file=sys.stderr)
        return 1
    print(kid)
    retiring = f"; {before.active_kid} stays published for {OVERLAP_SECONDS} s" if before.active_kid else ""
    print(f"signing key {kid} is active{retiring}", file=sys.stderr)
    return 0


async def list_signing_keys(store: SigningKeyStore) -> int:
    """One line per published key: kid, active or when it retires, when it was made."""
    keys = await store.load()
    if not keys.published:
        print("no signing key: run countersign signing-keys rotate", file=sys.stderr)
    for key in keys.published:
        state = "active" if key.kid == keys.active_kid else f"retires {iso_from_ms(key.retire_at_ms or 0)}"
        print(f"{key.kid}  {key.jwk.get('alg')}  {state}  created {iso_from_ms(key.created_ms)}")
    return 0
