"""Access tokens of a real local issuer (tests/support/token_issuer.py), verified over real HTTP.

Every refusal is a `TokenVerdict` without a principal and with the reason BearerAuth audits; the
end-to-end answers (401, 403, the challenge) are in tests/auth/test_oauth_resource.py.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.auth.jwks import JwksSource
from gateway.auth.tokens import TokenVerifier, looks_like_jwt
from gateway.config.oauth import IssuerSection, OAuthSection
from gateway.principal import KeyKind
from tests.support.examples import examples
from tests.support.token_issuer import Listener, TokenIssuer, make_key, serve_issuer, serve_listener

pytestmark = pytest.mark.anyio

RESOURCE = "http://127.0.0.1:8765/mcp"
ADMIN = "http://127.0.0.1:8765/admin/api"


@pytest.fixture(scope="module")
def issuer() -> Iterator[TokenIssuer]:
    with serve_issuer() as served:
        yield served


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    with serve_listener() as served:
        yield served


def _config(issuer: TokenIssuer, **section: Any) -> OAuthSection:
    fields: dict[str, Any] = {"issuer": issuer.url, "algorithms": ["RS256", "ES256", "EdDSA"],
                              "surfaces": ["mcp", "admin"], "min_refresh_seconds": 0, **section}  # fmt: skip
    return OAuthSection(resource=RESOURCE, admin_resource=ADMIN, issuers={"corp": IssuerSection(**fields)},
                        tool_scopes={"rooms_*": ["rooms"]})  # fmt: skip


@pytest.fixture
def verifier(issuer: TokenIssuer) -> TokenVerifier:
    return TokenVerifier(_config(issuer))


async def test_a_valid_token_is_its_person_with_roles_scopes_and_acting_client(
    verifier: TokenVerifier, issuer: TokenIssuer
) -> None:
    """Subject, org, roles, scopes and the client come from the claims; the key id is derived, never the token."""
    token = issuer.mint(RESOURCE, sub="Alice@ACME.example", scope="rooms orders")
    verdict = await verifier.verify(token, "mcp")
    assert verdict.principal is not None, verdict.reason
    principal = verdict.principal
    assert (principal.subject, principal.org, principal.kind) == ("alice@acme.example", "acme", KeyKind.AGENT)
    assert principal.roles == {"staff"} and principal.scopes == {"rooms", "orders"}
    assert principal.acting_client == "claude-desktop" and principal.actors == ()
    assert principal.key_id.startswith("tok_corp_") and token not in repr(principal)
    assert hash(principal) == hash((await verifier.verify(token, "mcp")).principal)


def _hs256_with_public_key(issuer: TokenIssuer) -> str:
    """A token whose HMAC secret is the issuer's public key (the classic RS256 -> HS256 confusion)."""
    public = issuer.current.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": issuer.current.kid}
    segments = [_b64(json.dumps(header).encode()), _b64(json.dumps(issuer.claims(RESOURCE)).encode())]
    signature = hmac.new(public, ".".join(segments).encode(), hashlib.sha256).digest()
    return ".".join([*segments, _b64(signature)])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _cases(issuer: TokenIssuer) -> dict[str, tuple[str, str]]:
    now = int(time.time())
    stranger = make_key("RS256")
    stranger.kid = issuer.current.kid  # a key the issuer never published, under a kid it did
    return {
        "expired": (issuer.mint(RESOURCE, exp=now - 120, iat=now - 600), "token expired"),
        "not yet valid": (issuer.mint(RESOURCE, nbf=now + 600), "token not yet valid"),
        "another audience": (issuer.mint("https://elsewhere.example/mcp"), "token is for another resource"),
        "admin audience on mcp": (issuer.mint(ADMIN), "token is for another resource"),
        "untrusted issuer": (issuer.mint(RESOURCE, iss="https://evil.example"), "untrusted issuer"),
        "bad signature": (issuer.mint(RESOURCE, key=stranger), "bad signature"),
        "unknown key": (issuer.mint(RESOURCE, headers={"kid": "no-such-kid"}), "unknown signing key"),
        "no expiry": (issuer.mint(RESOURCE, drop=("exp",)), "token lacks a required claim"),
        "no subject": (issuer.mint(RESOURCE, drop=("sub",)), "token lacks a required claim"),
        "no org": (issuer.mint(RESOURCE, drop=("org",)), "token lacks a subject or an org"),
        "alg none": (jwt.encode(issuer.claims(RESOURCE), None, algorithm="none"), "algorithm not allowed"),
        "HS256 with the public key": (_hs256_with_public_key(issuer), "algorithm not allowed"),
        "PS384 not configured": (
            issuer.mint(RESOURCE, key=_with_alg(issuer, "PS384")), "algorithm not allowed for this issuer"),
        "alg of another key type": (issuer.mint(RESOURCE, key=_with_alg(issuer, "ES256", keep_rsa=True)),
                                    "signing key does not fit the algorithm"),
        "malformed act": (issuer.mint(RESOURCE, act={"client": "x"}), "malformed act claim"),
    }  # fmt: skip


def _with_alg(issuer: TokenIssuer, alg: str, *, keep_rsa: bool = False) -> Any:
    key = make_key(alg)
    if keep_rsa:  # an EC signature, named by the kid of the issuer's RSA key
        key.kid = issuer.current.kid
    else:
        key.kid, key.private = issuer.current.kid, issuer.current.private
    return key


CASES = [
    "expired", "not yet valid", "another audience", "admin audience on mcp", "untrusted issuer", "bad signature",
    "unknown key", "no expiry", "no subject", "no org", "alg none", "HS256 with the public key",
    "PS384 not configured", "alg of another key type", "malformed act",
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
async def test_each_invalid_token_is_refused_with_its_reason(
    verifier: TokenVerifier, issuer: TokenIssuer, case: str
) -> None:
    """Signature, audience, issuer, expiry, not-before, unknown key, wrong or forbidden alg: refused, named."""
    token, reason = _cases(issuer)[case]
    verdict = await verifier.verify(token, "mcp")
    assert verdict.principal is None and verdict.reason == reason


@pytest.mark.parametrize("header", ["jku", "x5u"])
async def test_a_key_url_in_the_token_is_never_contacted(
    verifier: TokenVerifier, issuer: TokenIssuer, listener: Listener, header: str
) -> None:
    """A token signed by an attacker's key, naming the attacker's key set, is refused without a request to it."""
    attacker = make_key("RS256")
    token = issuer.mint(RESOURCE, key=attacker, headers={header: f"{listener.url}/jwks.json"})
    verdict = await verifier.verify(token, "mcp")
    assert verdict.principal is None and verdict.reason == "token names its own key or critical extensions"
    # Even accepted as a header, the kid alone never sends the gateway to the named URL.
    plain = issuer.mint(RESOURCE, key=attacker)
    assert (await verifier.verify(plain, "mcp")).principal is None
    assert sum(listener.hits.values()) == 0


async def test_a_rotated_key_verifies_after_one_fetch_and_a_retired_one_stops(issuer: TokenIssuer) -> None:
    """A token of a new kid makes the source fetch the key set again; a retired key then fails to verify."""
    tokens = TokenVerifier(_config(issuer, jwks_url=f"{issuer.url}/jwks", max_key_age_seconds=3600))
    original = list(issuer.keys)
    try:
        old = issuer.current
        assert (await tokens.verify(issuer.mint(RESOURCE), "mcp")).principal is not None
        before = issuer.hits["/jwks"]
        new = issuer.rotate("ES256")
        assert (await tokens.verify(issuer.mint(RESOURCE, key=new), "mcp")).principal is not None
        assert issuer.hits["/jwks"] == before + 1
        assert (await tokens.verify(issuer.mint(RESOURCE, key=old), "mcp")).principal is not None  # still cached
        issuer.retire(old)
        fresh = TokenVerifier(_config(issuer, jwks_url=f"{issuer.url}/jwks"))
        verdict = await fresh.verify(issuer.mint(RESOURCE, key=old), "mcp")
        assert verdict.principal is None and verdict.reason == "unknown signing key"
    finally:
        issuer.keys[:] = original  # the module's issuer signs with its RSA key again


async def test_a_flood_of_made_up_kids_fetches_the_key_set_at_most_once_more(issuer: TokenIssuer) -> None:
    """With a refresh interval, fifty unknown kids (concurrently) cost the issuer one fetch after the first."""
    tokens = TokenVerifier(_config(issuer, jwks_url=f"{issuer.url}/jwks", min_refresh_seconds=300))
    assert (await tokens.verify(issuer.mint(RESOURCE), "mcp")).principal is not None
    before = issuer.hits["/jwks"]
    made_up = [issuer.mint(RESOURCE, headers={"kid": secrets.token_hex(8)}) for _ in range(50)]
    verdicts = await asyncio.gather(*(tokens.verify(token, "mcp") for token in made_up))
    assert all(v.principal is None and v.reason == "unknown signing key" for v in verdicts)
    assert issuer.hits["/jwks"] - before <= 1


async def test_keys_are_found_through_the_issuers_metadata(issuer: TokenIssuer) -> None:
    """With no jwks_url, the key set is the one the issuer's RFC 8414 metadata names."""
    before = issuer.hits["/.well-known/oauth-authorization-server"]
    tokens = TokenVerifier(_config(issuer))
    assert (await tokens.verify(issuer.mint(RESOURCE), "mcp")).principal is not None
    assert issuer.hits["/.well-known/oauth-authorization-server"] == before + 1


async def test_metadata_naming_another_issuer_is_not_trusted_for_keys(issuer: TokenIssuer) -> None:
    """RFC 8414 section 3.3: metadata whose ``issuer`` is not the configured one gives no keys at all."""
    issuer.metadata_issuer = "https://login.example"
    tokens = TokenVerifier(_config(issuer))
    try:
        verdict = await tokens.verify(issuer.mint(RESOURCE), "mcp")
        assert verdict.principal is None and verdict.reason == "unknown signing key"
    finally:
        issuer.metadata_issuer = None


async def test_keys_older_than_their_age_are_fetched_again(issuer: TokenIssuer) -> None:
    """Past `max_age_seconds` (on the source's own clock) the key set is fetched again, so a withdrawn key stops."""
    now = [1000.0]
    source = JwksSource(issuer=issuer.url, jwks_url=f"{issuer.url}/jwks", min_refresh_seconds=60,
                        max_age_seconds=600, clock=lambda: now[0])  # fmt: skip
    tokens = TokenVerifier(_config(issuer), sources={"corp": source})
    original = list(issuer.keys)
    try:
        withdrawn = issuer.rotate("RS256")
        assert (await tokens.verify(issuer.mint(RESOURCE, key=withdrawn), "mcp")).principal is not None
        issuer.retire(withdrawn)
        now[0] += 599
        assert (await tokens.verify(issuer.mint(RESOURCE, key=withdrawn), "mcp")).principal is not None
        now[0] += 2
        verdict = await tokens.verify(issuer.mint(RESOURCE, key=withdrawn), "mcp")
        assert verdict.principal is None and verdict.reason == "unknown signing key"
    finally:
        issuer.keys[:] = original


async def test_a_delegated_token_carries_its_actor_chain_and_never_opens_the_admin_api(
    verifier: TokenVerifier, issuer: TokenIssuer
) -> None:
    """``act`` (RFC 8693): the person is ``sub``, the nearest actor is the acting client; admins decide themselves."""
    act = {"sub": "agent-7", "act": {"sub": "orchestrator"}}
    verdict = await verifier.verify(issuer.mint(RESOURCE, act=act), "mcp")
    assert verdict.principal is not None
    assert verdict.principal.subject == "alice@acme.example"
    assert verdict.principal.actors == ("agent-7", "orchestrator") and verdict.principal.acting_client == "agent-7"
    admin = await verifier.verify(issuer.mint(ADMIN, act=act, roles=["approver"]), "admin")
    assert admin.principal is None and admin.reason == "a delegated token does not open the admin API"
    direct = await verifier.verify(issuer.mint(ADMIN, roles=["approver"]), "admin")
    assert direct.principal is not None and direct.principal.kind is KeyKind.ADMIN
    assert direct.principal.roles == {"approver"}


async def test_roles_come_from_scopes_through_the_map(issuer: TokenIssuer) -> None:
    """`scope_roles` turns granted scopes into roles, beside (or instead of) a roles claim."""
    tokens = TokenVerifier(_config(issuer, roles_claim=None, scope_roles={"cards:approve": ["approver"]}))
    verdict = await tokens.verify(issuer.mint(ADMIN, scope="cards:approve", roles=["root"]), "admin")
    assert verdict.principal is not None and verdict.principal.roles == {"approver"}


def test_only_jwt_shaped_credentials_go_to_the_verifier() -> None:
    """An API key (``csk_...``) is never mistaken for a token."""
    assert looks_like_jwt("eyJh.eyJi.c2ln") and looks_like_jwt("a.b.")
    assert not looks_like_jwt("csk_agent_" + secrets.token_urlsafe(32)) and not looks_like_jwt("a.b")
    assert not looks_like_jwt("a.b.c.d") and not looks_like_jwt("a.b.c" + "d" * 9000)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part=st.integers(0, 2), index=st.integers(0, 10_000), flip=st.integers(1, 255))
def test_any_tampered_byte_is_refused(issuer: TokenIssuer, part: int, index: int, flip: int) -> None:
    """One byte of header, claims or signature changed (the token re-encoded): never a principal."""
    token = issuer.mint(RESOURCE)
    segments = token.split(".")
    raw = bytearray(base64.urlsafe_b64decode(segments[part] + "=" * (-len(segments[part]) % 4)))
    raw[index % len(raw)] ^= flip
    segments[part] = _b64(bytes(raw))

    async def verify() -> Any:
        tokens = TokenVerifier(_config(issuer, jwks_url=f"{issuer.url}/jwks"))
        return await tokens.verify(".".join(segments), "mcp")

    assert asyncio.run(verify()).principal is None
