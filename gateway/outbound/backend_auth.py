"""How the gateway proves itself to a backend: the usual kinds of API credential, each from a secret reference.

Who uses it: `gateway.registry.live` builds one per registered adapter from its manifest's ``credential``
(the secret's value read from the gateway's own secrets, never from an agent), and the backend client
(`gateway.outbound.backend_client.AiohttpUpstream`) asks it, before each request, for the headers and
query parameters to add, and after a 401 whether to try once more with others. A bearer token, an API key in a
header or in the query, HTTP Basic, and OAuth 2.0 client credentials, whose access token the gateway fetches from
the token endpoint itself (`gateway.outbound.client_credentials`, the cache the fronted MCP servers' OAuth client
uses too), reuses until shortly before it expires, and replaces once when the backend answers 401. Nothing here
is shown to a model or written to the audit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from gateway.outbound.client_credentials import (
    TOKEN_TIMEOUT_SECONDS,
    UNREACHED,
    PostForm,
    TokenCache,
    TokenRequest,
    basic_authorization,
)

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

    async def renewed(
        self, session: aiohttp.ClientSession, refused: Credentials, *, service: str
    ) -> Credentials | None:
        """Other credentials to try once after the backend answered 401 to `refused` (an OAuth token revoked or
        rotated before it expired); None when there are none (a fixed key: the refusal stands).

        Raises:
            UpstreamUnavailableError: (``sent=False``) as `credentials`.
        """
        ...


class _Fixed:
    """A credential that is what it is: a 401 to it is not answered by another."""

    __slots__ = ()

    async def renewed(
        self, session: aiohttp.ClientSession, refused: Credentials, *, service: str
    ) -> Credentials | None:
        return None


@dataclass(frozen=True, slots=True)
class BearerToken(_Fixed):
    token: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {"authorization": f"Bearer {self.token}"}, {}


@dataclass(frozen=True, slots=True)
class ApiKeyHeader(_Fixed):
    header: str
    key: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {self.header: self.key}, {}


@dataclass(frozen=True, slots=True)
class ApiKeyQuery(_Fixed):
    parameter: str
    key: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {}, {self.parameter: self.key}


@dataclass(frozen=True, slots=True)
class BasicAuth(_Fixed):
    username: str
    password: str = field(repr=False)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return {"authorization": basic_authorization(self.username, self.password)}, {}


class ClientCredentials(_Fixed):
    """OAuth 2.0 client credentials (RFC 6749 4.4) through the gateway's one client-credentials cache
    (`gateway.outbound.client_credentials`): fetched over the backend client's own aiohttp session, reused until
    shortly before it expires, and replaced once when the backend answers 401."""

    __slots__ = ("_tokens",)

    def __init__(self, token_url: str, client_id: str, client_secret: str, *, scope: str | None = None) -> None:
        self._tokens = TokenCache(token_url, client_id, client_secret, scope=scope)

    def __repr__(self) -> str:
        return repr(self._tokens).replace("TokenCache", "ClientCredentials", 1)

    async def credentials(self, session: aiohttp.ClientSession, *, service: str) -> Credentials:
        return _bearer(await self._tokens.token(_poster(session), service=service))

    async def renewed(
        self, session: aiohttp.ClientSession, refused: Credentials, *, service: str
    ) -> Credentials | None:
        stale = refused[0].get("authorization", "").removeprefix("Bearer ")
        return _bearer(await self._tokens.token(_poster(session), service=service, stale=stale))


def _bearer(token: str) -> Credentials:
    return {"authorization": f"Bearer {token}"}, {}


def _poster(session: aiohttp.ClientSession) -> PostForm:
    async def post(request: TokenRequest) -> tuple[int, Any]:
        try:
            async with session.post(
                request.url,
                data=dict(request.form),
                headers=dict(request.headers),
                timeout=aiohttp.ClientTimeout(total=TOKEN_TIMEOUT_SECONDS),
                allow_redirects=False,
            ) as response:
                return response.status, await response.json(content_type=None) if response.status == 200 else None
        except (aiohttp.ClientError, ValueError):
            return UNREACHED, None

    return post
