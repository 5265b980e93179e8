"""The gateway's own credentials toward an HTTP upstream: a fixed bearer token, or an OAuth access token it fetches.

Who uses it: `gateway.upstreams.connection`, for the HTTP client of each session. `gateway_auth` answers the
`httpx2.Auth` that signs every request to the upstream; nothing of the agent's request ever reaches it, so the
agent's token cannot be forwarded. With ``oauth`` (`OAuthClientSection`), the token is fetched from the token
endpoint with the client credentials grant and cached for the connection's life by the gateway's one
client-credentials cache (`gateway.outbound.client_credentials`: expiry with a margin, one fetch at a time, fetched
again once when the upstream answers 401); this module only sends its token request and signs requests, on httpx2.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any

import httpx2

from gateway.config.upstreams import OAuthClientSection, UpstreamSection
from gateway.errors import ConfigError
from gateway.outbound.client_credentials import TOKEN_TIMEOUT_SECONDS, UNREACHED, TokenCache, TokenRequest

__all__ = ["OAuthClientCredentials", "gateway_auth"]


def gateway_auth(name: str, section: UpstreamSection, secrets: Mapping[str, str]) -> httpx2.Auth | None:
    """How the gateway signs its requests to the upstream `name` (None: it sends no credentials).

    Raises:
        ConfigError: a named secret is not set.
    """
    if section.token_env:
        token = secrets.get(section.token_env)
        if not token:
            raise ConfigError(f"upstreams.{name}.token_env: {section.token_env} is not set")
        return _Bearer(token)
    if section.oauth is not None:
        secret = secrets.get(section.oauth.client_secret_env)
        if not secret:
            raise ConfigError(f"upstreams.{name}.oauth.client_secret_env: {section.oauth.client_secret_env} is not set")
        return OAuthClientCredentials(name, section.oauth, secret)
    return None


class _Bearer(httpx2.Auth):
    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


class OAuthClientCredentials(httpx2.Auth):
    """The client credentials grant's access token (`gateway.outbound.client_credentials`), sent as the bearer
    token; fetched over httpx2, and replaced once when the upstream answers 401."""

    def __init__(self, name: str, client: OAuthClientSection, secret: str) -> None:
        self._name = name
        self.tokens = TokenCache(
            client.token_url, client.client_id, secret, scope=client.scope, resource=client.resource
        )

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.tokens.token(_post, service=self._name)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            # Revoked or rotated before it expired: one new token, one more try.
            renewed = await self.tokens.token(_post, service=self._name, stale=token)
            request.headers["Authorization"] = f"Bearer {renewed}"
            yield request


async def _post(request: TokenRequest) -> tuple[int, Any]:
    try:
        async with httpx2.AsyncClient(timeout=TOKEN_TIMEOUT_SECONDS, follow_redirects=False) as http:
            answer = await http.post(request.url, data=dict(request.form), headers=dict(request.headers))
            return answer.status_code, answer.json() if answer.status_code == 200 else None
    except (httpx2.HTTPError, ValueError):
        return UNREACHED, None
