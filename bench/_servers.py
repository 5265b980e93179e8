"""The processes under test and their services: ``python -m bench._servers {backends,gateway,bare,bare-write} ...``.

* ``backends``: the rooms and orders demo backends, both in one process and one event loop.
* ``gateway``: Countersign as `gateway.runtime.app.create_app` builds it with default settings and the rooms and
  orders adapters (bearer-key auth, executor, audit XADD, and whatever else the default app runs).
  ``--no-worker`` runs it without the in-process worker (``Settings(run_worker=False)``); with the worker,
  the gateway's first signing key is made before it starts (an operator's ``signing-keys rotate``).
* ``bare``: the floor the gateway is compared with. A low-level SDK `Server` behind the same
  `StreamableHTTPSessionManager` configuration the gateway uses (stateful, SSE-capable responses,
  DNS-rebinding protection for 127.0.0.1), with one tool that makes the identical backend GET with
  one shared `aiohttp.ClientSession`, appends one small audit entry with ``XADD``, and returns the
  backend's JSON. It registers ``get_tool_input_schema`` (the SDK's documented cheap path for the
  2026-07-28 ``Mcp-Param`` header check) so the SDK does not run ``tools/list`` inside every call.
* ``bare-write``: the floor for a write proposal, on the same transport. Its tool ``rooms_book``
  builds the `Proposal` the gateway would build for the same arguments (same fields and sizes),
  calls `RedisLedger.propose` (the same Lua script), appends one small audit entry and returns the
  agent's receipt (`card_for_agent`). ``rooms_book_checked`` first makes the backend reads the
  gateway's ``rooms_book`` makes for its preview (the room list and the day's availability, at once).

Each prints one JSON line (``{"url": ..., "pid": ...}``) on stdout once it accepts connections, then
serves until SIGTERM. Backend tokens come from the environment, never the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOMS_TOKEN_ENV = "BENCH_ROOMS_TOKEN"
ORDERS_TOKEN_ENV = "BENCH_ORDERS_TOKEN"
ROOMS_SIGNING_KEY_ENV = "BENCH_ROOMS_SIGNING_KEY"
ORDERS_SIGNING_KEY_ENV = "BENCH_ORDERS_SIGNING_KEY"
SUBJECT = "bench@acme.example"


def fresh_secrets() -> dict[str, str]:
    """New backend tokens and identity signing keys, by environment variable, for one run's processes."""
    import secrets

    names = (ROOMS_TOKEN_ENV, ORDERS_TOKEN_ENV, ROOMS_SIGNING_KEY_ENV, ORDERS_SIGNING_KEY_ENV)
    return {name: secrets.token_urlsafe(32) for name in names}


ORG = "acme"
BARE_AUDIT_STREAM = "bench:bare:audit"
TOOL_NAME = "rooms_availability"
HOST = "127.0.0.1"
_STARTUP_TIMEOUT_SECONDS = 15.0

AVAILABILITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "room_id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,63}$"},
        "date": {"type": "string", "format": "date"},
    },
    "required": ["room_id", "date"],
    "additionalProperties": False,
}


# --- serving ------------------------------------------------------------------------------------


def _bind() -> socket.socket:
    # proto=IPPROTO_TCP matters: the stdlib event loop sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP (uvloop always does). Without it, uvicorn's separate header and body
    # writes meet Nagle's algorithm and the client's delayed ACK: about 40 ms per response.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    return sock


async def _serve(app: Any, **announce: Any) -> None:
    """Run `app` under uvicorn (httptools, no access log, lifespan on), announce readiness, serve until stopped."""
    import uvicorn

    sock = _bind()
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", ws="none", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _STARTUP_TIMEOUT_SECONDS
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped before it started")
        if loop.time() > deadline:
            raise TimeoutError("uvicorn did not start in time")
        await asyncio.sleep(0.01)
    port = sock.getsockname()[1]
    http = config.http_protocol_class.__name__ if hasattr(config, "http_protocol_class") else str(config.http)
    _announce(url=f"http://{HOST}:{port}", pid=os.getpid(), http=http, loop=type(loop).__module__, **announce)
    try:
        await task
    finally:
        sock.close()


def _announce(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def _backends() -> None:
    """Serve the rooms and orders demo backends until SIGTERM."""
    import signal

    from backends.orders import create_orders_app
    from backends.rooms import create_rooms_app
    from backends.serve import serve_app

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        rooms = await stack.enter_async_context(
            serve_app(
                create_rooms_app(
                    service_token=os.environ[ROOMS_TOKEN_ENV], signing_key=os.environ[ROOMS_SIGNING_KEY_ENV]
                )
            )
        )
        orders = await stack.enter_async_context(
            serve_app(
                create_orders_app(
                    service_token=os.environ[ORDERS_TOKEN_ENV], signing_key=os.environ[ORDERS_SIGNING_KEY_ENV]
                )
            )
        )
        _announce(rooms=rooms, orders=orders, pid=os.getpid())
        await stop.wait()


# --- the gateway --------------------------------------------------------------------------------


UNBOUNDED_LIMITS = {
    "reads": {"per_minute": 1e12, "burst": 10**12},
    "proposals": {"per_minute": 1e12, "burst": 10**12},
    "open_cards_per_requester": 10**12,
}
"""Budgets every check passes: the load of the overhead benchmarks comes from one key, far past the
default budgets (and its tens of thousands of PENDING cards past the open-card cap), and the check
still runs on every call (its cost is part of what they measure)."""


async def _gateway(
    redis_url: str, rooms_url: str, orders_url: str, *, run_worker: bool = True, default_limits: bool = False
) -> None:
    from starlette.datastructures import Secret

    from gateway.config.settings import AdapterSettings, Settings
    from gateway.limits.budgets import Limits
    from gateway.runtime.app import create_app

    settings = Settings(
        redis_url=redis_url,
        adapters={
            "rooms": AdapterSettings(
                name="rooms",
                url=rooms_url,
                token=Secret(os.environ[ROOMS_TOKEN_ENV]),
                signing_key=Secret(os.environ[ROOMS_SIGNING_KEY_ENV]),
            ),
            "orders": AdapterSettings(
                name="orders",
                url=orders_url,
                token=Secret(os.environ[ORDERS_TOKEN_ENV]),
                signing_key=Secret(os.environ[ORDERS_SIGNING_KEY_ENV]),
            ),
        },
        run_worker=run_worker,
        audit_secret=Secret(os.urandom(32).hex()),
        limits=Limits() if default_limits else Limits.model_validate(UNBOUNDED_LIMITS),
        # Entries past the retention are archived: into a directory of this run, never the working tree's
        # ./.countersign, where the CLI (and its tests) would read them as the trail's.
        data_dir=Path(tempfile.mkdtemp(prefix="bench-gateway-")),
    )
    if run_worker:
        await _first_signing_key(settings)
    await _serve(create_app(settings), run_worker=run_worker)


async def _first_signing_key(settings: Any) -> None:
    """What an operator's first ``countersign signing-keys rotate`` does, before the gateway starts.

    Production never makes a signing key itself, and without one an approved write waits APPROVED,
    unsent (it needs an approval receipt): a worker gateway without this step executes nothing.
    """
    import redis.asyncio as aioredis

    from gateway.audit.secret import audit_secret
    from gateway.runtime.demo import ensure_signing_key
    from gateway.store.signing_keys import SigningKeyStore

    client = aioredis.from_url(settings.redis_url)
    try:
        await ensure_signing_key(SigningKeyStore(client, secret=audit_secret(settings)))
    finally:
        await client.aclose()


# --- the bare SDK server ------------------------------------------------------------------------


@dataclass
class _Clients:
    """The bare server's two shared clients, opened in the app's lifespan."""

    http: Any = None
    redis: Any = None


def _signed_identity() -> dict[str, str]:
    """The identity headers the gateway would send the rooms backend for the bench caller, signed per call."""
    from gateway.principal import Principal
    from gateway.signing.identity import IdentityHeaders

    caller = Principal(subject=SUBJECT, org=ORG, roles=frozenset())
    return IdentityHeaders({"rooms": os.environ[ROOMS_SIGNING_KEY_ENV]})(caller, "rooms")


def bare_app(redis_url: str, rooms_url: str, rooms_token: str) -> Any:
    """A Starlette app serving one MCP tool over the gateway's transport configuration."""
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import INVALID_PARAMS

    clients = _Clients()
    tool = types.Tool(
        name=TOOL_NAME,
        description="Show when a meeting room is taken on one day.",
        input_schema=AVAILABILITY_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True),
    )

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != TOOL_NAME:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name}")
        arguments = params.arguments or {}
        url = f"/rooms/{quote(str(arguments['room_id']), safe='')}/availability"
        headers = _signed_identity()
        async with clients.http.get(url, params={"date": str(arguments["date"])}, headers=headers) as response:
            if response.status != 200:
                text = json.dumps({"error": f"backend answered {response.status}"})
                return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
            data = await response.json()
        await clients.redis.xadd(BARE_AUDIT_STREAM, {"action": "tool.call", "tool": TOOL_NAME, "outcome": "ok"})
        text = json.dumps(data, separators=(",", ":"))
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=data)

    server: Server[Any] = Server(
        "bare",
        version="0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema={TOOL_NAME: AVAILABILITY_SCHEMA}.get,
    )
    return sdk_app(server, _open_clients(clients, redis_url, rooms_url, rooms_token))


def _open_clients(
    clients: _Clients, redis_url: str, rooms_url: str, rooms_token: str
) -> Callable[[], contextlib.AbstractAsyncContextManager[None]]:
    """Open the bare servers' shared aiohttp session and Redis client for the app's lifetime."""
    import aiohttp
    import redis.asyncio as aioredis

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=200, limit_per_host=200)
        async with aiohttp.ClientSession(
            base_url=rooms_url,
            connector=connector,
            headers={"authorization": f"Bearer {rooms_token}"},
            timeout=aiohttp.ClientTimeout(total=10.0, connect=2.0),
        ) as http:
            clients.http = http
            clients.redis = aioredis.from_url(redis_url, decode_responses=False, health_check_interval=30)
            try:
                yield
            finally:
                await clients.redis.aclose()

    return opened


def sdk_app(server: Any, open_clients: Callable[[], contextlib.AbstractAsyncContextManager[None]]) -> Any:
    """`server` behind the gateway's transport configuration, as a Starlette app serving ``/mcp``."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
    )
    manager = StreamableHTTPSessionManager(
        app=server, stateless=False, security_settings=security, session_idle_timeout=600.0
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_clients(), manager.run():
            yield

    endpoint = StreamableHTTPASGIApp(manager)
    return Starlette(routes=[Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"])], lifespan=lifespan)


async def _bare(redis_url: str, rooms_url: str) -> None:
    await _serve(bare_app(redis_url, rooms_url, os.environ[ROOMS_TOKEN_ENV]))


# --- the bare write server ----------------------------------------------------------------------

WRITE_TOOL = "rooms_book"
CHECKED_WRITE_TOOL = "rooms_book_checked"
BARE_KEY_ID = "key_000000bench"
"""The requester key id the bare server puts on its cards (the length of a real key id)."""


def bare_write_app(redis_url: str, rooms_url: str, rooms_token: str) -> Any:
    """A Starlette app whose tools file one approval card per call, through the gateway's own ledger."""
    import hashlib

    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import INVALID_PARAMS

    from adapters.rooms import TOOLS
    from gateway.cards.contract import Proposal
    from gateway.cards.views import card_for_agent
    from gateway.store.ledger.redis_ledger import RedisLedger
    from gateway.tools.declarations import definition_hash

    book = next(tool for tool in TOOLS if tool.name == WRITE_TOOL)
    approval = book.approval
    if approval is None:
        raise RuntimeError(f"{WRITE_TOOL} has no approval policy")
    tool_version = definition_hash(book)  # what the gateway stores as the card's tool_version
    schema = book.arguments.model_json_schema()
    clients = _Clients()
    ledgers: list[RedisLedger] = []
    definitions = [
        types.Tool(name=name, description=book.description, input_schema=schema)
        for name in (WRITE_TOOL, CHECKED_WRITE_TOOL)
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=definitions)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in (WRITE_TOOL, CHECKED_WRITE_TOOL):
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name}")
        args = {key: str(value) for key, value in (params.arguments or {}).items()}
        if params.name == CHECKED_WRITE_TOOL:  # the gateway's preview reads, both at once, as rooms_book's
            headers = _signed_identity()
            availability = f"/rooms/{quote(args['room_id'], safe='')}/availability"
            statuses = await asyncio.gather(
                _read(clients.http, "/rooms", headers=headers),
                _read(clients.http, availability, params={"date": args["date"]}, headers=headers),
            )
            if any(status != 200 for status in statuses):
                text = json.dumps({"error": f"backend answered {statuses}"})
                return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
        canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        args_hash = hashlib.sha256(f"{WRITE_TOOL}\n{tool_version}\n{canonical}".encode()).hexdigest()
        proposal = Proposal(
            tool=WRITE_TOOL,
            tool_version=tool_version,
            arguments=args,
            args_hash=args_hash,
            requester_subject=SUBJECT,
            requester_org=ORG,
            requester_key_id=BARE_KEY_ID,
            requester_roles=frozenset({"staff"}),
            approvals_required=approval.required,
            approver_role=approval.approver_role,
            summary=f"Book {args['room_id']} on {args['date']} from {args['start']} to {args['end']}",
            agent_text={"title": args["title"]},
            decide_within_ms=int(approval.decide_within_seconds * 1000),
            execute_within_ms=int(approval.execute_within_seconds * 1000),
            dedupe_key=f"{ORG}|{SUBJECT}|{WRITE_TOOL}|{args_hash}",
        )
        created = await ledgers[0].propose(proposal)
        if created.card is None:
            raise RuntimeError(f"ledger answered {created.status} to a proposal")
        await clients.redis.xadd(BARE_AUDIT_STREAM, {"action": "card.propose", "tool": WRITE_TOOL, "outcome": "ok"})
        receipt = card_for_agent(created.card, existing=created.status == "EXISTING")
        text = json.dumps(receipt, ensure_ascii=False, separators=(",", ":"))
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=receipt)

    server: Server[Any] = Server(
        "bare-write",
        version="0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema={WRITE_TOOL: schema, CHECKED_WRITE_TOOL: schema}.get,
    )
    open_clients = _open_clients(clients, redis_url, rooms_url, rooms_token)

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[None]:
        async with open_clients():
            from gateway.limits.budgets import Limits

            # The same cap as the gateway's (UNBOUNDED_LIMITS): the script counts it either way.
            ledgers.append(RedisLedger(clients.redis, limits=Limits.model_validate(UNBOUNDED_LIMITS)))
            yield

    return sdk_app(server, opened)


async def _read(http: Any, url: str, **options: Any) -> int:
    """One backend GET, its body read and parsed as the gateway's client does; its status."""
    async with http.get(url, **options) as response:
        if response.status == 200:
            await response.json()
        return int(response.status)


async def _bare_write(redis_url: str, rooms_url: str) -> None:
    await _serve(bare_write_app(redis_url, rooms_url, os.environ[ROOMS_TOKEN_ENV]))


# --- entry point --------------------------------------------------------------------------------


def run_loop(main: Coroutine[Any, Any, None], loop_name: str) -> None:
    """Run `main` on uvloop (what uvicorn picks by default when installed) or the stdlib loop."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


PROFILE_DIR_ENV = "BENCH_PROFILE_DIR"
"""With this set, SIGUSR1 starts a deterministic profile (cProfile) of the server's main thread and SIGUSR2
ends it, writing ``<dir>/<pid>.<n>.prof`` (`bench/call_counts.py`)."""


def _profile_on_signals(out_dir: Path) -> None:
    import cProfile
    import signal

    running: list[cProfile.Profile] = []

    def start(_signum: int, _frame: Any) -> None:
        if not running:
            running.append(cProfile.Profile())
            running[0].enable()

    def stop(_signum: int, _frame: Any) -> None:
        if running:
            profile = running.pop()
            profile.disable()
            done = len(list(out_dir.glob(f"{os.getpid()}.*.prof")))
            partial = out_dir / f"{os.getpid()}.{done}.partial"
            profile.dump_stats(partial)
            partial.replace(out_dir / f"{os.getpid()}.{done}.prof")  # whole or absent for the reader

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


def main(argv: list[str] | None = None) -> None:
    if os.environ.get(PROFILE_DIR_ENV):
        _profile_on_signals(Path(os.environ[PROFILE_DIR_ENV]))
    parser = argparse.ArgumentParser(prog="python -m bench._servers")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    sub = parser.add_subparsers(dest="kind", required=True)
    sub.add_parser("backends")
    for kind in ("gateway", "bare", "bare-write"):
        each = sub.add_parser(kind)
        each.add_argument("--redis-url", required=True)
        each.add_argument("--rooms-url", required=True)
        each.add_argument("--orders-url", required=kind == "gateway")
        if kind == "gateway":
            each.add_argument("--no-worker", action="store_true", help="Settings(run_worker=False)")
            each.add_argument("--default-limits", action="store_true", help="Limits() instead of unbounded budgets")
    args = parser.parse_args(argv)
    try:
        if args.kind == "backends":
            coroutine = _backends()
        elif args.kind == "gateway":
            coroutine = _gateway(
                args.redis_url,
                args.rooms_url,
                args.orders_url,
                run_worker=not args.no_worker,
                default_limits=args.default_limits,
            )
        elif args.kind == "bare-write":
            coroutine = _bare_write(args.redis_url, args.rooms_url)
        else:
            coroutine = _bare(args.redis_url, args.rooms_url)
        run_loop(coroutine, args.loop)
    except Exception as error:
        _announce(error=f"{type(error).__name__}: {error}")
        raise


if __name__ == "__main__":
    main()
