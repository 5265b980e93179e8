"""GitHub's own OpenAPI description and a standard mock server for it, pinned, installed from npm into a cache.

``@octokit/openapi`` (GitHub's published description of api.github.com) and ``@stoplight/prism-cli`` (the
Stoplight mock server, ``prism mock spec.json``) are installed with the packaged Node 22 (as
`tests.support.conformance_suite` installs it) under ``~/.cache/countersign/openapi``
(``COUNTERSIGN_CONFORMANCE_CACHE``'s sibling when that is set), once per version, by the one installer
routine (`tests.support.cached_install`). `github_spec_or_skip()` is what a test calls: with ``CI`` set it
fails rather than skips when they cannot be had.

`serve_prism(spec)` runs Prism on a free port until the context ends. Prism answers every operation of the
document with its examples (or data generated from the schemas) and validates requests against it: an
argument the gateway sends that GitHub would refuse is a 422 here too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cached_install import install_once, npm_install
from tests.support.conformance_suite import NODE_VERSION, SuiteUnavailableError, _node_package
from tests.support.processes import end_process

__all__ = [
    "OCTOKIT_OPENAPI_VERSION",
    "PRISM_VERSION",
    "GitHubSpec",
    "github_spec_or_skip",
    "install_github_spec",
    "serve_prism",
]

OCTOKIT_OPENAPI_VERSION = "23.0.2"
PRISM_VERSION = "5.16.0"
INSTALL_TIMEOUT_SECONDS = 600.0
PRISM_START_SECONDS = 120.0
"""Prism reads and dereferences GitHub's 13 MB description before it listens: about 15 s on one core here."""


@dataclass(frozen=True)
class GitHubSpec:
    node: Path
    """The Node 22 binary."""
    prism: Path
    """Prism's command-line entry point (run it with `node`)."""
    spec: Path
    """GitHub's description of api.github.com (OpenAPI 3.0, JSON, with ``$ref``s)."""


def _cache_root() -> Path:
    configured = os.environ.get("COUNTERSIGN_CONFORMANCE_CACHE")
    base = Path(configured).parent if configured else Path.home() / ".cache" / "countersign"
    return base / "openapi"


def _located(prefix: Path) -> GitHubSpec:
    modules = prefix / "node_modules"
    return GitHubSpec(
        node=modules / _node_package() / "bin" / "node",
        prism=modules / "@stoplight" / "prism-cli" / "dist" / "index.js",
        spec=modules / "@octokit" / "openapi" / "generated" / "api.github.com.json",
    )


def install_github_spec() -> GitHubSpec:
    """The pinned description, Prism and Node, installed first if the cache does not hold them.

    Raises:
        SuiteUnavailableError: npm is missing, the install failed, or its result lacks a file.
    """
    prefix = _cache_root() / f"node-{NODE_VERSION}-octokit-openapi-{OCTOKIT_OPENAPI_VERSION}-prism-{PRISM_VERSION}"
    packages = [
        f"{_node_package()}@{NODE_VERSION}",
        f"@octokit/openapi@{OCTOKIT_OPENAPI_VERSION}",
        f"@stoplight/prism-cli@{PRISM_VERSION}",
    ]

    def complete(place: Path) -> bool:
        found = _located(place)
        return found.node.is_file() and found.prism.is_file() and found.spec.is_file()

    install_once(
        prefix,
        lambda scratch: npm_install(scratch, packages, error=SuiteUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS),
        complete,
        error=SuiteUnavailableError,
    )
    return _located(prefix)


def github_spec_or_skip() -> GitHubSpec:
    """`install_github_spec()`, or a skip where it cannot be had (a failure with ``CI`` set)."""
    try:
        return install_github_spec()
    except SuiteUnavailableError as error:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI needs GitHub's OpenAPI description and Prism: {error}")
        pytest.skip(f"GitHub's OpenAPI description or Prism unavailable: {error}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serve_prism(tools: GitHubSpec, spec: Path, log: Path) -> Iterator[str]:
    """``prism mock spec`` on a free loopback port; yields its base URL once it answers, stops it after.

    Static answers (``--dynamic`` off): each operation answers its documented example, so a test can
    know what GitHub's own example data looks like after the gateway has checked it.
    """
    port = _free_port()
    command = [str(tools.node), str(tools.prism), "mock", "-h", "127.0.0.1", "-p", str(port), str(spec)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + PRISM_START_SECONDS
        while True:
            assert process.poll() is None, f"prism exited with {process.returncode}:\n{log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"prism did not listen within {PRISM_START_SECONDS} s"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        end_process(process, grace_seconds=10)


if __name__ == "__main__":  # `.ci/run`: install ahead of the tests, and say where
    found = install_github_spec()
    print(f"@octokit/openapi {OCTOKIT_OPENAPI_VERSION} and prism {PRISM_VERSION} on Node {NODE_VERSION}: {found.spec}")
