"""How the gateway proves itself to a backend: the usual kinds of API credential, each from a secret reference.

Who uses it: `gateway.registry.live` builds one per registered adapter from its manifest's ``credential``
(the secret's value read from the gateway's own secrets, never from an agent), and the backend client
(`gateway.outbound.backend_client.AiohttpUpstream`) asks it, before each request, for the headers and
query parameters to add. A bearer token, an API key in a header or in the query, HTTP Basic, and OAuth 2.0
client credentials, whose access token the gateway fetches from the token endpoint itself and reuses until
shortly before it expires. Nothing here is shown to a model or written to the audit.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

from gateway.errors import UpstreamUnavailableError

__all__ = ["ApiKeyHeader", "ApiKeyQuery", "BackendAuth", "BasicAuth", "BearerToken", "ClientCredentials"]

Credentials = tuple[Mapping[str, str], Mapping[str, str]]
"""``(headers, query parameters)`` to add to a request."""


class BackendAuth(Protocol):
    """What the backend client asks before each request."""

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        """The headers and query parameters proving the gateway to the backend.

        Raises:
            UpstreamUnavailableError: (``sent=False``) they could not be had (an OAuth token endpoint failed).
        """
        ...


@dataclass(frozen=True, slots=True)
class BearerToken:
    token: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {"authorization": f"Bearer {self.token}"}, {}


@dataclass(frozen=True, slots=True)
class ApiKeyHeader:
    header: str
    key: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {self.header: self.key}, {}


@dataclass(frozen=True, slots=True)
class ApiKeyQuery:
    parameter: str
    key: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {}, {self.parameter: self.key}


@dataclass(frozen=True, slots=True)
class BasicAuth:
    username: str
    password: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {"authorization": _basic(self.username, self.password)}, {}


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


EARLY_REFRESH_SECONDS = 30.0
"""A token is fetched again this long before the endpoint said it expires, so none is sent stale."""
DEFAULT_TOKEN_SECONDS = 300.0
"""How long a token is reused when the endpoint does not say (``expires_in`` missing)."""


class ClientCredentials:
    """OAuth 2.0 client credentials (RFC 6749 4.4): the token endpoint is asked with the client's id and
    secret (HTTP Basic), once per token lifetime; concurrent requests wait for the same fetch."""

    def __init__(self, token_url: str, client_id: str, client_secret: str, *, scope: str | None = None) -> None:
        self._url = token_url
        self._client_id = client_id
        self._secret = client_secret
        self._scope = scope
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"ClientCredentials(token_url={self._url!r}, client_id={self._client_id!r})"

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        async with self._lock:
            if self._token is None or time.monotonic() >= self._expires:
                self._token, lifetime = await self._fetch(session, service)
                self._expires = time.monotonic() + max(0.0, lifetime - EARLY_REFRESH_SECONDS)
        return {"authorization": f"Bearer {self._token}"}, {}

    async def _fetch(self, session: aiohttp.ClientSession, service: str) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"} | ({"scope": self._scope} if self._scope else {})
        try:
            async with session.post(
                self._url,
                data=form,
                headers={"accept": "application/json", "authorization": _basic(self._client_id, self._secret)},
                timeout=aiohttp.ClientTimeout(total=10.0),
                allow_redirects=False,
            ) as response:
                body = await response.json(content_type=None) if response.status == 200 else {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise UpstreamUnavailableError(
                "the backend's token endpoint failed", service=service, sent=False
            ) from error
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise UpstreamUnavailableError("the backend's token endpoint gave no token", service=service, sent=False)
        lifetime = body.get("expires_in")
        return token, float(lifetime) if isinstance(lifetime, int | float) and lifetime > 0 else DEFAULT_TOKEN_SECONDS
