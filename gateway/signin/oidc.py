"""The console's OpenID Connect client: the authorization code flow with PKCE, and the ID token it ends with.

Who calls it: `gateway.signin.routes`, to send an approver to the provider (`authorization_url`)
and to finish the sign-in when the provider sends them back (`finish`). What it asks of the
provider: its metadata (``<issuer>/.well-known/openid-configuration``, whose ``issuer`` must be the
configured one), its token endpoint, and its keys (`gateway.auth.jwks.JwksSource`, which never
fetches a URL a token names). It never keeps a token: the ID token goes back to the caller, which
keeps it only as the hint of a sign-out at the provider.

The ID token is checked as an access token is (`gateway.auth.tokens`: an asymmetric algorithm the
configuration allows, no key named by the token, signature, ``exp``, ``iss``) and more: its
audience is the client id, its ``nonce`` is the one this sign-in sent, and its claims map to the
admin exactly as ``[oauth.issuers]`` maps an admin's token (`principal_from_claims`): subject
normalised, org and roles from the configured claims.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import jwt

from gateway.auth.jwks import MAX_JWKS_BYTES, JwksSource
from gateway.auth.tokens import principal_from_claims
from gateway.config.console import OidcSection
from gateway.principal import Principal

__all__ = ["OidcClient", "SignedIn", "pkce_pair"]

FETCH_TIMEOUT_SECONDS = 10.0


def pkce_pair() -> tuple[str, str]:
    """A fresh PKCE code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


@dataclass(frozen=True, slots=True)
class SignedIn:
    """The end of a sign-in: the admin, or None and why not (for the audit and the page)."""

    principal: Principal | None
    reason: str = ""
    id_token: str = ""


class OidcClient:
    """One relying party (the console) at one OpenID provider."""

    def __init__(self, config: OidcSection, *, client_secret: str | None, redirect_uri: str) -> None:
        self.config = config
        self._secret = client_secret
        self.redirect_uri = redirect_uri
        self._metadata: dict[str, Any] | None = None
        self._keys: JwksSource | None = None

    async def metadata(self) -> Mapping[str, Any]:
        """The provider's metadata, fetched once.

        Raises:
            ValueError, aiohttp.ClientError: unreachable, or not the configured issuer's.
        """
        if self._metadata is None:
            url = f"{self.config.issuer.rstrip('/')}/.well-known/openid-configuration"
            document = await _get_json(url)
            if document.get("issuer") != self.config.issuer:
                raise ValueError(f"{url} names issuer {document.get('issuer')!r}")
            for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(document.get(name), str):
                    raise ValueError(f"{url} has no {name}")
            self._metadata = document
            self._keys = JwksSource(
                issuer=self.config.issuer,
                jwks_url=str(document["jwks_uri"]),
                min_refresh_seconds=30.0,
                max_age_seconds=3600.0,
            )
        return self._metadata

    async def authorization_url(self, *, state: str, nonce: str, challenge: str) -> str:
        """Where to send the approver: the provider's authorization endpoint with this sign-in's parameters."""
        metadata = await self.metadata()
        query = {
            "response_type": "code",
            "client_id": self.config.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": " ".join(self.config.scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        return f"{metadata['authorization_endpoint']}?{urlencode(query)}"

    async def end_session_url(self, *, id_token: str, after: str) -> str | None:
        """Where a sign-out continues at the provider (RP-initiated logout), or None when it has no such endpoint."""
        if not self.config.logout_at_provider:
            return None
        endpoint = (await self.metadata()).get("end_session_endpoint")
        if not isinstance(endpoint, str):
            return None
        query = {"client_id": self.config.client_id, "post_logout_redirect_uri": after}
        if id_token:
            query["id_token_hint"] = id_token
        return f"{endpoint}?{urlencode(query)}"

    async def finish(self, *, code: str, verifier: str, nonce: str) -> SignedIn:
        """Exchange `code` (with the PKCE `verifier`) and check the ID token. Never raises for the provider's faults."""
        try:
            metadata = await self.metadata()
            tokens = await self._exchange(str(metadata["token_endpoint"]), code, verifier)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            return SignedIn(None, f"the provider's token endpoint failed: {str(error)[:200]}")
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            return SignedIn(None, "the provider sent no ID token")
        claims, reason = await self._verified(id_token)
        if claims is None:
            return SignedIn(None, reason)
        if not isinstance(claims.get("nonce"), str) or not secrets.compare_digest(claims["nonce"], nonce):
            return SignedIn(None, "the ID token is not for this sign-in (nonce)")
        principal, refusal = principal_from_claims("console", self.config.claims(), claims, "admin")
        if principal is None:
            return SignedIn(None, refusal)
        return SignedIn(principal, "", id_token)

    async def _exchange(self, endpoint: str, code: str, verifier: str) -> Mapping[str, Any]:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": verifier,
            "client_id": self.config.client_id,
        }
        headers = {"accept": "application/json"}
        if self._secret is not None:  # client_secret_basic: each part form-encoded first (RFC 6749 section 2.3.1)
            pair = f"{quote(self.config.client_id, safe='')}:{quote(self._secret, safe='')}"
            headers["authorization"] = f"Basic {base64.b64encode(pair.encode()).decode()}"
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(endpoint, data=form, headers=headers, allow_redirects=False) as response,
        ):
            body = await response.content.read(MAX_JWKS_BYTES + 1)
            if response.status != 200:
                raise ValueError(f"token endpoint answered {response.status}")
        document = json.loads(body)
        if not isinstance(document, dict):
            raise ValueError("token endpoint did not send a JSON object")
        return document

    async def _verified(self, id_token: str) -> tuple[dict[str, Any] | None, str]:
        try:
            header = jwt.get_unverified_header(id_token)
        except jwt.InvalidTokenError:
            return None, "malformed ID token"
        alg = header.get("alg")
        if alg not in self.config.algorithms:
            return None, "ID token algorithm not allowed"
        if any(name in header for name in ("jku", "x5u", "jwk", "x5c", "crit")):
            return None, "ID token names its own key or critical extensions"
        kid = header.get("kid")
        if self._keys is None or (kid is not None and not isinstance(kid, str)):
            return None, "malformed ID token"
        jwk = await self._keys.key(kid)
        if jwk is None:
            return None, "ID token signed with an unknown key"
        try:
            key = jwt.PyJWK(dict(jwk), algorithm=alg)
            claims: dict[str, Any] = jwt.decode(
                id_token,
                key,
                algorithms=[alg],
                audience=self.config.client_id,
                issuer=self.config.issuer,
                leeway=self.config.clock_skew_seconds,
                options={"require": ["exp", "iat", "iss", "aud", self.config.subject_claim]},
            )
        except (jwt.InvalidTokenError, jwt.PyJWKError) as error:
            return None, f"ID token refused: {type(error).__name__}"
        return claims, ""


async def _get_json(url: str) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url, allow_redirects=False) as response:
        if response.status != 200:
            raise ValueError(f"{url} answered {response.status}")
        body = await response.content.read(MAX_JWKS_BYTES + 1)
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError(f"{url} did not send a JSON object")
    return document
