"""The official MCP conformance suite and the Node 22 it needs, installed from the npm registry into a cache.

Both are npm packages pinned here: ``node-<platform>-<arch>`` (Node's own binary, packaged; the
machine's Node may be older than the suite accepts) and ``@modelcontextprotocol/conformance``. They
are installed once per version pair with the machine's ``npm`` into
``$COUNTERSIGN_CONFORMANCE_CACHE`` (default ``~/.cache/countersign/conformance``), into a scratch
directory renamed into place only when complete, so an interrupted install is never mistaken for one.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.cached_install import install_once, npm_install

__all__ = ["NODE_VERSION", "SUITE_VERSION", "Suite", "SuiteUnavailableError", "install_suite"]

NODE_VERSION = "22.23.5"
SUITE_VERSION = "0.2.0-alpha.12"
INSTALL_TIMEOUT_SECONDS = 600.0

_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


class SuiteUnavailableError(RuntimeError):
    """The suite or its Node could not be found or installed (no npm, no registry, unknown platform)."""


@dataclass(frozen=True)
class Suite:
    node: Path
    """The Node 22 binary."""
    entry: Path
    """The suite's command-line entry point (run it with `node`)."""

    def command(self, *args: str) -> list[str]:
        return [str(self.node), str(self.entry), *args]


def _node_package() -> str:
    arch = _ARCH.get(platform.machine().lower())
    if sys.platform not in ("linux", "darwin") or arch is None:
        raise SuiteUnavailableError(f"no packaged Node for {sys.platform}/{platform.machine()}")
    return f"node-{sys.platform}-{arch}"


def _cache_root() -> Path:
    configured = os.environ.get("COUNTERSIGN_CONFORMANCE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "countersign" / "conformance"


def _located(prefix: Path) -> Suite:
    modules = prefix / "node_modules"
    return Suite(
        node=modules / _node_package() / "bin" / "node",
        entry=modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
    )


def install_suite() -> Suite:
    """The pinned suite and Node, installed first if the cache does not hold them.

    Raises:
        SuiteUnavailableError: npm is missing, the install failed, or its result lacks either file.
    """
    prefix = _cache_root() / f"node-{NODE_VERSION}-suite-{SUITE_VERSION}"
    packages = [f"{_node_package()}@{NODE_VERSION}", f"@modelcontextprotocol/conformance@{SUITE_VERSION}"]
    install_once(
        prefix,
        lambda scratch: npm_install(scratch, packages, error=SuiteUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS),
        lambda place: _located(place).node.is_file() and _located(place).entry.is_file(),
        error=SuiteUnavailableError,
    )
    return _located(prefix)


if __name__ == "__main__":  # `.ci/run`: install ahead of the tests, and say where
    found = install_suite()
    print(f"conformance suite {SUITE_VERSION} on Node {NODE_VERSION}: {found.entry}")
