"""A WebAuthn authenticator in Python: real P-256 keys, real CBOR, real signatures, no browser.

For tests of the gateway's side of WebAuthn below the console (the passkey service, the card
service, the REST and batch paths), where driving Chromium's virtual authenticator for every case
would cost seconds each. It makes exactly the bytes an authenticator makes (attestation ``none``,
user presence and verification flags set, a signature counter that moves by one per assertion),
and the gateway verifies them with the `webauthn` library as it would a browser's. The console
tests use Chromium's own virtual authenticator instead (tests/web/test_signin.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url

__all__ = ["SoftAuthenticator"]

_UP, _UV, _AT = 0x01, 0x04, 0x40


class SoftAuthenticator:
    """One credential (one P-256 key) for one relying party, as a browser would report it."""

    def __init__(self, *, rp_id: str, origin: str, user_verified: bool = True) -> None:
        self.rp_id = rp_id
        self.origin = origin
        self.user_verified = user_verified
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(16)
        self.counter = 0

    @property
    def id(self) -> str:
        return bytes_to_base64url(self.credential_id)

    def _cose_key(self) -> bytes:
        numbers = self.key.public_key().public_numbers()
        return cbor2.dumps({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")})

    def _client_data(self, kind: str, challenge: str) -> bytes:
        data = {"type": kind, "challenge": challenge, "origin": self.origin, "crossOrigin": False}
        return json.dumps(data, separators=(",", ":")).encode()

    def _flags(self, extra: int = 0) -> int:
        return _UP | (_UV if self.user_verified else 0) | extra

    def create(self, options: dict[str, Any]) -> dict[str, Any]:
        """The answer to ``navigator.credentials.create(options)`` (options as the gateway sent them)."""
        client_data = self._client_data("webauthn.create", options["challenge"])
        rp_hash = hashlib.sha256(self.rp_id.encode()).digest()
        attested = bytes(16) + struct.pack(">H", len(self.credential_id)) + self.credential_id + self._cose_key()
        auth_data = rp_hash + bytes([self._flags(_AT)]) + struct.pack(">I", self.counter) + attested
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return self._credential(
            {
                "clientDataJSON": bytes_to_base64url(client_data),
                "attestationObject": bytes_to_base64url(attestation),
                "transports": ["internal"],
            }
        )

    def get(self, options: dict[str, Any] | str, *, counter: int | None = None) -> dict[str, Any]:
        """The answer to ``navigator.credentials.get(options)``; `options` may be just the challenge (base64url).

        The counter moves on by one, unless `counter` names the one to sign with."""
        challenge = options if isinstance(options, str) else options["challenge"]
        self.counter = self.counter + 1 if counter is None else counter
        client_data = self._client_data("webauthn.get", challenge)
        rp_hash = hashlib.sha256(self.rp_id.encode()).digest()
        auth_data = rp_hash + bytes([self._flags()]) + struct.pack(">I", self.counter)
        signed = auth_data + hashlib.sha256(client_data).digest()
        signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        return self._credential(
            {
                "clientDataJSON": bytes_to_base64url(client_data),
                "authenticatorData": bytes_to_base64url(auth_data),
                "signature": bytes_to_base64url(signature),
                "userHandle": None,
            }
        )

    def _credential(self, response: dict[str, Any]) -> dict[str, Any]:
        """This credential with `response`, as a browser serialises a ``PublicKeyCredential``."""
        credential = {"id": self.id, "rawId": self.id, "type": "public-key", "response": response}
        return {**credential, "clientExtensionResults": {}}


def challenge_of(challenge: bytes) -> str:
    """A challenge as options carry it."""
    return bytes_to_base64url(challenge)


def from_options(value: str) -> bytes:
    return base64url_to_bytes(value)
