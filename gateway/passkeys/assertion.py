"""What a passkey signs to approve a card, what the gateway keeps of it, and how anyone checks it again.

The challenge is derived from the card, not drawn at random: SHA-256 over the canonical JSON of
the card id, its version and args_hash as the approver reviewed them, and the decision. An
assertion therefore approves exactly one card at one version with one set of arguments; an
assertion made for another card, another version or another decision does not verify. A replay of
the same assertion is stopped by the signature counter (`gateway.store.passkeys`) and by the card
itself, which is no longer PENDING at that version.

`ApprovalAssertion` is what the gateway verified and keeps on the card (`Card.passkeys`); the
approval receipt a backend receives carries the same objects (``passkeys``), and
`verify_approval_assertion` is the check a backend (or an auditor) runs with the approver's
registered public key and the card's args_hash, using the same `webauthn` library the gateway
uses, so nobody has to trust the gateway's word that a person's authenticator signed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from webauthn import verify_authentication_response
from webauthn.helpers import base64url_to_bytes

from gateway.canonical import canonical_json

__all__ = ["ApprovalAssertion", "SignedDecision", "approval_challenge", "public_key_bytes", "verify_approval_assertion"]

SignedDecision = Literal["approve"]


def approval_challenge(*, card_id: str, version: int, args_hash: str, decision: SignedDecision) -> bytes:
    """The 32 bytes an approver's passkey signs to take `decision` on the card as reviewed."""
    bound = {"card_id": card_id, "version": version, "args_hash": args_hash, "decision": decision}
    return hashlib.sha256(canonical_json(bound).encode()).digest()


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalAssertion:
    """A verified WebAuthn assertion of one approval, with what it was bound to (all strings base64url)."""

    approver: str
    """The approver's normalised subject."""
    card_id: str
    version: int
    """The card version the approver reviewed (the challenge's), not the one the approval made."""
    args_hash: str
    decision: SignedDecision
    credential_id: str
    public_key: str
    """The registered COSE public key the assertion verified with (as registered; check it against yours)."""
    authenticator_data: str
    client_data_json: str
    signature: str
    sign_count: int
    rp_id: str
    origin: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> ApprovalAssertion:
        """Raises: TypeError or KeyError for an object that is not one."""
        return cls(**{name: raw[name] for name in cls.__dataclass_fields__})


def verify_approval_assertion(
    assertion: Mapping[str, Any], *, public_key: bytes, card_id: str, args_hash: str, rp_id: str, origin: str
) -> None:
    """Check that `assertion` (one of a receipt's ``passkeys``) is a user-verified signature by the passkey
    whose COSE `public_key` you hold, over the approval of `card_id` with `args_hash`.

    Raises:
        webauthn.helpers.exceptions.InvalidAuthenticationResponse: the signature, the challenge (another
            card, version, arguments or decision), the relying party, the origin or user verification.
        KeyError, TypeError: `assertion` is not an approval assertion.
    """
    challenge = approval_challenge(
        card_id=card_id, version=int(assertion["version"]), args_hash=args_hash, decision=assertion["decision"]
    )
    credential = {
        "id": assertion["credential_id"],
        "rawId": assertion["credential_id"],
        "type": "public-key",
        "response": {
            "authenticatorData": assertion["authenticator_data"],
            "clientDataJSON": assertion["client_data_json"],
            "signature": assertion["signature"],
        },
    }
    verify_authentication_response(
        credential=credential,
        expected_challenge=challenge,
        expected_rp_id=rp_id,
        expected_origin=origin,
        credential_public_key=public_key,
        credential_current_sign_count=0,
        require_user_verification=True,
    )


def public_key_bytes(assertion: Mapping[str, Any]) -> bytes:
    """The public key an assertion names, as bytes (compare it with the one you registered)."""
    return base64url_to_bytes(str(assertion["public_key"]))
