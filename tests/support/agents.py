"""Helpers for end-to-end tests: keys, a real MCP client over HTTP, and result decoding."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult
from redis.asyncio import Redis

from gateway.principal import KeyKind
from gateway.store.keys import KeyStore

MODERN = "2026-07-28"
LEGACY = "legacy"


async def make_key(
    redis: Redis,
    *,
    org: str = "acme",
    roles: Iterable[str] = ("staff",),
    subject: str = "alice@acme.example",
    kind: KeyKind = KeyKind.AGENT,
) -> str:
    token, _record = await KeyStore(redis).create(kind=kind, subject=subject, org=org, roles=roles)
    return token


@asynccontextmanager
async def agent(mcp_url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    """A real MCP client speaking Streamable HTTP with a bearer key."""
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
            yield client


def payload(result: CallToolResult) -> dict[str, Any]:
    """The structured content, checked against the text content the model also receives (a refusal's
    text opens with its sentence, then a blank line, then the same JSON)."""
    [block] = result.content
    text = block.text  # type: ignore[union-attr]
    if result.is_error:
        sentence, _, text = text.partition("\n\n")
        assert sentence == result.structured_content["error"]["message"]  # type: ignore[index]
    text_payload = json.loads(text)
    assert text_payload == result.structured_content
    return text_payload  # type: ignore[no-any-return]


def error_code(result: CallToolResult) -> str:
    assert result.is_error
    return str(payload(result)["error"]["code"])


def everything_the_model_sees(result: CallToolResult) -> str:
    return result.model_dump_json(by_alias=True)
