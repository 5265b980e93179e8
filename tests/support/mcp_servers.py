"""Real MCP servers nobody here wrote, pinned, installed from the npm registry into a cache, for the upstream tests.

`install_filesystem_server()` installs ``@modelcontextprotocol/server-filesystem`` with the packaged Node 22
(``node-<platform>-<arch>``, as `tests.support.conformance_suite` installs it) under
``~/.cache/countersign/mcp-servers`` (``COUNTERSIGN_CONFORMANCE_CACHE``'s sibling when that is set), once
per version pair. With ``CI`` set the tests that need it fail rather than skip when it cannot be installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.conformance_suite import NODE_VERSION, SuiteUnavailableError, _node_package

__all__ = ["FILESYSTEM_VERSION", "NodeServer", "install_filesystem_server"]

FILESYSTEM_VERSION = "2026.8.31"
INSTALL_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class NodeServer:
    node: Path
    """The Node 22 binary."""
    entry: Path
    """The server's entry script (run it with `node`)."""


def _cache_root() -> Path:
    configured = os.environ.get("COUNTERSIGN_CONFORMANCE_CACHE")
    base = Path(configured).parent if configured else Path.home() / ".cache" / "countersign"
    return base / "mcp-servers"


def _located(prefix: Path) -> NodeServer:
    modules = prefix / "node_modules"
    return NodeServer(
        node=modules / _node_package() / "bin" / "node",
        entry=modules / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js",
    )


def install_filesystem_server() -> NodeServer:
    """The pinned filesystem server and Node, installed first if the cache does not hold them.

    Raises:
        SuiteUnavailableError: npm is missing, the install failed, or its result lacks either file.
    """
    prefix = _cache_root() / f"node-{NODE_VERSION}-server-filesystem-{FILESYSTEM_VERSION}"
    found = _located(prefix)
    if found.node.is_file() and found.entry.is_file():
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise SuiteUnavailableError("npm is not on PATH, and the filesystem server is not in the cache")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".install-", dir=prefix.parent))
    try:
        server = f"@modelcontextprotocol/server-filesystem@{FILESYSTEM_VERSION}"
        packages = [f"{_node_package()}@{NODE_VERSION}", server]
        done = subprocess.run(
            [npm, "install", "--prefix", str(scratch), "--no-save", "--no-audit", "--no-fund", "--loglevel=error",
             *packages],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_SECONDS,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SuiteUnavailableError(f"npm install failed ({done.returncode}): {done.stderr[-2000:]}")
        if not (_located(scratch).node.is_file() and _located(scratch).entry.is_file()):
            raise SuiteUnavailableError("npm install finished but the server or Node is missing from it")
        try:
            scratch.rename(prefix)
        except OSError:  # another run finished the same install first; theirs is as good
            if not (found.node.is_file() and found.entry.is_file()):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return found


if __name__ == "__main__":  # `.ci/run`: install ahead of the tests, and say where
    server = install_filesystem_server()
    print(f"server-filesystem {FILESYSTEM_VERSION} on Node {NODE_VERSION}: {server.entry}")
