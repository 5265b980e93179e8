"""Real MCP servers nobody here wrote, pinned, installed from their registries into a cache, for the upstream tests.

`install_filesystem_server()` and `install_everything_server()` install ``@modelcontextprotocol/server-filesystem``
and ``@modelcontextprotocol/server-everything`` from npm with the packaged Node 22 (``node-<platform>-<arch>``, as
`tests.support.conformance_suite` installs it); `install_git_server()` installs ``mcp-server-git`` from PyPI into a
virtual environment of its own (never the gateway's). All go under ``~/.cache/countersign/mcp-servers``
(``COUNTERSIGN_CONFORMANCE_CACHE``'s sibling when that is set), once per version. With ``CI`` set the tests that
need them fail rather than skip when they cannot be installed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from starlette.datastructures import Secret

from gateway.config.settings import OrgSettings, Settings
from gateway.config.upstreams import UpstreamSection
from tests.support.cached_install import install_once, npm_install, run_step
from tests.support.conformance_suite import NODE_VERSION, SuiteUnavailableError, _node_package
from tests.support.processes import end_process
from tests.support.services import TEST_AUDIT_SECRET

__all__ = [
    "EVERYTHING_EARLIER_VERSION",
    "EVERYTHING_VERSION",
    "changing_over_http",
    "fronting_settings",
    "FILESYSTEM_VERSION",
    "GIT_VERSION",
    "NodeServer",
    "install_everything_server",
    "install_everything_servers",
    "install_filesystem_server",
    "git_over_http",
    "install_git_server",
    "installed_or_skipped",
    "serving_over_http",
]

FILESYSTEM_VERSION = "2026.8.31"
GIT_VERSION = "2026.10.19"
EVERYTHING_VERSION = "2026.8.31"
EVERYTHING_EARLIER_VERSION = "2025.11.25"
INSTALL_TIMEOUT_SECONDS = 600.0

T = TypeVar("T")


def install_everything_servers() -> dict[str, NodeServer]:
    """Both pinned versions of the everything server, by version: a test upgrades one to the other in place."""
    return {version: install_everything_server(version) for version in (EVERYTHING_EARLIER_VERSION, EVERYTHING_VERSION)}


def installed_or_skipped(what: str, install: Callable[[], T]) -> T:
    """`install()`'s answer; when it cannot install, the test fails with ``CI`` set and skips elsewhere."""
    try:
        return install()
    except SuiteUnavailableError as error:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is required in CI: {error}")
        pytest.skip(f"{what} cannot be installed here: {error}")


@dataclass(frozen=True)
class NodeServer:
    node: Path
    """The Node 22 binary."""
    entry: Path
    """The server's entry script (run it with `node`)."""


def files_upstream_config(server: NodeServer, root: Path, roles: tuple[str, ...]) -> str:
    """A config file fronting the filesystem `server` over stdio as upstream ``files``, serving `root`, for org
    ``acme`` with `roles`."""
    return f"""
[upstreams.files]
transport = "stdio"
command = "{server.node}"
args = ["{server.entry}", "{root}"]

[orgs.acme]
adapters = ["files"]
roles = {json.dumps(list(roles))}
"""


def fronting_settings(
    redis_url: str, name: str, section: UpstreamSection, roles: tuple[str, ...] = ("staff",), **more: Any
) -> Settings:
    """The settings of a gateway that fronts `section` as upstream `name` for org ``acme`` (with `roles`) and serves
    no other backend; `more` sets anything else."""
    org = OrgSettings(name="acme", adapters=frozenset({name}), roles=frozenset(roles))
    return Settings(
        redis_url=redis_url,
        adapters={},
        orgs=(org,),
        upstreams={name: section},
        audit_secret=Secret(TEST_AUDIT_SECRET),
        **more,
    )


def _cache_root() -> Path:
    configured = os.environ.get("COUNTERSIGN_CONFORMANCE_CACHE")
    base = Path(configured).parent if configured else Path.home() / ".cache" / "countersign"
    return base / "mcp-servers"


def _located(prefix: Path, server: str) -> NodeServer:
    modules = prefix / "node_modules"
    return NodeServer(
        node=modules / _node_package() / "bin" / "node",
        entry=modules / "@modelcontextprotocol" / server / "dist" / "index.js",
    )


def install_filesystem_server() -> NodeServer:
    """The pinned filesystem server and Node, installed first if the cache does not hold them.

    Raises:
        SuiteUnavailableError: npm is missing, the install failed, or its result lacks either file.
    """
    return _install_node_server("server-filesystem", FILESYSTEM_VERSION)


def install_everything_server(version: str = EVERYTHING_VERSION) -> NodeServer:
    """A pinned version of the "everything" server (`EVERYTHING_VERSION`, or `EVERYTHING_EARLIER_VERSION`,
    whose ``echo`` is defined differently: an upstream upgrade that changes a reviewed tool)."""
    if version not in (EVERYTHING_VERSION, EVERYTHING_EARLIER_VERSION):
        raise ValueError(f"server-everything {version} is not one of the pinned versions")
    return _install_node_server("server-everything", version)


def _install_node_server(server: str, version: str) -> NodeServer:
    prefix = _cache_root() / f"node-{NODE_VERSION}-{server}-{version}"
    packages = [f"{_node_package()}@{NODE_VERSION}", f"@modelcontextprotocol/{server}@{version}"]
    install_once(
        prefix,
        lambda scratch: npm_install(scratch, packages, error=SuiteUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS),
        lambda place: _located(place, server).node.is_file() and _located(place, server).entry.is_file(),
        error=SuiteUnavailableError,
    )
    return _located(prefix, server)


def install_git_server() -> Path:
    """The pinned ``mcp-server-git`` executable, in a virtual environment of its own, installed first if needed.

    Raises:
        SuiteUnavailableError: no ``git`` on PATH, or the environment or the install failed.
    """
    if shutil.which("git") is None:
        raise SuiteUnavailableError("git is not on PATH; mcp-server-git drives it")
    prefix = _cache_root() / f"mcp-server-git-{GIT_VERSION}"

    def build(scratch: Path) -> None:
        venv = [sys.executable, "-m", "venv", str(scratch)]
        run_step(venv, error=SuiteUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS, what="venv")
        pip = [str(scratch / "bin" / "python"), "-m", "pip", "install", "--quiet", f"mcp-server-git=={GIT_VERSION}"]
        run_step(pip, error=SuiteUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS, what="pip install")
        # The venv's scripts name their interpreter by path: point them at the place it is renamed to.
        _repoint(scratch, prefix)

    install_once(prefix, build, lambda place: (place / "bin" / "mcp-server-git").is_file(), error=SuiteUnavailableError)
    return prefix / "bin" / "mcp-server-git"


def _repoint(built_at: Path, prefix: Path) -> None:
    """A venv built at `built_at`, to be moved to `prefix`: its scripts' first lines name the interpreter there."""
    for script in (built_at / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            head = script.read_bytes()[:2]
            if head == b"#!":
                script.write_text(script.read_text().replace(str(built_at), str(prefix), 1))
    config = built_at / "pyvenv.cfg"
    config.write_text(config.read_text().replace(str(built_at), str(prefix)))


if __name__ == "__main__":  # `.ci/run`: install ahead of the tests, and say where
    server = install_filesystem_server()
    print(f"server-filesystem {FILESYSTEM_VERSION} on Node {NODE_VERSION}: {server.entry}")
    print(f"mcp-server-git {GIT_VERSION}: {install_git_server()}")
    for version in (EVERYTHING_VERSION, EVERYTHING_EARLIER_VERSION):
        print(f"server-everything {version}: {install_everything_server(version).entry}")


@asynccontextmanager
async def serving_over_http(server: NodeServer, port: int, log: Path) -> AsyncIterator[str]:
    """The everything server over Streamable HTTP on `port` while the block runs (its output appended to `log`);
    its URL once it accepts connections. Stopped on exit."""
    command = [str(server.node), str(server.entry), "streamableHttp"]
    with log.open("ab") as output:
        env = {"PORT": str(port), "PATH": os.environ.get("PATH", "")}
        async with _listening(subprocess.Popen(command, env=env, stdout=output, stderr=output), port) as url:
            yield url


@asynccontextmanager
async def git_over_http(
    git_server: Path, repository: Path, port: int, headers: Path, sessions: Path | None = None
) -> AsyncIterator[str]:
    """mcp-server-git over Streamable HTTP on `port` (`tests.support.git_over_http`, run by the git server's own
    interpreter) while the block runs, each request's Authorization header appended to `headers` (and its session
    id to `sessions`, when given)."""
    launcher = Path(__file__).with_name("git_over_http.py")
    command = [str(git_server.parent / "python"), str(launcher), str(port), str(repository), str(headers)]
    command += [str(sessions)] if sessions is not None else []
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    async with _listening(process, port) as url:
        yield url


@asynccontextmanager
async def changing_over_http(port: int, log: Path) -> AsyncIterator[str]:
    """`tests.support.changing_server` (a tool redefined on ``POST /change``) over Streamable HTTP on `port` while the
    block runs, run by this interpreter (its MCP SDK), its output appended to `log`."""
    command = [sys.executable, "-m", "tests.support.changing_server", str(port)]
    root = Path(__file__).parents[2]
    with log.open("ab") as output:
        process = subprocess.Popen(command, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=output,
                                   stderr=output)  # fmt: skip
        async with _listening(process, port) as url:
            yield url


@asynccontextmanager
async def _listening(process: subprocess.Popen[bytes], port: int) -> AsyncIterator[str]:
    """``/mcp`` on `port` once `process` accepts connections there (bounded); `process` is stopped on exit: asked
    to (SIGTERM), then killed if it has not exited within 5 s (a server waiting on a client's open stream)."""
    try:
        with anyio.fail_after(30):
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the MCP server on port {port} exited ({process.returncode})")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    await anyio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        end_process(process, grace_seconds=5)
