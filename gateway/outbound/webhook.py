"""Posting one signed JSON body to a webhook, on aiohttp: the `Post` the notification loop uses.

The body is sent as the exact bytes that were signed (never re-encoded). Transport failures come
back as the gateway's own `UpstreamError`s, so the loop above never sees an aiohttp type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp

from gateway.errors import UpstreamTimeoutError, UpstreamUnavailableError

__all__ = ["WebhookPoster"]


class WebhookPoster:
    """POSTs bodies with a per-request deadline; one connection pool for every webhook."""

    def __init__(self, *, timeout_seconds: float = 5.0) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int:
        """The receiver's HTTP status.

        Raises:
            UpstreamTimeoutError: no answer within the deadline.
            UpstreamUnavailableError: the receiver could not be reached.
        """
        if self._session is None or self._session.closed:  # made on first use: it belongs to the running loop
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.post(url, data=body, headers=dict(headers), allow_redirects=False) as response:
                await response.read()
                return response.status
        except TimeoutError as error:
            raise UpstreamTimeoutError("webhook timed out", service="webhook") from error
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as error:
            raise UpstreamUnavailableError(f"webhook unreachable: {type(error).__name__}", service="webhook") from error

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
