"""A command run on a real pseudo-terminal: what it prints, and what a person types to it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
from collections.abc import Mapping, Sequence

import anyio

__all__ = ["Terminal"]


class Terminal:
    """`argv` as a child process whose stdin, stdout and stderr are one pty (so ``isatty()`` is true)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        master, child = pty.openpty()
        self._process = subprocess.Popen(list(argv), stdin=child, stdout=child, stderr=child, env=dict(env))
        os.close(child)
        self._master = master
        self.output = ""

    def _read(self) -> str:
        ready, _, _ = select.select([self._master], [], [], 0.2)
        if not ready:
            return ""
        try:
            return os.read(self._master, 65536).decode(errors="replace")
        except OSError:  # EIO: the child closed the terminal
            return ""

    async def expect(self, text: str, *, timeout: float = 30) -> str:
        """Everything printed so far, once it holds `text`."""
        with anyio.fail_after(timeout):
            while text not in self.output:
                self.output += await anyio.to_thread.run_sync(self._read)
        return self.output

    def type(self, line: str) -> None:
        os.write(self._master, line.encode() + b"\n")

    async def exit_status(self, *, timeout: float = 30) -> int:
        """The child's exit status, once it has ended; what it printed up to then is in `output`."""
        with anyio.fail_after(timeout):
            while (status := self._process.poll()) is None:
                self.output += await anyio.to_thread.run_sync(self._read)
        self.output += self._read()
        return status

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)
        os.close(self._master)
