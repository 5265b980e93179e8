"""The operators' tools the deployment tests run: ``promtool`` and ``prometheus`` (Debian's ``prometheus``
package, which `.ci/run` installs), and the ``docker`` CLI where the machine has it.

`required_tool` finds a binary on PATH; without it a test skips on a developer's machine and fails in CI
(`CI` set), where a missing tool means `.ci/run` did not install what it should.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

__all__ = ["ROOT", "image_environment", "required_tool"]

ROOT = Path(__file__).resolve().parents[2]


def required_tool(name: str, *, package: str) -> str:
    """The path of `name`; skips without it, or fails when `CI` is set (`package` says where it comes from)."""
    found = shutil.which(name)
    if found is not None:
        return found
    message = f"{name} is not on PATH (Debian package {package!r}; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def image_environment() -> dict[str, str]:
    """The environment the Dockerfile's ``ENV`` lines give every container of the image."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    environ: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip().upper().startswith("ENV "):
            environ.update(re.findall(r"(\w+)=(\S+)", line))
    return environ
