"""The load generator process: ``python -m bench._load``, driven by JSON lines on stdin.

Reads of ``rooms_availability`` on `bench._engine` (the command loop, the cheap client, the closed loop
and the measured window). Every response is checked (HTTP 200, a JSON-RPC result rather than an
error, ``isError`` false, the expected ``structuredContent``); anything else is counted as a failure by
kind.

Commands (one JSON object per line; one JSON answer per line):

* ``{"cmd": "verify", "url", "token", "era"}``: one call with the official ``mcp.Client`` and one raw
  call, to prove the raw request is what the SDK would send and that both succeed.
* ``{"cmd": "run", "url", "token", "era", "concurrency", "warmup", "duration", "server_pid",
  "service_pids"}``: `concurrency` closed-loop workers for ``warmup + duration`` seconds. Only calls
  completing inside the measured window count; the server's CPU time (``/proc/<pid>/stat``) is read
  at the window's edges, by this process, so the window is exact. With ``urls`` and ``server_pids``
  (lists) instead of ``url`` and ``server_pid``, worker *i* calls ``urls[i % len(urls)]`` (several
  replicas behind a balancer that keeps each connection on one) and the CPU is theirs together.
* ``{"cmd": "quit"}``.

Eras: ``modern`` is the stateless 2026-07-28 envelope (``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name`` headers and ``params._meta``). ``legacy`` is the 2025-11-25 handshake: each worker
opens its own session (``initialize`` + ``notifications/initialized``), calls with
``Mcp-Session-Id``, and deletes the session at the end.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import aiohttp

from bench._engine import (
    LEGACY_VERSION,
    MODERN_VERSION,
    Command,
    Meter,
    Run,
    base_headers,
    call_headers,
    client_session,
    closed_loop,
    json_rpc_message,
    main,
    post,
    replicas,
    sdk_call,
)
from bench._engine import META as _META

TOOL = "rooms_availability"
ARGUMENTS = {"room_id": "room-atlas", "date": "2026-12-01"}
EXPECTED_ROOM = "room-atlas"

_MODERN_PARAMS = json.dumps({"name": TOOL, "arguments": ARGUMENTS, "_meta": _META}, separators=(",", ":")).encode()
_LEGACY_PARAMS = json.dumps({"name": TOOL, "arguments": ARGUMENTS}, separators=(",", ":")).encode()


def call_body(request_id: int, era: str) -> bytes:
    """The ``tools/call`` request, byte for byte what the loop sends."""
    params = _MODERN_PARAMS if era == "modern" else _LEGACY_PARAMS
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}' % (request_id, params)


def modern_headers(token: str) -> dict[str, str]:
    """Headers the SDK client sends on a 2026-07-28 ``tools/call`` of `TOOL`."""
    return call_headers(token, TOOL)


def failure_of(status: int, raw: bytes, content_type: str) -> str | None:
    """None for a successful ``tools/call`` result with the expected content, else the failure kind."""
    if status != 200:
        return f"http_{status}"
    try:
        message = json_rpc_message(raw, content_type)
    except ValueError:
        return "unparseable"
    if not isinstance(message, dict):
        return "not_an_object"
    if "error" in message:
        return f"jsonrpc_error_{message['error'].get('code')}"
    result = message.get("result")
    if not isinstance(result, dict):
        return "no_result"
    if result.get("isError"):
        return "tool_error"
    content = result.get("structuredContent")
    if not isinstance(content, dict) or content.get("room_id") != EXPECTED_ROOM:
        return "unexpected_content"
    return None


# --- one measured run ---------------------------------------------------------------------------


async def _worker(session: aiohttp.ClientSession, url: str, era: str, headers: dict[str, str], run: Run) -> None:
    request_id = 0
    while not run.stop:
        request_id += 1
        started = time.perf_counter()
        failure = await post(session, url, call_body(request_id, era), headers, failure_of)
        ended = time.perf_counter()
        if failure is None:
            run.completed.append((ended, ended - started))
        else:
            await run.failed(failure)


async def _open_legacy_session(session: aiohttp.ClientSession, url: str, token: str) -> dict[str, str]:
    """Initialize one 2025-11-25 session; the headers its calls carry."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "countersign-bench", "version": "0"},
        },
    }
    async with session.post(url, json=initialize, headers=base_headers(token)) as response:
        raw = await response.read()
        session_id = response.headers.get("mcp-session-id")
        message = json_rpc_message(raw, response.content_type)
        if response.status != 200 or not session_id or "result" not in message:
            raise RuntimeError(f"initialize failed: HTTP {response.status} {raw[:200]!r}")
    headers = {**base_headers(token), "mcp-session-id": session_id, "mcp-protocol-version": LEGACY_VERSION}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with session.post(url, json=initialized, headers=headers) as response:
        await response.read()
        if response.status != 202:
            raise RuntimeError(f"notifications/initialized answered HTTP {response.status}")
    return headers


async def _close_legacy_session(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with session.delete(url, headers=headers) as response:
            await response.read()


async def run(command: Command) -> dict[str, Any]:
    """One closed-loop run; the measured window is ``[warmup, warmup + duration]``."""
    token, era = command["token"], command["era"]
    concurrency = int(command["concurrency"])
    urls, _ = replicas(command)
    targets = [urls[index % len(urls)] for index in range(concurrency)]
    state = Run()
    async with client_session() as session:
        if era == "legacy":
            sessions = [await _open_legacy_session(session, url, token) for url in targets]
        else:
            sessions = [modern_headers(token)] * concurrency
        workers = [_worker(session, url, era, headers, state) for url, headers in zip(targets, sessions, strict=True)]
        try:
            window = await closed_loop(
                state, workers, Meter.of(command), warmup=float(command["warmup"]), duration=float(command["duration"])
            )
        finally:
            if era == "legacy":
                for url, headers in zip(targets, sessions, strict=True):
                    await _close_legacy_session(session, url, headers)
    return window.record(state.latencies(window)) | {
        "failures": dict(state.failures),
        "calls_total": len(state.completed),
    }


# --- verification with the official client ------------------------------------------------------


async def verify(command: Command) -> dict[str, Any]:
    """One call with ``mcp.Client`` and one raw call; both must succeed with the expected content."""
    url, token, era = command["url"], command["token"], command["era"]
    result = await sdk_call(url, token, TOOL, ARGUMENTS, mode=MODERN_VERSION if era == "modern" else "legacy")
    content = result.structured_content or {}
    if result.is_error or content.get("room_id") != EXPECTED_ROOM:
        return {"error": f"mcp.Client call failed at {url}: {result.model_dump_json()[:300]}"}
    async with client_session() as session:
        headers = modern_headers(token) if era == "modern" else await _open_legacy_session(session, url, token)
        async with session.post(url, data=call_body(1, era), headers=headers) as response:
            raw = await response.read()
            failure = failure_of(response.status, raw, response.content_type)
            content_type = response.content_type
        if era == "legacy":
            await _close_legacy_session(session, url, headers)
    if failure is not None:
        return {"error": f"raw call failed at {url}: {failure}: {raw[:300]!r}"}
    return {"client_keys": sorted(content), "raw_content_type": content_type, "raw_bytes": len(raw)}


if __name__ == "__main__":
    main({"run": run, "verify": verify})
