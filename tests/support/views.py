"""An official MCP client that renders MCP Apps views: it declares ``io.modelcontextprotocol/ui``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client import ClientExtension
from mcp.client.streamable_http import streamable_http_client

from gateway.mcp.apps import UI_EXTENSION, VIEW_MIME

__all__ = ["view_host"]


class _Views(ClientExtension):
    """The MCP Apps extension, with the one view profile the gateway serves."""

    identifier = UI_EXTENSION

    def settings(self) -> dict[str, Any]:
        return {"mimeTypes": [VIEW_MIME]}


@asynccontextmanager
async def view_host(mcp_url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    """A real MCP client over Streamable HTTP with a bearer key, declaring MCP Apps views."""
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        transport = streamable_http_client(mcp_url, http_client=http)
        async with Client(transport, mode=mode, extensions=[_Views()]) as client:  # type: ignore[arg-type]
            yield client
