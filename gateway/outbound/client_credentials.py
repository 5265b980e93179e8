"""OAuth 2.0 client credentials (RFC 6749, section 4.4): the gateway's own access token toward a backend, cached.

Who uses it: both of the gateway's outbound transports, through thin adapters that only send the token request
and attach the token: `gateway.outbound.backend_auth.ClientCredentials` (aiohttp, registered HTTP adapters) and
`gateway.upstreams.credentials.OAuthClientCredentials` (httpx2, fronted MCP servers). The rules live here, once:

* the token endpoint is asked with the client's id and secret as HTTP Basic (``grant_type=client_credentials``,
  and ``scope`` and the RFC 8707 ``resource`` when configured), and must answer 200 with a bearer token;
* the token is reused until `EARLY_REFRESH_SECONDS` before the endpoint said it expires (`DEFAULT_TOKEN_SECONDS`
  when it did not say), so none is sent stale;
* one fetch at a time: concurrent requests wait for the fetch in progress rather than each asking;
* a backend that answers 401 to a token has it replaced once (`TokenCache.token` with ``stale``): revoked or
  rotated before it expired. A token already replaced by a concurrent request is not fetched again.

It knows no transport: the adapter passes a `PostForm` that sends the request and answers the status and the
parsed body (`UNREACHED` when the endpoint could not be reached or answered no JSON). Nothing here is shown to a model
or written to the audit; the secret is in no ``repr``.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from gateway.errors import UpstreamUnavailableError

__all__ = [
    "DEFAULT_TOKEN_SECONDS",
    "EARLY_REFRESH_SECONDS",
    "TOKEN_TIMEOUT_SECONDS",
    "PostForm",
    "TokenCache",
    "UNREACHED",
    "TokenRequest",
    "basic_authorization",
]

logger = logging.getLogger(__name__)

EARLY_REFRESH_SECONDS = 30.0
"""A token is fetched again this long before the endpoint said it expires, so none is sent stale."""
DEFAULT_TOKEN_SECONDS = 300.0
"""How long a token is reused when the endpoint does not say (``expires_in`` missing)."""
TOKEN_TIMEOUT_SECONDS = 10.0
"""The deadline of one token request."""


UNREACHED = 0
"""The status a `PostForm` answers when the endpoint could not be reached or its answer could not be read."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenRequest:
    """The token request an adapter sends: a form POST to `url` with `headers`, no redirect followed."""

    url: str
    form: Mapping[str, str]
    headers: Mapping[str, str] = field(repr=False)
    """``accept`` and the client's HTTP Basic ``authorization``."""


PostForm = Callable[[TokenRequest], Awaitable[tuple[int, Any]]]
"""``(request) -> (status, body)``: the adapter's transport; `body` is the parsed JSON (None when the status is not
200), and the status `UNREACHED` when the endpoint could not be reached or answered no JSON. Raises nothing."""


def basic_authorization(username: str, password: str) -> str:
    """The ``Authorization`` value of HTTP Basic (RFC 7617) for `username` and `password`."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


class TokenCache:
    """One client's access token, fetched through the adapter's `PostForm` and reused while it is fresh."""

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None = None,
        resource: str | None = None,
    ) -> None:
        form = {"grant_type": "client_credentials"}
        form |= {"scope": scope} if scope else {}
        form |= {"resource": resource} if resource else {}
        self._request = TokenRequest(
            url=token_url,
            form=form,
            headers={"accept": "application/json", "authorization": basic_authorization(client_id, client_secret)},
        )
        self._client_id = client_id
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = anyio.Lock()
        self.fetches = 0
        """How many tokens were fetched, for tests and the log."""

    def __repr__(self) -> str:
        return f"TokenCache(token_url={self._request.url!r}, client_id={self._client_id!r})"

    async def token(self, post: PostForm, *, service: str, stale: str | None = None) -> str:
        """The token to send: the cached one while it is fresh and is not `stale` (the one a backend just refused
        with 401), else a new one from the endpoint.

        Raises:
            UpstreamUnavailableError: (``sent=False``) no token could be had; nothing was sent to the backend.
        """
        async with self._lock:
            token = self._token
            if token is None or token == stale or time.monotonic() >= self._expires_at:
                token, lifetime = await self._fetch(post, service)
                self._token, self._expires_at = token, time.monotonic() + max(0.0, lifetime - EARLY_REFRESH_SECONDS)
            return token

    async def _fetch(self, post: PostForm, service: str) -> tuple[str, float]:
        status, body = UNREACHED, None
        with anyio.move_on_after(TOKEN_TIMEOUT_SECONDS):
            status, body = await post(self._request)
        if status == UNREACHED:
            raise UpstreamUnavailableError(
                f"{service}: its token endpoint could not be reached", service=service, sent=False
            )
        body = body if status == 200 and isinstance(body, dict) else {}
        token, lifetime = body.get("access_token"), body.get("expires_in")
        if not isinstance(token, str) or not token or str(body.get("token_type", "")).lower() != "bearer":
            logger.warning("%s: the token endpoint answered %s without a bearer token", service, status)
            raise UpstreamUnavailableError(
                f"{service}: its token endpoint gave no bearer token", service=service, sent=False
            )
        self.fetches += 1
        return token, float(lifetime) if isinstance(lifetime, int | float) and lifetime > 0 else DEFAULT_TOKEN_SECONDS
