"""`verify_receipt` and `verify_identity` against classes of forged, tampered and confused tokens.

Signed with a real Ed25519 key through the gateway's own `Signer`; no Redis is needed to check a token.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.types import Message

from gateway.cards.card import Card, CardState
from gateway.principal import Principal
from gateway.signing.identity import IdentityHeaders, verify_identity
from gateway.signing.receipts import (
    RECEIPT_HEADER,
    RECEIPT_TYPE,
    ReceiptMismatchError,
    receipt_claims,
    request_hash,
    verify_receipt,
)
from gateway.signing.signer import IDENTITY_TYPE, Signer
from gateway.store.signing_keys import KeySet, PublishedKey, public_jwk
from tests.support.examples import examples

KEY = Ed25519PrivateKey.generate()
KID = "cs-test"
JWKS = {"keys": [public_jwk(KEY, KID)]}
BODY = {"room_id": "room-eos", "date": "2026-12-15", "start": "09:00", "end": "10:00", "title": "Planning"}
CARD = Card(card_id="crd_1", tool="rooms_book", tool_version="sha256:v", arguments=BODY, args_hash="a" * 64,
            requester_subject="alice@acme.example", requester_org="acme", requester_key_id="k1",
            state=CardState.EXECUTING, version=3, idempotency_key="idem-1", transaction_id="t1",
            approvals_required=1, approvers=("root@acme.example", "policy:small-refunds"), summary="s",
            agent_text={}, created_ms=1, decide_by_ms=2, approved_ms=1_700_000_000_000,
            acting_client="agent-app")  # fmt: skip


class _Static:
    def __init__(self, key: Ed25519PrivateKey, kid: str) -> None:
        published = PublishedKey(kid=kid, jwk=public_jwk(key, kid), created_ms=0, retire_at_ms=None)
        self._set = KeySet(active_kid=kid, private_key=key, now_ms=0, published=(published,))

    async def load(self) -> KeySet:
        return self._set


async def _signer(key: Ed25519PrivateKey = KEY, kid: str = KID) -> Signer:
    signer = Signer(_Static(key, kid))
    await signer.refresh()
    return signer


def _check(token: str, body: Any = BODY, key: str | None = "idem-1", audience: str = "rooms") -> dict[str, Any]:
    return verify_receipt(token, jwks=JWKS, audience=audience, method="POST", path="/bookings", query={}, body=body,
                          idempotency_key=key)  # fmt: skip


async def _receipt() -> str:
    sign = await (await _signer()).receipts_for(CARD, "rooms")
    assert sign is not None
    return sign("POST", "/bookings", None, BODY)[RECEIPT_HEADER]


def _segments(token: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    header, payload, signature = token.split(".")
    return _decode(header), _decode(payload), signature


def _decode(segment: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))))


def _encode(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


@pytest.mark.anyio
async def test_a_receipt_verifies_for_its_own_request_and_carries_the_card() -> None:
    """The receipt of a send verifies with the JWKS for exactly that request, and names the card's facts."""
    claims = _check(await _receipt())
    assert claims["approvers"] == ["root@acme.example", "policy:small-refunds"]
    assert claims["act"] == {"sub": "agent-app"} and claims["aud"] == "rooms" and claims["iss"] == "countersign"
    assert claims["request_hash"] == request_hash("POST", "/bookings", {}, BODY)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
CLAIMS = ["iss", "aud", "exp", "iat", "sub", "org", "card_id", "tool", "args_hash", "idempotency_key", "approvers",
          "approved_at", "request_hash", "act"]  # fmt: skip


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(claim=st.sampled_from(CLAIMS), value=JSON_VALUES)
def test_any_claim_changed_after_signing_is_refused(claim: str, value: Any) -> None:
    """Any claim of a real receipt replaced by any other JSON value, the signature kept, does not verify."""
    token = _fresh()
    header, payload, signature = _segments(token)
    if payload.get(claim) == value:
        return
    payload[claim] = value
    forged = f"{_encode(header)}.{_encode(payload)}.{signature}"
    with pytest.raises(jwt.InvalidTokenError):
        _check(forged)


@settings(max_examples=examples(100), deadline=None)
@given(field=st.sampled_from(sorted(BODY)), value=JSON_VALUES)
def test_any_other_body_is_refused(field: str, value: Any) -> None:
    """The same real receipt with any body but the one it was signed for is a mismatch."""
    body = {**BODY, field: value}
    if body == BODY:
        return
    with pytest.raises(ReceiptMismatchError):
        _check(_fresh(), body=body)


@settings(max_examples=examples(50), deadline=None)
@given(key=st.none() | st.text(max_size=30), audience=st.text(min_size=1, max_size=12))
def test_another_key_or_audience_is_refused(key: str | None, audience: str) -> None:
    """Another Idempotency-Key (or none), or another backend's audience, does not verify."""
    if key != "idem-1":
        with pytest.raises(ReceiptMismatchError):
            _check(_fresh(), key=key)
    if audience != "rooms":
        with pytest.raises(jwt.InvalidTokenError):
            _check(_fresh(), audience=audience)


@pytest.mark.anyio
async def test_forged_signers_algorithms_and_token_kinds_are_refused() -> None:
    """A key not in the JWKS, ``none``, HS256 keyed with the public key, an identity token offered as a
    receipt, a receipt offered as an identity, and an expired receipt: each is refused."""
    stranger = await (await _signer(Ed25519PrivateKey.generate(), KID)).receipts_for(CARD, "rooms")
    assert stranger is not None
    header, payload, _signature = _segments(_fresh())
    unsigned = f"{_encode({**header, 'alg': 'none'})}.{_encode(payload)}."
    hmac = jwt.encode(payload, JWKS["keys"][0]["x"], algorithm="HS256", headers={"kid": KID, "typ": RECEIPT_TYPE})
    signer = await _signer()
    identity = IdentityHeaders(signer=signer)(
        Principal(subject="alice@acme.example", org="acme", roles=frozenset()), "rooms"
    )
    old = receipt_claims(CARD, adapter="rooms", request=request_hash("POST", "/bookings", {}, BODY),
                         now=int(time.time()) - 3600)  # fmt: skip
    expired = signer.sign(old, typ=RECEIPT_TYPE)
    assert expired is not None
    for token in (stranger("POST", "/bookings", None, BODY)[RECEIPT_HEADER], unsigned, hmac,
                  identity["x-countersign-identity"], expired):  # fmt: skip
        with pytest.raises(jwt.InvalidTokenError):
            _check(token)
    assert (
        verify_identity(identity["x-countersign-identity"], adapter="rooms", jwks=JWKS)["sub"] == "alice@acme.example"
    )
    for token in (_fresh(), hmac):
        with pytest.raises(jwt.InvalidTokenError):
            verify_identity(token, adapter="rooms", jwks=JWKS)
    assert jwt.get_unverified_header(identity["x-countersign-identity"])["typ"] == IDENTITY_TYPE


def _fresh() -> str:
    """A receipt as `Signer.receipts_for` signs it (same claims, key, kid and typ), made now and synchronously
    for the property tests; `test_a_receipt_verifies_for_its_own_request_and_carries_the_card` covers the
    signer's own path."""
    claims = receipt_claims(CARD, adapter="rooms", request=request_hash("POST", "/bookings", None, BODY),
                            now=int(time.time()))  # fmt: skip
    return jwt.encode(claims, KEY, algorithm="EdDSA", headers={"kid": KID, "typ": RECEIPT_TYPE})


def _readme_snippet() -> Any:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [example] = [b.split("```", 1)[0] for b in text.split("```python\n")[1:] if "async def receipt_refusal" in b]
    namespace: dict[str, Any] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    return namespace["receipt_refusal"]


def _request(body: bytes, headers: dict[str, str]) -> Request:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    raw = [(name.encode(), value.encode()) for name, value in headers.items()]
    scope = {"type": "http", "method": "POST", "path": "/bookings", "query_string": b"", "headers": raw}
    return Request(scope, receive)


@pytest.mark.anyio
async def test_the_readme_snippet_accepts_the_receipt_of_its_request_and_nothing_else() -> None:
    """The backend author's snippet, run as the README prints it, over a real Starlette request."""
    refusal = _readme_snippet()
    token = await _receipt()
    body = json.dumps(BODY).encode()
    good = {RECEIPT_HEADER: token, "idempotency-key": "idem-1"}
    assert await refusal(_request(body, good), JWKS) is None
    assert await refusal(_request(body, {"idempotency-key": "idem-1"}), JWKS) == "missing_receipt"
    assert await refusal(_request(json.dumps({**BODY, "date": "2026-12-16"}).encode(), good), JWKS) == "invalid_receipt"
    assert await refusal(_request(body, {**good, "idempotency-key": "idem-2"}), JWKS) == "invalid_receipt"
