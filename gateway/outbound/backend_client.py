"""The gateway's `UpstreamClient` for one business backend, on aiohttp.

Why not httpx: measured on this project's read path, httpx (even over an aiohttp transport)
cost 270-330 µs of CPU per backend call against about 45 µs for aiohttp itself, the largest
single cost the gateway added over a bare MCP server (bench/HISTORY.md). The client is small on
purpose: one method, JSON in, bytes out, and transport failures raised as the gateway's own
`UpstreamError`s with `sent` telling whether the request may have reached the backend.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from opentelemetry.trace import SpanKind

from gateway.errors import UpstreamError, UpstreamTimeoutError, UpstreamUnavailableError
from gateway.outbound.backend_auth import BackendAuth, BearerToken, Credentials
from gateway.telemetry.metrics import count_backend_request
from gateway.telemetry.tracing import inject, span
from gateway.tools.upstream import UpstreamResponse

__all__ = ["AiohttpUpstream"]


class AiohttpUpstream:
    """One backend: its base URL and the gateway's own credential (never an agent's token)."""

    def __init__(
        self,
        base_url: str,
        *,
        service: str,
        credential: str | BackendAuth | None = None,
        timeout_seconds: float = 10.0,
    ) -> None:
        """`credential` is a bearer token, or a `BackendAuth` asked before each request (an API key, Basic,
        OAuth 2.0 client credentials); what it adds wins over any header or parameter of the call."""
        self._base = base_url.rstrip("/")
        parsed = urlsplit(self._base)
        self._host = parsed.hostname or ""
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._service = service
        # Every answer the gateway can use is JSON: say so, or an API may answer XML or HTML (a non-JSON
        # answer is still refused as UPSTREAM_ERROR by `request_json`).
        self._headers = {"accept": "application/json"}
        self._auth: BackendAuth | None = BearerToken(credential) if isinstance(credential, str) else credential
        if isinstance(credential, str) and not credential:
            self._auth = None
        self._default_limit = _limit(timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Created on first use: an aiohttp session belongs to the running event loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=200, keepalive_timeout=KEEPALIVE_SECONDS)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> UpstreamResponse:
        """One request, in a CLIENT span whose trace context the backend receives (``traceparent``),
        counted by adapter and status class (`gateway.telemetry.metrics.count_backend_request`)."""
        limit = self._default_limit if timeout is None else _limit(timeout)
        started = time.perf_counter()
        status: int | None = None
        # Traced inside a request or a worker step; a background poll (a health check) starts no trace.
        with span(method, kind=SpanKind.CLIENT, attributes=self._span_attributes(method, path), within=True) as current:
            sent = {**self._headers, **headers} if headers else dict(self._headers)
            own = await self._auth.credentials(self._client(), service=self._service) if self._auth else None
            renewable = own is not None
            while True:
                signed, query = _signed(sent, params, own)
                inject(signed)
                try:
                    async with self._client().request(
                        method,
                        self._base + path,
                        params=query,
                        json=json,
                        headers=signed,
                        timeout=limit,
                        allow_redirects=False,
                    ) as response:
                        status = response.status
                        if status == 401 and renewable and own is not None and self._auth is not None:
                            # A token revoked or rotated before it expired: one more try with a new one, if the
                            # credential has one (a 401 is a refusal before anything ran). Once: a second 401 stands.
                            renewable = False
                            renewed = await self._auth.renewed(self._client(), own, service=self._service)
                            if renewed is not None:
                                own = renewed
                                continue
                        current.set_attribute("http.response.status_code", status)
                        if status >= 400:
                            current.set_attribute("error.type", str(status))
                        # Only a 429's Retry-After is read: copying headers on every answer costs the read path.
                        wait = response.headers.get("retry-after") if status == 429 else None
                        return UpstreamResponse(status=status, body=await response.read(), retry_after=wait)
                except aiohttp.ConnectionTimeoutError as error:
                    raise UpstreamUnavailableError("connect timed out", service=self._service, sent=False) from error
                except (TimeoutError, aiohttp.ServerTimeoutError) as error:
                    raise UpstreamTimeoutError("backend did not answer in time", service=self._service) from error
                except aiohttp.ClientConnectorError as error:
                    raise UpstreamUnavailableError(
                        "cannot connect to backend", service=self._service, sent=False
                    ) from error
                except aiohttp.ClientError as error:
                    # The connection broke after the request may have been written: it may have landed.
                    raise _broken(self._service, error) from error
                finally:
                    count_backend_request(self._service, status, time.perf_counter() - started)

    def _span_attributes(self, method: str, path: str) -> dict[str, str | int]:
        return {
            "http.request.method": method,
            "server.address": self._host,
            "server.port": self._port,
            "url.path": path,
            "countersign.adapter": self._service,
        }

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


KEEPALIVE_SECONDS = 4.0
"""How long an idle connection to a backend is kept for reuse: shorter than the keep-alive of the servers backends
commonly run on (uvicorn and Node close an idle connection after 5 s), so the gateway lets an idle connection go
before the server does. Reused after the server closed it, a connection breaks with the request possibly written,
and a write sent on it ends UNKNOWN, to be settled by its lookup (seen when the health poll, now every 30 s, no
longer kept connections warm)."""


def _signed(
    headers: dict[str, str], params: Mapping[str, str] | None, own: Credentials | None
) -> tuple[dict[str, str], Mapping[str, str] | None]:
    """The call's headers and query with the gateway's credential added (it wins over the call's)."""
    if own is None:
        return headers, params
    own_headers, own_query = own
    return {**headers, **own_headers}, ({**(params or {}), **own_query} if own_query else params)


def _limit(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=seconds, sock_connect=min(2.0, seconds))


def _broken(service: str, error: Exception) -> UpstreamError:
    return UpstreamUnavailableError(f"connection failed: {type(error).__name__}", service=service)
