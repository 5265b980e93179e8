"""The MCP Inspector CLI, pinned, installed from the npm registry into a cache, run on the suite's Node 22.

``@modelcontextprotocol/inspector`` is the command the README tells people to run (``npx
@modelcontextprotocol/inspector --cli ...``). It is installed once per version with the machine's
``npm`` into ``$COUNTERSIGN_CONFORMANCE_CACHE`` (beside the conformance suite), through a scratch
directory renamed into place only when complete, and it runs on the Node 22 the conformance suite
installs (`tests.support.conformance_suite`), as the README asks for Node >= 22.19.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.cached_install import install_once, npm_install
from tests.support.conformance_suite import SuiteUnavailableError, _cache_root, install_suite

__all__ = ["INSPECTOR_VERSION", "Inspector", "InspectorUnavailableError", "available_inspector", "install_inspector"]

INSPECTOR_VERSION = "2.12.0"
INSTALL_TIMEOUT_SECONDS = 600.0
RUN_TIMEOUT_SECONDS = 60.0


class InspectorUnavailableError(RuntimeError):
    """The Inspector or its Node could not be found or installed (no npm, no registry)."""


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str

    def result(self) -> Any:
        """The method's result (``--format json`` prints ``{"result": ...}``)."""
        return json.loads(self.stdout)["result"]


@dataclass(frozen=True)
class Inspector:
    node: Path
    entry: Path
    home: Path
    """A private HOME: the CLI keeps a catalog and client storage under ``~/.mcp-inspector``."""

    def run(self, url: str, token: str, *args: str) -> Ran:
        """``inspector --cli <url> --transport http --header "Authorization: Bearer <token>" <args>``."""
        return self.run_as_given("--cli", url, "--transport", "http", "--header", f"Authorization: Bearer {token}",
                                 "--format", "json", "--quiet", *args)  # fmt: skip

    def run_as_given(self, *args: str) -> Ran:
        """``inspector <args>``, exactly these arguments."""
        done = subprocess.run(
            [str(self.node), str(self.entry), *args],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
            check=False,
            env={"HOME": str(self.home), "PATH": f"{self.node.parent}:/usr/bin:/bin"},
        )
        return Ran(done.returncode, done.stdout, done.stderr)


def _located(prefix: Path, node: Path) -> Inspector:
    package = prefix / "node_modules" / "@modelcontextprotocol" / "inspector"
    return Inspector(node=node, entry=package / "clients" / "launcher" / "build" / "index.js", home=prefix / "home")


def install_inspector() -> Inspector:
    """The pinned Inspector on the conformance suite's Node 22, installed first if the cache lacks it.

    Raises:
        InspectorUnavailableError: npm is missing or the install failed.
        tests.support.conformance_suite.SuiteUnavailableError: Node 22 could not be installed.
    """
    node = install_suite().node
    prefix = _cache_root() / f"inspector-{INSPECTOR_VERSION}"
    found = _located(prefix, node)
    install_once(
        prefix,
        lambda scratch: npm_install(
            scratch,
            [f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"],
            error=InspectorUnavailableError,
            timeout=INSTALL_TIMEOUT_SECONDS,
        ),
        lambda place: _located(place, node).entry.is_file(),
        error=InspectorUnavailableError,
    )
    found.home.mkdir(exist_ok=True)
    return found


def available_inspector() -> Inspector:
    """`install_inspector()` for a test: with ``CI`` set a missing Inspector fails the test, else skips it."""
    import pytest

    try:
        return install_inspector()
    except (InspectorUnavailableError, SuiteUnavailableError) as error:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI needs the MCP Inspector CLI: {error}")
        pytest.skip(f"MCP Inspector CLI unavailable: {error}")


if __name__ == "__main__":  # `.ci/run`: install ahead of the tests, and say where
    print(f"MCP Inspector {INSPECTOR_VERSION}: {install_inspector().entry}")
