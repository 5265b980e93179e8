"""A refused caller of ``/mcp`` learns why, through the client it uses.

The 401 and 403 on ``/mcp`` are JSON-RPC error objects with the HTTP status and ``WWW-Authenticate``
kept: the MCP SDK 2.x client shows a non-2xx JSON-RPC body's message, and only "Server returned an
error response" for any other body. A made-up key, a revoked key and another surface's key read the
same, so a refusal never says whether a key exists.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError
from redis.asyncio import Redis

from gateway.auth.bearer import AUTH_ERROR
from gateway.principal import KeyKind
from gateway.store.keys import KeyStore
from tests.support.agents import LEGACY, MODERN, agent, make_key

pytestmark = pytest.mark.anyio

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


async def _raw(mcp_url: str, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(mcp_url, json=LIST, headers={"accept": "application/json, text/event-stream", **headers})


def _error(answer: httpx.Response) -> dict[str, Any]:
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert (body["jsonrpc"], body["id"]) == ("2.0", None)
    error: dict[str, Any] = body["error"]
    return error


async def _revoked(redis: Redis) -> str:
    token, record = await KeyStore(redis).create(kind=KeyKind.AGENT, subject="bob@acme.example", org="acme",
                                                 roles=("staff",))  # fmt: skip
    await KeyStore(redis).revoke(record.key_id)
    return token


def _mcp_error(raised: BaseException) -> MCPError:
    """The `MCPError` the client raised, out of the exception groups of its task groups."""
    while isinstance(raised, BaseExceptionGroup) and len(raised.exceptions) == 1:
        raised = raised.exceptions[0]
    assert isinstance(raised, MCPError), repr(raised)
    return raised


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_the_sdk_client_shows_why_a_bearer_key_was_refused(redis: Redis, mcp_url: str, mode: str) -> None:
    """The official client's error carries the sentence and the stable code, in both eras."""
    with pytest.raises(BaseException) as raised:  # the client's task group wraps it
        with anyio.fail_after(10):
            async with agent(mcp_url, "csk_agent_made-up", mode) as client:
                await client.list_tools()
    error = _mcp_error(raised.value).error
    assert error.code == AUTH_ERROR
    assert error.message.startswith("The bearer key was refused")
    assert isinstance(error.data, dict) and error.data["code"] == "UNAUTHENTICATED"
    assert error.data["status"] == 401 and error.data["retryable"] is False


async def test_a_401_is_a_json_rpc_error_with_the_challenge_and_reads_the_same_for_any_refused_key(
    redis: Redis, mcp_url: str
) -> None:
    """Made-up, revoked and admin keys get the same message and code; a missing key says to send one."""
    admin = await make_key(redis, kind=KeyKind.ADMIN, roles=("approver",))
    revoked = await _revoked(redis)
    with anyio.fail_after(5):  # the agents' key cache holds a resolved key for at most a second
        while (await _raw(mcp_url, {"authorization": f"Bearer {revoked}"})).status_code != 401:
            await anyio.sleep(0.1)
    errors = []
    for token in ("csk_agent_made-up", revoked, admin):
        answer = await _raw(mcp_url, {"authorization": f"Bearer {token}"})
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith('Bearer realm="mcp"')
        errors.append(_error(answer))
    assert errors[0] == errors[1] == errors[2]
    assert errors[0]["code"] == AUTH_ERROR and errors[0]["data"]["code"] == "UNAUTHENTICATED"
    assert "made-up" not in errors[0]["message"] and "revoked" in errors[0]["message"]
    missing = await _raw(mcp_url, {})
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="mcp"'
    error = _error(missing)
    assert error["data"]["code"] == "UNAUTHENTICATED" and "Authorization: Bearer" in error["message"]
