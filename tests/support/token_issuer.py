"""A local OAuth authorization server for tests: real keys, real metadata, real HTTP.

`TokenIssuer` is a Starlette app (served by uvicorn through `serve_app_in_thread`) that publishes
RFC 8414 metadata at ``/.well-known/oauth-authorization-server`` and its public keys at ``/jwks``,
and mints access tokens with private keys made by `cryptography` (RSA, EC P-256, Ed25519). It
counts every request per path, so a test can say how often the gateway fetched keys. `rotate`
makes a new key current; the old one stays published until `retire` withdraws it.

`Listener` is a server that only counts what reaches it: the "attacker" a ``jku`` or ``x5u``
header points at, which the gateway must never contact.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backends.serve import serve_app_in_thread

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: PrivateKey

    def public_jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
        elif isinstance(public, ec.EllipticCurvePublicKey):
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig"}


def make_key(alg: str = "RS256") -> SigningKey:
    """A fresh private key for `alg` (RS*/PS*: RSA 2048, ES256: P-256, EdDSA: Ed25519)."""
    private: PrivateKey
    if alg.startswith(("RS", "PS")):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = ed25519.Ed25519PrivateKey.generate()
    return SigningKey(kid=f"k-{secrets.token_hex(4)}", alg=alg, private=private)


@dataclass
class TokenIssuer:
    """The issuer's state; `app` serves it. `url` is set once it is served (see `serve_issuer`)."""

    url: str = ""
    keys: list[SigningKey] = field(default_factory=lambda: [make_key("RS256")])
    hits: Counter[str] = field(default_factory=Counter)
    metadata_issuer: str | None = None
    """What the metadata says the issuer is; None: `url` (a test sets another to impersonate one)."""
    clients: dict[str, str] = field(default_factory=dict)
    """``client_id -> client_secret`` that ``/token`` grants client-credentials tokens to."""

    @property
    def current(self) -> SigningKey:
        return self.keys[-1]

    def rotate(self, alg: str = "RS256") -> SigningKey:
        key = make_key(alg)
        self.keys.append(key)
        return key

    def retire(self, key: SigningKey) -> None:
        self.keys.remove(key)

    def claims(self, audience: str, **claims: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {"iss": self.url, "aud": audience, "sub": "alice@acme.example", "org": "acme", "roles": ["staff"],
                "iat": now, "exp": now + 300, "client_id": "claude-desktop"}  # fmt: skip
        return {**base, **claims}

    def mint(
        self,
        audience: str,
        *,
        key: SigningKey | None = None,
        headers: Mapping[str, Any] | None = None,
        drop: tuple[str, ...] = (),
        **claims: Any,
    ) -> str:
        """A token for `audience` signed with `key` (default: the current key), its claims overridden by `claims`."""
        key = key or self.current
        payload = {k: v for k, v in self.claims(audience, **claims).items() if k not in drop}
        return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})

    @property
    def app(self) -> Starlette:
        async def metadata(request: Request) -> Response:
            self.hits[request.url.path] += 1
            return JSONResponse({"issuer": self.metadata_issuer or self.url, "jwks_uri": f"{self.url}/jwks",
                                 "response_types_supported": ["code"]})  # fmt: skip

        async def jwks(request: Request) -> Response:
            self.hits[request.url.path] += 1
            return JSONResponse({"keys": [key.public_jwk() for key in self.keys]})

        async def token(request: Request) -> Response:
            """RFC 6749 4.4: client credentials in HTTP Basic, ``grant_type=client_credentials``."""
            self.hits[request.url.path] += 1
            form = await request.form()
            scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
            client_id, _, secret = base64.b64decode(encoded or b"").decode(errors="replace").partition(":")
            if scheme != "Basic" or self.clients.get(client_id) != secret or secret == "":
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            if form.get("grant_type") != "client_credentials":
                return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
            access = self.mint(client_id, sub=client_id, scope=str(form.get("scope", "")))
            return JSONResponse({"access_token": access, "token_type": "Bearer", "expires_in": 3600})

        return Starlette(routes=[
            Route("/.well-known/oauth-authorization-server", metadata),
            Route("/jwks", jwks),
            Route("/token", token, methods=["POST"]),
        ])  # fmt: skip


@contextmanager
def serve_issuer() -> Iterator[TokenIssuer]:
    issuer = TokenIssuer()
    with serve_app_in_thread(issuer.app) as url:
        issuer.url = url
        yield issuer


@dataclass
class Listener:
    url: str = ""
    hits: Counter[str] = field(default_factory=Counter)


@contextmanager
def serve_listener() -> Iterator[Listener]:
    """A server that answers every path with a key set of its own and counts each request."""
    listener = Listener()
    attacker_key = make_key("RS256")

    async def anything(request: Request) -> Response:
        listener.hits[request.url.path] += 1
        return JSONResponse({"keys": [attacker_key.public_jwk()]})

    app = Starlette(routes=[Route("/{path:path}", anything)])
    with serve_app_in_thread(app) as url:
        listener.url = url
        yield listener
