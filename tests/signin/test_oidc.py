"""The console's OpenID client against a provider that answers what each test chooses: every ID token check refuses.

The provider is a real HTTP service (`tests.support.token_issuer` keys and tokens, served by uvicorn) whose
token endpoint answers the ID token a test minted: one for another audience, without this sign-in's nonce,
signed with a key the provider does not publish, with an HMAC, expired, or without an org. A well-formed one
signs the approver in, normalised.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backends.serve import serve_app_in_thread
from gateway.config.console import OidcSection
from gateway.signin.oidc import OidcClient, pkce_pair
from tests.support.token_issuer import TokenIssuer, make_key

pytestmark = pytest.mark.anyio

CLIENT = "console"
NONCE = "n-0123456789"


class Provider:
    def __init__(self) -> None:
        self.issuer = TokenIssuer()
        self.id_token = ""
        self.forms: list[dict[str, list[str]]] = []
        self.authorizations: list[str] = []

    def app(self) -> Starlette:
        async def metadata(request: Request) -> Response:
            url = self.issuer.url
            return JSONResponse({"issuer": url, "authorization_endpoint": f"{url}/auth",
                                 "token_endpoint": f"{url}/token", "jwks_uri": f"{url}/jwks"})  # fmt: skip

        async def token(request: Request) -> Response:
            self.forms.append(parse_qs((await request.body()).decode()))
            self.authorizations.append(request.headers.get("authorization", ""))
            return JSONResponse({"access_token": "opaque", "token_type": "Bearer", "id_token": self.id_token})

        routes = [Route("/.well-known/openid-configuration", metadata), Route("/token", token, methods=["POST"])]
        return Starlette(routes=[*routes, *self.issuer.app.routes])

    def id(self, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        defaults = {"nonce": NONCE, "sub": "Approver@ACME.example", "roles": ["approver"]}
        return self.issuer.mint(CLIENT, headers=headers, **{**defaults, **claims})


@pytest.fixture(name="provider", scope="module")
def running_provider() -> Iterator[Provider]:
    provider = Provider()
    with serve_app_in_thread(provider.app()) as url:
        provider.issuer.url = url
        yield provider


def client(provider: Provider) -> OidcClient:
    config = OidcSection(issuer=provider.issuer.url, client_id=CLIENT, client_secret_env="X")
    return OidcClient(config, client_secret="s3cret:&", redirect_uri="http://127.0.0.1:1/admin/signin/callback")


async def test_a_well_formed_id_token_signs_the_approver_in_and_the_exchange_carries_pkce(provider: Provider) -> None:
    provider.id_token = provider.id()
    oidc = client(provider)
    verifier, challenge = pkce_pair()
    url = await oidc.authorization_url(state="st", nonce=NONCE, challenge=challenge)
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"] == [challenge]
    assert base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode() == challenge
    done = await oidc.finish(code="c", verifier=verifier, nonce=NONCE)
    assert done.principal is not None, done.reason
    assert (done.principal.subject, done.principal.org, done.principal.roles) == (
        "approver@acme.example",
        "acme",
        frozenset({"approver"}),
    )
    assert provider.forms[-1]["code_verifier"] == [verifier]
    expected = base64.b64encode(b"console:s3cret%3A%26").decode()
    assert provider.authorizations[-1] == f"Basic {expected}"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("another audience", "InvalidAudienceError"),
        ("another nonce", "nonce"),
        ("no nonce", "nonce"),
        ("unpublished key", "unknown key"),
        ("hmac", "algorithm not allowed"),
        ("expired", "ExpiredSignatureError"),
        ("no org", "lacks a subject or an org"),
        ("names its key", "names its own key"),
    ],
)
async def test_an_id_token_that_fails_a_check_signs_nobody_in(provider: Provider, token: str, reason: str) -> None:
    stranger = make_key("RS256")
    minted = {
        "another audience": lambda: provider.issuer.mint("another-client", nonce=NONCE),
        "another nonce": lambda: provider.id(nonce="other"),
        "no nonce": lambda: provider.issuer.mint(CLIENT),
        "unpublished key": lambda: provider.issuer.mint(CLIENT, key=stranger, nonce=NONCE),
        "hmac": lambda: jwt.encode(provider.issuer.claims(CLIENT, nonce=NONCE), "k" * 32, algorithm="HS256"),
        "expired": lambda: provider.id(exp=int(time.time()) - 600),
        "no org": lambda: provider.issuer.mint(CLIENT, nonce=NONCE, drop=("org",)),
        "names its key": lambda: provider.id(headers={"jku": "http://127.0.0.1:9/keys"}),
    }[token]
    provider.id_token = minted()
    done = await client(provider).finish(code="c", verifier="v", nonce=NONCE)
    assert done.principal is None and reason in done.reason
