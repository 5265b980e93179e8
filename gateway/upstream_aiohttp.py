"""The gateway's `UpstreamClient` for one business backend, on aiohttp.

Why not httpx: measured on this project's read path, httpx (even over an aiohttp transport)
cost 270-330 µs of CPU per backend call against about 45 µs for aiohttp itself, the largest
single cost the gateway added over a bare MCP server (bench/README.md). The client is small on
purpose: one method, JSON in, bytes out, and transport failures raised as the gateway's own
`UpstreamError`s with `sent` telling whether the request may have reached the backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from gateway.errors import UpstreamError, UpstreamTimeoutError, UpstreamUnavailableError
from gateway.upstream import UpstreamResponse

__all__ = ["AiohttpUpstream"]


class AiohttpUpstream:
    """One backend: its base URL and the gateway's own credential (never an agent's token)."""

    def __init__(
        self, base_url: str, *, service: str, credential: str | None = None, timeout_seconds: float = 10.0
    ) -> None:
        self._base = base_url.rstrip("/")
        self._service = service
        self._headers = {"authorization": f"Bearer {credential}"} if credential else {}
        self._default_limit = _limit(timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Created on first use: an aiohttp session belongs to the running event loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=200, keepalive_timeout=30)
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
        limit = self._default_limit if timeout is None else _limit(timeout)
        try:
            async with self._client().request(
                method,
                self._base + path,
                params=params,
                json=json,
                headers={**self._headers, **headers} if headers else self._headers,
                timeout=limit,
                allow_redirects=False,
            ) as response:
                # Only a 429's Retry-After is read: copying headers on every answer costs the read path.
                wait = response.headers.get("retry-after") if response.status == 429 else None
                return UpstreamResponse(status=response.status, body=await response.read(), retry_after=wait)
        except aiohttp.ConnectionTimeoutError as error:
            raise UpstreamUnavailableError("connect timed out", service=self._service, sent=False) from error
        except (TimeoutError, aiohttp.ServerTimeoutError) as error:
            raise UpstreamTimeoutError("backend did not answer in time", service=self._service) from error
        except aiohttp.ClientConnectorError as error:
            raise UpstreamUnavailableError("cannot connect to backend", service=self._service, sent=False) from error
        except aiohttp.ClientError as error:
            # The connection broke after the request may have been written: it may have landed.
            raise _broken(self._service, error) from error

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _limit(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=seconds, sock_connect=min(2.0, seconds))


def _broken(service: str, error: Exception) -> UpstreamError:
    return UpstreamUnavailableError(f"connection failed: {type(error).__name__}", service=service)
