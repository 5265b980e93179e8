"""SIGINT and SIGTERM for a long-running command, from its first line to its last.

`countersign serve` enters a `Stopper` before it starts anything, so a signal is never the default
one that kills the process and leaves its embedded Valkey running. Until a server is handed over
(`serving`), a signal cancels `scope`, which wraps the startup: whatever was started (the embedded
server, the demo backends) is stopped by its own context manager on the way out. Once the server
runs, the first signal asks it to stop (uvicorn finishes open requests for its graceful timeout), a
second forces it, and if it still runs `force_after` seconds after the first, `scope` is cancelled
anyway, so a stop never takes longer than that plus the resources' own bounded shutdowns.

uvicorn's own signal capture is off in these servers (`QuietServer`): it would re-raise the signal
once its server stopped, killing the process before the rest is stopped. The demo backends and the
tests' servers (`backends.serve`) run as `QuietServer` too.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Protocol

import anyio
import uvicorn

__all__ = ["FORCE_AFTER_SECONDS", "QuietServer", "Stoppable", "Stopper"]

FORCE_AFTER_SECONDS = 6.0
"""From the first signal to cancelling outright: uvicorn's 3 s grace, plus the lifespan's shutdown."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stoppable(Protocol):
    """What uvicorn's `Server` offers for stopping it from outside."""

    should_exit: bool
    force_exit: bool


class QuietServer(uvicorn.Server):
    """A uvicorn server that leaves process signals alone.

    These servers live inside another program (`countersign serve`, the demo backends it starts, a
    test), which decides when they stop by setting `should_exit`. uvicorn's own capture would replace
    the program's SIGINT/SIGTERM handlers and re-raise the signal after stopping, killing the program
    before it has cleaned up.
    """

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Stopper:
    """Owns SIGINT and SIGTERM inside its ``with`` block (entered in the running loop)."""

    def __init__(self, *, force_after: float = FORCE_AFTER_SECONDS) -> None:
        self.scope = anyio.CancelScope()
        """Wraps the startup and the server; cancelled by a signal before `serving`, or when forced."""
        self.signalled = False
        self._force_after = force_after
        self._server: Stoppable | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def __enter__(self) -> Stopper:
        self._loop = asyncio.get_running_loop()
        for signum in _SIGNALS:
            self._loop.add_signal_handler(signum, self._on_signal)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._loop is not None:
            for signum in _SIGNALS:
                self._loop.remove_signal_handler(signum)

    def serving(self, server: Stoppable) -> None:
        """From now on a signal stops `server` gracefully rather than cancelling the startup."""
        self._server = server
        if self.signalled:  # a signal raced the hand-over: honour it
            server.should_exit = True

    def _on_signal(self) -> None:
        first = not self.signalled
        self.signalled = True
        server = self._server
        if server is None:
            self.scope.cancel()
            return
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True
        if first and self._loop is not None:
            self._timer = self._loop.call_later(self._force_after, self.scope.cancel)
