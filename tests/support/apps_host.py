"""A chat host for MCP Apps views, built on the official packages, pinned, installed into a cache and bundled.

The page (``view_host_page/``) uses the official TypeScript MCP client (``@modelcontextprotocol/client``)
to speak to the gateway and ext-apps' ``AppBridge`` (``@modelcontextprotocol/ext-apps``) to frame each
view, as a chat host does. The packages are installed once per version set with the machine's ``npm``
into ``$COUNTERSIGN_CONFORMANCE_CACHE`` (beside the conformance suite) and the page's script is bundled
for the browser with the pinned esbuild, in a scratch directory renamed into place only when complete
(`tests.support.cached_install`). The cache entry is named by the versions and the page's own source, so
an edited page is bundled again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from tests.support.cached_install import install_once, npm_install, run_step
from tests.support.conformance_suite import _cache_root

__all__ = ["EXT_APPS_VERSION", "HostUnavailableError", "available_host", "install_host"]

EXT_APPS_VERSION = "2.0.4"
PACKAGES = (
    f"@modelcontextprotocol/ext-apps@{EXT_APPS_VERSION}",
    "@modelcontextprotocol/client@2.4.0",
    "@modelcontextprotocol/core@2.4.0",
    "@modelcontextprotocol/server@2.4.0",  # a peer of ext-apps; pinned so npm does not choose one
    "zod@4.6.7",
    "esbuild@0.28.2",
)
SOURCE = Path(__file__).parent / "view_host_page"
INSTALL_TIMEOUT_SECONDS = 600.0
PAGE_FILES = ("index.html", "host.js")


class HostUnavailableError(RuntimeError):
    """The host's packages could not be installed or bundled (no npm, no registry)."""


def _prefix() -> Path:
    digest = hashlib.sha256("\n".join(PACKAGES).encode())
    for name in PAGE_FILES:
        digest.update((SOURCE / name).read_bytes())
    return _cache_root() / f"apps-host-{EXT_APPS_VERSION}-{digest.hexdigest()[:12]}"


def _build(scratch: Path) -> None:
    npm_install(scratch, PACKAGES, error=HostUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS)
    page = scratch / "page"
    page.mkdir()
    shutil.copy(SOURCE / "index.html", page / "index.html")
    shutil.copy(SOURCE / "host.js", scratch / "host.js")  # beside node_modules, where its imports resolve
    esbuild = scratch / "node_modules" / ".bin" / "esbuild"
    bundle = [str(esbuild), str(scratch / "host.js"), "--bundle", "--format=esm", "--platform=browser",
              "--target=es2022", f"--outfile={page / 'host.js'}", "--log-level=warning"]  # fmt: skip
    run_step(bundle, error=HostUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS, what="esbuild")


def install_host() -> Path:
    """The folder of the host page (``index.html`` and its bundled ``host.js``), built first if the cache lacks it.

    Raises:
        HostUnavailableError: npm is missing, or the install or the bundling failed.
    """
    prefix = _prefix()
    install_once(prefix, _build, lambda place: (place / "page" / "host.js").is_file(), error=HostUnavailableError)
    return prefix / "page"


def available_host() -> Path:
    """`install_host()` for a test: with ``CI`` set a missing host fails the test, else skips it."""
    import pytest

    try:
        return install_host()
    except HostUnavailableError as error:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"CI needs the MCP Apps test host: {error}")
        pytest.skip(f"MCP Apps test host unavailable: {error}")


if __name__ == "__main__":  # `.ci/run`: install and bundle ahead of the tests, and say where
    print(f"MCP Apps test host (ext-apps {EXT_APPS_VERSION}): {install_host()}")
