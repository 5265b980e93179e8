"""Run an ASGI app under a real uvicorn on loopback, for tests and the demo.

Two shapes of one thing:

* :func:`serve_app`, an async context manager running the server as a task in the caller's asyncio loop;
* :func:`serve_app_in_thread`, a sync context manager running it in a daemon thread with its own loop,
  for sync fixtures and scripts.

Both bind the listening socket themselves and hand it to ``uvicorn.Server.serve(sockets=...)``, so
``port=0`` picks a free port whose number is known before the server starts. Both wait for
``server.started`` by polling with a bound (never a fixed sleep), yield the base URL
(``http://127.0.0.1:<port>``) and stop with ``should_exit = True``, waiting for the server to finish.
Close clients before leaving the block: uvicorn waits for open connections to finish their responses
(at most ``GRACEFUL_SHUTDOWN_SECONDS``, then it cancels them).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio
import uvicorn
from starlette.types import ASGIApp

from gateway.runtime.stopping import QuietServer

STARTUP_TIMEOUT_SECONDS = 5.0
SHUTDOWN_TIMEOUT_SECONDS = 10.0
GRACEFUL_SHUTDOWN_SECONDS = 3
"""Bound on in-flight requests at shutdown, so a request held by a ``hang`` fault cannot block a stop."""
_POLL_SECONDS = 0.005


@asynccontextmanager
async def serve_app(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *, lifespan: bool = False
) -> AsyncIterator[str]:
    """Serve ``app`` in the running asyncio loop and yield its base URL.

    Raises:
        TimeoutError: if the server has not started within ``STARTUP_TIMEOUT_SECONDS``.
        RuntimeError: if the server stopped before it started.
    """
    sock = _bind(host, port)
    server = QuietServer(_config(app, host, port, lifespan))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_TIMEOUT_SECONDS
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn stopped before it started")
            if loop.time() > deadline:
                raise TimeoutError(f"uvicorn did not start within {STARTUP_TIMEOUT_SECONDS} s")
            await asyncio.sleep(_POLL_SECONDS)
        yield _base_url(sock)
    finally:
        server.should_exit = True
        # Shielded: if the block was cancelled, the server must still shut down and release the port.
        with anyio.CancelScope(shield=True):
            try:
                await asyncio.wait_for(task, SHUTDOWN_TIMEOUT_SECONDS)
            finally:
                sock.close()


@contextmanager
def serve_app_in_thread(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *, lifespan: bool = False
) -> Iterator[str]:
    """Serve ``app`` from a daemon thread with its own event loop and yield its base URL.

    Raises:
        TimeoutError: if the server has not started within ``STARTUP_TIMEOUT_SECONDS``, or has not
            stopped within ``SHUTDOWN_TIMEOUT_SECONDS`` of leaving the block.
        RuntimeError: if the server stopped before it started.
    """
    sock = _bind(host, port)
    server = QuietServer(_config(app, host, port, lifespan))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("uvicorn stopped before it started")
            if time.monotonic() > deadline:
                raise TimeoutError(f"uvicorn did not start within {STARTUP_TIMEOUT_SECONDS} s")
            time.sleep(_POLL_SECONDS)
        yield _base_url(sock)
    finally:
        server.should_exit = True
        thread.join(SHUTDOWN_TIMEOUT_SECONDS)
        sock.close()
        if thread.is_alive():
            raise TimeoutError(f"uvicorn did not stop within {SHUTDOWN_TIMEOUT_SECONDS} s")


def _config(app: ASGIApp, host: str, port: int, lifespan: bool) -> uvicorn.Config:
    # ws="none": these are plain HTTP services, and loading a websockets protocol is needless import work.
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        # No logging config of uvicorn's own: its records go through whatever the program set up (the
        # gateway's JSON or plain lines), rather than a second format on the same stream.
        log_config=None,
        # Backends have no lifespan; the gateway's app needs its own (it runs the MCP session manager).
        lifespan="on" if lifespan else "off",
        ws="none",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


def _bind(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP explicitly: asyncio's default loop sets TCP_NODELAY on accepted connections only
    # for sockets that say so, and without it small responses stall ~40 ms (Nagle + delayed ACK).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
