"""Installing a pinned third-party tool into a cache, once: the one routine behind every installer of the suite.

The conformance suite, the MCP servers the upstream tests front, the Inspector CLI and the agent frameworks'
environments are each built in a scratch directory beside their place in the cache and renamed into place
only when complete, so an interrupted install is never mistaken for one, and two runs installing the same
thing at once both end with a complete copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support.trust_store import machine_environ

__all__ = ["install_once", "npm_install", "run_step"]


def install_once(
    prefix: Path, build: Callable[[Path], None], complete: Callable[[Path], bool], *, error: type[Exception]
) -> None:
    """Make `prefix` hold a complete install: nothing when `complete(prefix)` already holds, else `build` one
    in a scratch directory and rename it into place.

    Raises:
        error: `build` left the install incomplete (and whatever `build` raises).
    """
    if complete(prefix):
        return
    prefix.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".install-", dir=prefix.parent))
    try:
        build(scratch)
        if not complete(scratch):
            raise error(f"the install of {prefix.name} finished, but parts of it are missing")
        try:
            scratch.rename(prefix)
        except OSError:  # another run finished the same install first; theirs is as good
            if not complete(prefix):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def npm_install(into: Path, packages: Sequence[str], *, error: type[Exception], timeout: float) -> None:
    """``npm install`` of the pinned `packages` into the folder `into`, with the machine's npm.

    Raises:
        error: no npm on PATH, or the install failed (with the end of npm's own message).
    """
    npm = shutil.which("npm")
    if npm is None:
        raise error(f"npm is not on PATH, and {', '.join(packages)} is not in the cache")
    command = [npm, "install", "--prefix", str(into), "--no-save", "--no-audit", "--no-fund", "--loglevel=error"]
    run_step([*command, *packages], error=error, timeout=timeout, what="npm install")


def run_step(step: Sequence[str], *, error: type[Exception], timeout: float, what: str) -> None:
    """Run one step of an install, with the machine's own TLS trust settings (the tests' trust none:
    `tests.support.trust_store`).

    Raises:
        error: the step failed (with the end of its own message).
    """
    done = subprocess.run(
        list(step), capture_output=True, text=True, timeout=timeout, check=False, env=machine_environ(os.environ)
    )
    if done.returncode != 0:
        raise error(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")
