"""One virtual environment per agent framework, with pinned versions, created into a cache.

The compatibility suite (``tests/compat/``) drives the gateway with each framework as an agent builder
would use it. The frameworks pin their own ``mcp`` and ``pydantic`` ranges, which the gateway's
environment cannot share, so each gets its own venv under ``$COUNTERSIGN_COMPAT_CACHE`` (default
``~/.cache/countersign/compat``), named by a digest of its pins and built in a scratch directory
renamed into place only when complete (an interrupted install is never mistaken for one). The scripts
that run inside them are ``tests/compat/drivers/<framework>.py``; they import nothing from this repository.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from tests.support.cached_install import install_once, run_step

__all__ = ["FRAMEWORKS", "CompatUnavailableError", "install_framework"]

FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "pydantic_ai": ("pydantic-ai-slim[mcp]==2.78.0",),
    "openai_agents": ("openai-agents==0.24.0",),
    "langchain": ("langchain-mcp-adapters==0.3.2", "langgraph==1.2.24"),
    "fastmcp": ("fastmcp==4.2.3",),
}
"""Each framework's pinned packages, as an agent builder would install them."""

INSTALL_TIMEOUT_SECONDS = 900.0


class CompatUnavailableError(RuntimeError):
    """A framework's environment could not be created (no registry, a failed install)."""


def _cache_root() -> Path:
    configured = os.environ.get("COUNTERSIGN_COMPAT_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "countersign" / "compat"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def install_framework(name: str) -> Path:
    """The Python of `name`'s environment, created first if the cache does not hold it.

    Raises:
        CompatUnavailableError: the venv or the pinned install failed.
    """
    pins = FRAMEWORKS[name]
    digest = hashlib.sha256("\n".join((sys.version, *pins)).encode()).hexdigest()[:12]
    venv = _cache_root() / f"{name}-{digest}"

    def build(scratch: Path) -> None:
        # Only `bin/python` is used, which finds its environment from its own path, so a venv built
        # in the scratch directory works once renamed into place.
        run_step(
            [sys.executable, "-m", "venv", "--clear", str(scratch)],
            error=CompatUnavailableError,
            timeout=INSTALL_TIMEOUT_SECONDS,
            what=f"{name}: venv",
        )
        pip = [str(_python(scratch)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins]
        run_step(pip, error=CompatUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS, what=f"{name}: pip install")
        (scratch / ".complete").write_text("\n".join(pins) + "\n")

    install_once(
        venv,
        build,
        lambda place: _python(place).is_file() and (place / ".complete").is_file(),
        error=CompatUnavailableError,
    )
    return _python(venv)


if __name__ == "__main__":  # `.ci/run`: create every framework's environment ahead of the tests, by name
    for framework in FRAMEWORKS:
        print(f"{framework}: {' '.join(FRAMEWORKS[framework])}: {install_framework(framework)}", flush=True)
