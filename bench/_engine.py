"""The engine of the load generators (`bench._load`, `bench._write_load`, `bench._flood_load`).

A load generator is a process the orchestrator starts on the load core (`bench._harness.start_python`)
and drives with one JSON command a line on stdin, answered with one JSON line on stdout. It is kept as
cheap as a correct client can be, so it is not the bottleneck: raw aiohttp POSTs of pre-encoded
JSON-RPC bodies on keep-alive connections, on uvloop, every answer checked. What the three share lives
here; each keeps only its requests, its checks of an answer and its commands:

* `main`: the command loop (a ready line with the pid, commands until ``quit`` or end of input; an
  exception becomes ``{"error": ...}``, which stops the orchestrator), on uvloop;
* `client_session`, `post`: the client, and one request judged by the generator's check of an answer;
* `base_headers`, `call_headers`, `json_rpc_message`, `sdk_call`: the MCP side of a request, and one
  call with the official ``mcp.Client`` that each generator's ``verify`` compares its raw request with;
* `Run`, `closed_loop`: closed-loop workers over a warm-up and a measured window (or until they run out
  of work), then stopped and drained;
* `Meter`, `Window`: the clock and the CPU of the server, the services and this process, read at the
  window's edges by this process so the window is exact, and the window's record (`Window.record`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from bench._harness import cpu_seconds, percentile

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
REQUEST_TIMEOUT_SECONDS = 10.0
DRAIN_TIMEOUT_SECONDS = 15.0
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "countersign-bench", "version": "0"},
}
"""``params._meta`` of a 2026-07-28 request, as the SDK client sends it."""

Command = dict[str, Any]
Handler = Callable[[Command], Awaitable[dict[str, Any]]]
T = TypeVar("T")


# --- the MCP side of a request ------------------------------------------------------------------


def base_headers(token: str) -> dict[str, str]:
    return {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {token}",
    }


def call_headers(token: str, tool: str) -> dict[str, str]:
    """Headers the SDK client sends on a 2026-07-28 ``tools/call`` (see ``mcp/client/session.py``)."""
    return {**base_headers(token), "mcp-protocol-version": MODERN_VERSION, "mcp-method": "tools/call", "mcp-name": tool}


def json_rpc_message(raw: bytes, content_type: str) -> Any:
    """The JSON-RPC message of a response: the body itself, or the last ``data:`` of an SSE stream."""
    if content_type == "text/event-stream":
        data = [line[5:].strip() for line in raw.splitlines() if line.startswith(b"data:")]
        if not data:
            raise ValueError("SSE response without data")
        raw = data[-1]
    return json.loads(raw)


async def sdk_call(url: str, token: str, tool: str, arguments: dict[str, Any], *, mode: str) -> Any:
    """One ``tools/call`` with the official ``mcp.Client`` (`mode`: a protocol version or ``legacy``); its result."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=10) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            return await client.call_tool(tool, arguments)


# --- the client ---------------------------------------------------------------------------------


def client_session() -> aiohttp.ClientSession:
    """Keep-alive connections, as many as the workers open, each request bounded by `REQUEST_TIMEOUT_SECONDS`."""
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS))


async def post(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    judge: Callable[[int, bytes, str], T],
) -> T | str:
    """POST `body`; `judge` of (status, body, content type), or the name of the client error that stopped it."""
    try:
        async with session.post(url, data=body, headers=headers) as response:
            return judge(response.status, await response.read(), response.content_type)
    except (aiohttp.ClientError, TimeoutError) as error:
        return type(error).__name__


def replicas(command: Command) -> tuple[list[str], list[int]]:
    """The URLs a run spreads its workers over, and the pids of the servers behind them."""
    urls = command.get("urls") or [command["url"]]
    pids = command.get("server_pids") or [command["server_pid"]]
    return [str(url) for url in urls], [int(pid) for pid in pids]


# --- the measured window ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """The clock and three CPU totals (seconds) at one edge of a window."""

    at: float
    server: float
    services: float
    own: float


@dataclass(frozen=True)
class Meter:
    """What a window is measured on: the servers under test, the services beside them, and this process."""

    server_pids: Sequence[int]
    service_pids: Sequence[int] = ()

    @classmethod
    def of(cls, command: Command) -> Meter:
        """The servers of `command` (``server_pid`` or ``server_pids``) and its ``service_pids``."""
        _, server_pids = replicas(command)
        return cls(server_pids, [int(pid) for pid in command.get("service_pids", [])])

    def read(self) -> Reading:
        at = time.perf_counter()
        return Reading(at, _cpu_sum(self.server_pids), _cpu_sum(self.service_pids), cpu_seconds(os.getpid()))


@dataclass(frozen=True)
class Window:
    """The measured window: what the meter read at its two edges."""

    start: Reading
    end: Reading

    @property
    def seconds(self) -> float:
        return self.end.at - self.start.at

    @property
    def server_cpu(self) -> float:
        return self.end.server - self.start.server

    def holds(self, at: float) -> bool:
        return self.start.at <= at <= self.end.at

    def record(self, latencies: Sequence[float]) -> dict[str, Any]:
        """Calls/s, p50 and p99, and CPU per call and share of the window, of the sorted `latencies` in it."""
        calls, seconds = len(latencies), self.seconds
        services, own = self.end.services - self.start.services, self.end.own - self.start.own
        per_call = (lambda cpu: cpu / calls * 1e6) if calls else (lambda cpu: float("nan"))
        return {
            "calls": calls,
            "seconds": seconds,
            "calls_per_s": calls / seconds,
            "p50_ms": percentile(latencies, 0.50) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "server_cpu_us_per_call": per_call(self.server_cpu),
            "server_cpu_share": self.server_cpu / seconds,
            "services_cpu_us_per_call": per_call(services),
            "load_cpu_us_per_call": per_call(own),
            "other_core_share": (services + own) / seconds,
        }


def _cpu_sum(pids: Sequence[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


# --- the closed loop ----------------------------------------------------------------------------


@dataclass
class Run:
    """What the workers of one closed-loop run share."""

    stop: bool = False
    completed: list[tuple[float, float]] = field(default_factory=list)
    """(completion time, latency) of each successful call."""
    failures: Counter[str] = field(default_factory=Counter)

    async def failed(self, kind: str) -> None:
        self.failures[kind] += 1
        await asyncio.sleep(0.01)  # a failing server must not turn the loop into a busy spin

    def latencies(self, window: Window) -> list[float]:
        """The latencies of the calls completed inside `window`, sorted."""
        return sorted(latency for end, latency in self.completed if window.holds(end))


async def closed_loop(
    run: Run, workers: Sequence[Coroutine[Any, Any, None]], meter: Meter, *, warmup: float, duration: float | None
) -> Window:
    """Run `workers` (they loop until ``run.stop``); the window is ``[warmup, warmup + duration]``, or, with
    no `duration`, from their start until every one has returned (no warm-up). Then stop and drain them."""
    tasks = [asyncio.create_task(worker) for worker in workers]
    try:
        if duration is not None:
            await asyncio.sleep(warmup)
        start = meter.read()
        if duration is not None:
            await asyncio.sleep(duration)
        else:
            await asyncio.gather(*tasks)
        end = meter.read()
    finally:
        run.stop = True
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DRAIN_TIMEOUT_SECONDS)
    return Window(start, end)


# --- the command loop ---------------------------------------------------------------------------


async def _serve(handlers: Mapping[str, Handler]) -> None:
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
            answer = await handlers[command["cmd"]](command)
        except Exception as error:  # reported to the orchestrator, which stops the benchmark
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)


def main(handlers: Mapping[str, Handler]) -> None:
    """Serve `handlers` (command name -> coroutine of the command) on uvloop until ``quit``."""
    import uvloop

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(handlers))
