"""A pool of client sessions to an upstream MCP server, each owned by a supervising task and reconnected on failure.

Who calls it: the composition root starts one per ``[upstreams.<name>]`` (`UpstreamConnection.running`)
and the upstream's tools call `call_tool` through it. Over Streamable HTTP the pool keeps several sessions
(``sessions``, `UpstreamSection.pool_size`), so concurrent calls do not queue behind one slow call; over
stdio it keeps one, since a stdio server is one process. Each session lives in its own task (the SDK's
client holds cancel scopes that must be left by the task that entered them), which connects, serves
until the session breaks or the gateway stops, and reconnects with backoff; a stdio child is stopped
when its session is left, so it stops with the gateway.

The stdio child is started through ``env -i``: its environment is exactly the allowlisted names
(`UpstreamSection.env`), never the gateway's own (the SDK's client would pass ``HOME``, ``PATH`` and
friends itself). The HTTP session carries the gateway's own credentials for that server (a bearer token, or an
OAuth access token it fetched: `gateway.upstreams.credentials`); an agent's token is never here to forward.

Errors are translated here, so the tools see only `UpstreamError`s with `sent` telling whether the call
may have reached the upstream: not connected, or the session unknown to the server (it restarted) -> not sent,
that session is opened anew and the call made again on another one of the pool; a JSON-RPC error saying the
request was refused before the tool ran (parse error, invalid request, unknown method, invalid params) ->
refused; a broken session, a timeout or any other error after the request went out -> may have landed, and
never made again here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.lowlevel
import httpx2
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    CallToolResult,
    ToolListChangedNotification,
)

from gateway.config.upstreams import MAX_CALL_SECONDS, UpstreamSection
from gateway.errors import ConfigError, UpstreamRefusedError, UpstreamTimeoutError, UpstreamUnavailableError
from gateway.telemetry.metrics import count_upstream_call_made_again, upstream_session
from gateway.upstreams.credentials import gateway_auth

__all__ = ["NOT_APPLIED_STATUS", "UpstreamConnection", "child_environment"]

logger = logging.getLogger(__name__)

NOT_APPLIED_STATUS = 422
"""The status a JSON-RPC error or an ``isError`` result travels with: MCP has no statuses, and both are the
upstream's definitive answer that the call did not apply, which the write contract lists as 422."""

_NOT_RUN_CODES = frozenset({PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS})
"""JSON-RPC errors that say the request was refused before the tool ran. Every other error (the
connection closed, a timeout, an internal error) may come after the tool changed something."""

_CONNECT_SECONDS = 15.0
_HTTP_TIMEOUT = httpx2.Timeout(_CONNECT_SECONDS, read=MAX_CALL_SECONDS)
"""The bounds of a session's HTTP client. httpx2's default (5 s for every phase) would end a call its review gives
longer (10 s by default) and a 2025-11-25 session's standing stream after five quiet seconds, and break the session
with them. A call is bounded by its review's ``timeout_seconds`` (`UpstreamConnection.call_tool`); the read bound
only ends a response or stream silent for five minutes (as the SDK's own client does), which is why a review may
give a call no longer (`MAX_CALL_SECONDS`)."""
_BACKOFF_START, _BACKOFF_CAP = 0.2, 30.0


def child_environment(section: UpstreamSection, environ: Mapping[str, str]) -> dict[str, str]:
    """The stdio child's whole environment: the allowlisted names that are set in `environ`, nothing else."""
    return {name: environ[name] for name in section.env if name in environ}


class _Slot:
    """One session of the pool: its client while open, and how many calls it carries now."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.client: Client | None = None
        self.broken = anyio.Event()
        self.busy = 0
        self.calls = 0

    def close(self, client: Client) -> None:
        """Take no more calls on `client`'s session, if it is still this slot's; its supervisor opens another."""
        if self.client is client:
            self.client = None
            self.broken.set()


class UpstreamConnection:
    """A pool of supervised sessions to one upstream (`UpstreamSection.pool_size`: several over HTTP, one over
    stdio); `call_tool` and `list_tools` take the open session carrying the fewest calls, waiting (bounded) for one.

    A session that broke is closed and opened anew by its own supervisor while the others carry on. A call the
    server refused before it ran (it no longer knew the session) is made again on another session; a call that may
    have gone out is never made again here (the executor classifies it, and a write stays UNKNOWN).
    """

    def __init__(self, name: str, section: UpstreamSection, *, secrets: Mapping[str, str]) -> None:
        self.name = name
        self._section = section
        self._secrets = secrets
        self._auth: httpx2.Auth | None = None
        self._slots = tuple(_Slot(index) for index in range(section.pool_size))
        self._opened = anyio.Event()
        self.connects = 0
        """How many sessions were opened (a reconnect counts), for health and tests."""
        self.list_changed = anyio.Event()
        """Set when the upstream may list other tools than it did: it sent ``notifications/tools/list_changed``, or
        a new session opened (a restarted server may be another version). Whoever reads the list replaces it."""
        self.list_changes = 0
        """How many ``notifications/tools/list_changed`` the upstream sent, for tests."""

    @property
    def open_sessions(self) -> int:
        """How many sessions of the pool are open now."""
        return sum(slot.client is not None for slot in self._slots)

    @property
    def in_flight(self) -> int:
        """How many calls the pool's sessions carry now (a switch to a new registration waits for none)."""
        return sum(slot.busy for slot in self._slots)

    @property
    def calls_by_session(self) -> tuple[int, ...]:
        """How many calls each session of the pool carried (across its reconnects), for metrics and tests."""
        return tuple(slot.calls for slot in self._slots)

    def _target(self, errlog: TextIO | None, http: httpx2.AsyncClient | None) -> Any:
        section = self._section
        if section.transport == "stdio":
            command = section.command or ""
            env = shutil.which("env")
            if env is None:
                raise ConfigError("stdio upstreams need the `env` program (coreutils) to clear the environment")
            pairs = [f"{key}={value}" for key, value in child_environment(section, self._secrets).items()]
            parameters = StdioServerParameters(
                command=env, args=["-i", *pairs, command, *section.args], cwd=section.cwd, env={}
            )
            return stdio_client(parameters, errlog=errlog) if errlog is not None else parameters
        return streamable_http_client(str(section.url), http_client=http)

    def _http_client(self) -> httpx2.AsyncClient:
        """The HTTP client of one session, signing each request with the gateway's own credentials for this server
        (`gateway.upstreams.credentials`; an OAuth token is shared by the pool's sessions and outlives them) and
        nothing else."""
        if self._auth is None:
            self._auth = gateway_auth(self.name, self._section, self._secrets)
        return httpx2.AsyncClient(auth=self._auth, timeout=_HTTP_TIMEOUT)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[UpstreamConnection]:
        """Supervise the pool's sessions while the block runs; leave them (and stop a child) on exit."""
        async with anyio.create_task_group() as group:
            for slot in self._slots:
                group.start_soon(self._supervise, slot)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()

    async def _supervise(self, slot: _Slot) -> None:
        """Open `slot`'s session, serve until it breaks or the gateway stops, and open it again with backoff. The
        session is entered and left by this task: the SDK's client holds cancel scopes of the task that opened it."""
        delay = _BACKOFF_START
        while True:
            errlog = _child_log(self.name) if self._section.transport == "stdio" else None
            try:
                async with contextlib.AsyncExitStack() as owned:
                    # The SDK leaves a client it is given open: this session's is closed with it.
                    http = None if errlog is not None else await owned.enter_async_context(self._http_client())
                    client = await owned.enter_async_context(
                        Client(
                            self._target(errlog, http), mode=self._section.protocol, message_handler=self._on_message
                        )
                    )
                    if errlog is not None:
                        errlog.close()  # the child holds its own copy; the relay ends when the child does
                    slot.broken = anyio.Event()
                    slot.client, self.connects, delay = client, self.connects + 1, _BACKOFF_START
                    upstream_session(self.name, opened=True)
                    owned.callback(upstream_session, self.name, opened=False)
                    self._opened.set()
                    self._opened = anyio.Event()
                    self.list_changed.set()
                    logger.info("upstream %s session %d connected (%s)", self.name, slot.index, self._section.transport)
                    await slot.broken.wait()
            except ConfigError:
                raise
            except Exception as error:  # a session that cannot start or broke: log by name, retry with backoff
                logger.warning("upstream %s session %d ended: %s", self.name, slot.index, type(error).__name__)
            finally:
                if errlog is not None and not errlog.closed:
                    errlog.close()
            slot.client = None
            await anyio.sleep(delay)
            delay = min(_BACKOFF_CAP, delay * 2)

    async def _on_message(self, message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            self.list_changes += 1
            logger.info("upstream %s: tools/list_changed", self.name)
            self.list_changed.set()
        await anyio.lowlevel.checkpoint()

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[tuple[_Slot, Client]]:
        """The open session carrying the fewest calls, counted as carrying one more while the block runs; waits
        (bounded) for one. Nothing awaits between choosing and counting, so calls that start together spread over
        the sessions."""
        chosen: tuple[_Slot, Client] | None = None
        with anyio.move_on_after(_CONNECT_SECONDS):
            while chosen is None:
                open_ = [(slot, slot.client) for slot in self._slots if slot.client is not None]
                if open_:
                    chosen = min(open_, key=lambda pair: pair[0].busy)
                else:
                    await self._opened.wait()
        if chosen is None:
            raise UpstreamUnavailableError(f"upstream {self.name} is not connected", service=self.name, sent=False)
        slot = chosen[0]
        slot.busy += 1
        slot.calls += 1
        try:
            yield chosen
        finally:
            slot.busy -= 1

    async def list_tools(self) -> list[dict[str, Any]]:
        """The upstream's tool definitions as JSON (every page)."""
        async with self._session() as (slot, client):
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            try:
                with anyio.fail_after(_CONNECT_SECONDS):
                    while True:
                        # Never from the client's response cache: a review is of what the upstream lists now.
                        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                        tools.extend(
                            tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools
                        )
                        cursor = page.next_cursor
                        if not cursor:
                            return tools
            except Exception as error:  # a read: nothing to classify, only a session to open again
                slot.close(client)
                raise UpstreamUnavailableError(
                    f"upstream {self.name} did not list its tools", service=self.name
                ) from error

    @property
    def protocol_version(self) -> str | None:
        """The protocol version negotiated with the upstream on an open session (None: none is open)."""
        for slot in self._slots:
            if slot.client is not None:
                return str(slot.client.protocol_version)
        return None

    async def call_tool(self, tool: str, arguments: Mapping[str, Any], *, timeout: float) -> CallToolResult:
        """Call `tool` once: again on another session only when it certainly did not go out. Raises
        `UpstreamError`s only (see the module docstring)."""
        retries = len(self._slots)
        while True:
            async with self._session() as (slot, client):
                try:
                    return await self._call_on(slot, client, tool, arguments, timeout)
                except UpstreamUnavailableError as error:
                    if error.sent or retries == 0:
                        raise
            retries -= 1
            count_upstream_call_made_again(self.name)
            logger.info("upstream %s: %s did not go out; made again on another session", self.name, tool)

    async def _call_on(
        self, slot: _Slot, client: Client, tool: str, arguments: Mapping[str, Any], timeout: float
    ) -> CallToolResult:
        try:
            with anyio.fail_after(timeout):
                return await client.call_tool(tool, dict(arguments))
        except MCPError as error:
            if error.error.code == INVALID_REQUEST and "session" in error.error.message.lower():
                # The server no longer knows this session (it restarted, or ended it): the request was refused
                # before any tool ran. This session is opened anew; the call may be made on another.
                slot.close(client)
                raise UpstreamUnavailableError(
                    f"upstream {self.name} ended the session before {tool} ran", service=self.name, sent=False
                ) from error
            if error.error.code in _NOT_RUN_CODES:
                # The upstream refused the request itself (unparsable, unknown, bad params): nothing ran.
                raise UpstreamRefusedError(
                    f"upstream {self.name} refused {tool}", service=self.name, status=NOT_APPLIED_STATUS
                ) from error
            # The connection closed, the SDK timed out, or the server failed while running it: may have landed.
            slot.close(client)
            raise UpstreamUnavailableError(
                f"upstream {self.name} lost {tool} ({error.error.code})", service=self.name, sent=True
            ) from error
        except TimeoutError as error:
            slot.close(client)  # a late answer on this session would be misread; start afresh
            raise UpstreamTimeoutError(f"upstream {self.name} did not answer {tool}", service=self.name) from error
        except Exception as error:  # the session broke with the request out: it may have landed
            slot.close(client)
            raise UpstreamUnavailableError(
                f"upstream {self.name} session broke during {tool}", service=self.name, sent=True
            ) from error


def _child_log(name: str) -> TextIO:
    """A pipe for a stdio child's stderr whose lines go to the gateway's log under the upstream's name.

    The SDK hands its client's `errlog` to the child as its stderr, so it must be a real file; a thread
    relays the other end until the child (the last holder of the write end) exits."""
    read_end, write_end = os.pipe()
    child_log = logging.getLogger(f"{__name__}.stderr")

    def relay() -> None:
        with os.fdopen(read_end, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                child_log.info("upstream %s: %s", name, line.rstrip())

    threading.Thread(target=relay, name=f"countersign upstream {name} stderr", daemon=True).start()
    return os.fdopen(write_end, "w")
