"""The gateway's own credentials toward an HTTP upstream: a fixed bearer token, or an OAuth access token it fetches.

Who uses it: `gateway.upstreams.connection`, for the HTTP client of each session. `gateway_auth` answers the
`httpx2.Auth` that signs every request to the upstream; nothing of the agent's request ever reaches it, so the
agent's token cannot be forwarded. With ``oauth`` (`OAuthClientSection`), the token is fetched from the token
endpoint with the client credentials grant (client id and secret as HTTP Basic), cached for the connection's life
until `_EARLY_SECONDS` before it expires, and fetched again once when the upstream answers 401 (revoked or rotated).
One fetch at a time: concurrent requests wait for it rather than each asking the authorization server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Generator, Mapping

import anyio
import httpx2

from gateway.config.upstreams import OAuthClientSection, UpstreamSection
from gateway.errors import ConfigError, UpstreamUnavailableError

__all__ = ["OAuthClientCredentials", "gateway_auth"]

logger = logging.getLogger(__name__)

_EARLY_SECONDS = 30.0
_TOKEN_TIMEOUT_SECONDS = 10.0


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
    """A cached access token from the client credentials grant, sent as the bearer token."""

    def __init__(self, name: str, client: OAuthClientSection, secret: str) -> None:
        self._name = name
        self._client = client
        self._secret = secret
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = anyio.Lock()
        self.fetches = 0
        """How many tokens were fetched, for tests and the log."""

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self._current(stale=None)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            # Revoked or rotated before it expired: one new token, one more try.
            request.headers["Authorization"] = f"Bearer {await self._current(stale=token)}"
            yield request

    async def _current(self, *, stale: str | None) -> str:
        async with self._lock:
            token = self._token
            if token is None or token == stale or time.monotonic() >= self._expires_at:
                token, self._expires_at = await self._fetch()
                self._token = token
            return token

    async def _fetch(self) -> tuple[str, float]:
        client = self._client
        form = {"grant_type": "client_credentials"}
        if client.scope:
            form["scope"] = client.scope
        if client.resource:
            form["resource"] = client.resource
        try:
            async with httpx2.AsyncClient(timeout=_TOKEN_TIMEOUT_SECONDS) as http:
                answer = await http.post(client.token_url, data=form, auth=(client.client_id, self._secret))
            body = answer.json() if answer.status_code == 200 else {}
        except (httpx2.HTTPError, ValueError) as error:
            raise UpstreamUnavailableError(
                f"upstream {self._name}: no access token from its authorization server", service=self._name, sent=False
            ) from error
        token, lifetime = body.get("access_token"), body.get("expires_in", 300)
        if not isinstance(token, str) or not token or str(body.get("token_type", "")).lower() != "bearer":
            status = answer.status_code
            logger.warning("upstream %s: token endpoint answered %s without a bearer token", self._name, status)
            raise UpstreamUnavailableError(
                f"upstream {self._name}: its authorization server gave no bearer token", service=self._name, sent=False
            )
        self.fetches += 1
        seconds = float(lifetime) if isinstance(lifetime, int | float) and lifetime > 0 else 300.0
        return token, time.monotonic() + max(0.0, seconds - _EARLY_SECONDS)
