"""The signed identity a backend learns the caller from: claims, expiry, and one signature per second."""

from __future__ import annotations

import time

import jwt
import pytest

from gateway.principal import Principal
from gateway.signing.identity import IDENTITY_HEADER, IdentityHeaders, verify_identity

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}))
BOB = Principal(subject="bob@globex.example", org="globex", roles=frozenset({"staff"}))
KEY = "k" * 32


class Clock:
    def __init__(self) -> None:
        self.now = int(time.time()) + 0.25  # near real time: the tokens are checked for expiry

    def __call__(self) -> float:
        return self.now


def claims(token: str, key: str = KEY) -> dict[str, object]:
    times = {"verify_exp": False, "verify_iat": False, "verify_nbf": False}  # the test moves its own clock
    return jwt.decode(token, key, algorithms=["HS256"], audience="rooms", issuer="countersign", options=times)  # type: ignore[no-any-return]


def test_a_header_signed_within_one_second_is_the_one_that_would_be_signed_again() -> None:
    """Within a second the claims are the same, so the header is too (signed once); the next second it
    carries the new times, and each caller and adapter has its own."""
    clock = Clock()
    identity = IdentityHeaders({"rooms": KEY, "orders": KEY}, clock=clock)
    first = identity(ALICE, "rooms")[IDENTITY_HEADER]
    clock.now += 0.5
    assert identity(ALICE, "rooms")[IDENTITY_HEADER] == first
    assert first == IdentityHeaders({"rooms": KEY}, clock=clock)(ALICE, "rooms")[IDENTITY_HEADER]
    assert verify_identity(identity(BOB, "rooms")[IDENTITY_HEADER], key=KEY, adapter="rooms")["sub"] == BOB.subject
    assert identity(ALICE, "orders")[IDENTITY_HEADER] != first
    clock.now += 0.5
    later = identity(ALICE, "rooms")[IDENTITY_HEADER]
    assert claims(later)["iat"] == claims(first)["iat"] + 1  # type: ignore[operator]


def test_a_new_key_signs_the_next_header() -> None:
    """After `with_key`, nothing signed with the old key is handed out again."""
    identity = IdentityHeaders({"rooms": KEY}, clock=Clock())
    identity(ALICE, "rooms")
    identity.with_key("rooms", "n" * 32)
    with pytest.raises(jwt.InvalidSignatureError):
        claims(identity(ALICE, "rooms")[IDENTITY_HEADER])
    assert claims(identity(ALICE, "rooms")[IDENTITY_HEADER], "n" * 32)["sub"] == ALICE.subject
