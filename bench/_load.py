"""The load generator process: ``python -m bench._load``, driven by JSON lines on stdin.

It is kept as cheap as a correct client can be, so it is not the bottleneck: raw aiohttp POSTs of a
pre-encoded JSON-RPC ``tools/call`` body on keep-alive connections, on uvloop. Every response is
checked (HTTP 200, a JSON-RPC result rather than an error, ``isError`` false, the expected
``structuredContent``); anything else is counted as a failure by kind.

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

import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench._harness import cpu_seconds, percentile

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
TOOL = "rooms_availability"
ARGUMENTS = {"room_id": "room-atlas", "date": "2026-12-01"}
EXPECTED_ROOM = "room-atlas"
REQUEST_TIMEOUT_SECONDS = 10.0
DRAIN_TIMEOUT_SECONDS = 15.0

_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "countersign-bench", "version": "0"},
}
_MODERN_PARAMS = json.dumps({"name": TOOL, "arguments": ARGUMENTS, "_meta": _META}, separators=(",", ":")).encode()
_LEGACY_PARAMS = json.dumps({"name": TOOL, "arguments": ARGUMENTS}, separators=(",", ":")).encode()


def call_body(request_id: int, era: str) -> bytes:
    """The ``tools/call`` request, byte for byte what the loop sends."""
    params = _MODERN_PARAMS if era == "modern" else _LEGACY_PARAMS
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}' % (request_id, params)


def base_headers(token: str) -> dict[str, str]:
    return {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {token}",
    }


def modern_headers(token: str) -> dict[str, str]:
    """Headers the SDK client sends on a 2026-07-28 ``tools/call`` (see ``mcp/client/session.py``)."""
    return {
        **base_headers(token),
        "mcp-protocol-version": MODERN_VERSION,
        "mcp-method": "tools/call",
        "mcp-name": TOOL,
    }


def json_rpc_message(raw: bytes, content_type: str) -> Any:
    """The JSON-RPC message of a response: the body itself, or the last ``data:`` of an SSE stream."""
    if content_type == "text/event-stream":
        data = [line[5:].strip() for line in raw.splitlines() if line.startswith(b"data:")]
        if not data:
            raise ValueError("SSE response without data")
        raw = data[-1]
    return json.loads(raw)


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


@dataclass
class RunState:
    """What the workers of one run share."""

    stop: bool = False
    completed: list[tuple[float, float]] = field(default_factory=list)
    """(completion time, latency) of each successful call."""
    failures: Counter[str] = field(default_factory=Counter)


async def _post(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]) -> str | None:
    try:
        async with session.post(url, data=body, headers=headers) as response:
            raw = await response.read()
            return failure_of(response.status, raw, response.content_type)
    except (aiohttp.ClientError, TimeoutError) as error:
        return type(error).__name__


async def _worker(session: aiohttp.ClientSession, url: str, era: str, headers: dict[str, str], state: RunState) -> None:
    request_id = 0
    while not state.stop:
        request_id += 1
        started = time.perf_counter()
        failure = await _post(session, url, call_body(request_id, era), headers)
        ended = time.perf_counter()
        if failure is None:
            state.completed.append((ended, ended - started))
        else:
            state.failures[failure] += 1
            await asyncio.sleep(0.01)  # a failing server must not turn the loop into a busy spin


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


async def run(command: dict[str, Any]) -> dict[str, Any]:
    """One closed-loop run; the measured window is ``[warmup, warmup + duration]``."""
    token, era = command["token"], command["era"]
    concurrency = int(command["concurrency"])
    urls, server_pids = replicas(command)
    service_pids = [int(pid) for pid in command.get("service_pids", [])]
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        targets = [urls[index % len(urls)] for index in range(concurrency)]
        if era == "legacy":
            sessions = [await _open_legacy_session(session, url, token) for url in targets]
        else:
            sessions = [modern_headers(token)] * concurrency
        state = RunState()
        workers = [
            asyncio.create_task(_worker(session, url, era, h, state)) for url, h in zip(targets, sessions, strict=True)
        ]
        try:
            await asyncio.sleep(float(command["warmup"]))
            t0, cpu0, services0, own0 = time.perf_counter(), _cpu_sum(server_pids), _cpu_sum(service_pids), _own()
            await asyncio.sleep(float(command["duration"]))
            t1, cpu1, services1, own1 = time.perf_counter(), _cpu_sum(server_pids), _cpu_sum(service_pids), _own()
        finally:
            state.stop = True
            await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), DRAIN_TIMEOUT_SECONDS)
            if era == "legacy":
                for url, headers in zip(targets, sessions, strict=True):
                    await _close_legacy_session(session, url, headers)
    latencies = sorted(latency for end, latency in state.completed if t0 <= end <= t1)
    calls = len(latencies)
    return {
        "calls": calls,
        "seconds": t1 - t0,
        "calls_per_s": calls / (t1 - t0),
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "server_cpu_us_per_call": (cpu1 - cpu0) / calls * 1e6 if calls else float("nan"),
        "server_cpu_share": (cpu1 - cpu0) / (t1 - t0),
        "services_cpu_us_per_call": (services1 - services0) / calls * 1e6 if calls else float("nan"),
        "load_cpu_us_per_call": (own1 - own0) / calls * 1e6 if calls else float("nan"),
        "other_core_share": (services1 - services0 + own1 - own0) / (t1 - t0),
        "failures": dict(state.failures),
        "calls_total": len(state.completed),
    }


def _cpu_sum(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def replicas(command: dict[str, Any]) -> tuple[list[str], list[int]]:
    """The URLs a run spreads its workers over, and the pids of the servers behind them."""
    urls = command.get("urls") or [command["url"]]
    pids = command.get("server_pids") or [command["server_pid"]]
    return [str(url) for url in urls], [int(pid) for pid in pids]


def _own() -> float:
    """This process's CPU seconds (the client's own cost)."""
    return cpu_seconds(os.getpid())


# --- verification with the official client ------------------------------------------------------


async def verify(command: dict[str, Any]) -> dict[str, Any]:
    """One call with ``mcp.Client`` and one raw call; both must succeed with the expected content."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    url, token, era = command["url"], command["token"], command["era"]
    mode = MODERN_VERSION if era == "modern" else "legacy"
    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
            result = await client.call_tool(TOOL, ARGUMENTS)
    content = result.structured_content or {}
    if result.is_error or content.get("room_id") != EXPECTED_ROOM:
        return {"error": f"mcp.Client call failed at {url}: {result.model_dump_json()[:300]}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)) as session:
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


# --- command loop -------------------------------------------------------------------------------


async def serve_commands() -> None:
    """Answer commands from stdin until ``quit`` or end of input."""
    print(json.dumps({"pid": os.getpid()}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        if command["cmd"] == "quit":
            return
        try:
            answer = await (run(command) if command["cmd"] == "run" else verify(command))
        except Exception as error:  # reported to the orchestrator, which stops the benchmark
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


def main() -> None:
    import uvloop

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_commands())


if __name__ == "__main__":
    main()
