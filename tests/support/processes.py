"""`countersign` as a user runs it: a real process, its output, its children, the ports it listens on;
and how a test ends any child process it started (`end_process`).

Read from ``/proc`` (Linux), so a test can say "no process was left behind" and "this process
listens on exactly one port" about the real process tree rather than about what it printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "Serve",
    "children_of",
    "clean_environ",
    "end_process",
    "listening_ports",
    "processes_using",
    "serve",
]

READY = "Press Ctrl-C to stop."
START_SECONDS = 30.0
KILLED_SECONDS = 10.0
"""Bound on reaping a process after SIGKILL, which it cannot delay."""


def end_process(process: subprocess.Popen[Any], grace_seconds: float) -> None:
    """Ask `process` to exit (SIGTERM), kill it if it has not within `grace_seconds`, and reap it either way."""
    process.terminate()
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=KILLED_SECONDS)


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without any ``COUNTERSIGN_`` variable, plus `extra`."""
    return {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")} | extra


class Serve:
    """A running ``python -m gateway`` process whose output goes to a file."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = START_SECONDS) -> str:
        """The output once it holds `text` (bounded poll); fails if the process exits first."""
        deadline = time.monotonic() + timeout
        while text not in (output := self.output()):
            assert self.process.poll() is None, f"exited with {self.process.returncode} before {text!r}:\n{output}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{output}"
            time.sleep(0.05)
        return output

    def stop(self, signum: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> tuple[int, float]:
        """Send `signum`; return the exit status and the seconds it took to exit (fails past `timeout`)."""
        started = time.monotonic()
        self.process.send_signal(signum)
        status = self.process.wait(timeout=timeout)
        return status, time.monotonic() - started


@contextmanager
def serve(cwd: Path, *args: str, environ: Mapping[str, str] | None = None, name: str = "serve") -> Iterator[Serve]:
    """Start ``python -m gateway <args>`` in `cwd`; on exit kill it if it still runs."""
    log = cwd / f"{name}-{time.monotonic_ns()}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", *args],
            cwd=cwd,
            env=dict(environ) if environ is not None else clean_environ(),
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Serve(process, log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from any of its threads)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces; the fields after it are plain.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def processes_using(path: Path) -> list[int]:
    """Live processes whose working directory or command line names `path` (or a path under it)."""
    target = str(path.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == target or cwd.startswith(target + "/") or target in cmdline):
            found.append(int(entry.name))
    return found


def listening_ports(pid: int) -> set[int]:
    """The TCP ports `pid` itself listens on (its own sockets, not its children's)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
