"""The operators' tools the deployment tests run: ``promtool`` and ``prometheus`` (Debian's ``prometheus``
package, which `.ci/run` installs), and the ``docker`` CLI where the machine has it.

`required_tool` finds a binary on PATH; without it a test skips on a developer's machine and fails in CI
(`CI` set), where a missing tool means `.ci/run` did not install what it should.
"""

from __future__ import annotations

import os
import shutil

import pytest

__all__ = ["required_tool"]


def required_tool(name: str, *, package: str) -> str:
    """The path of `name`; skips without it, or fails when `CI` is set (`package` says where it comes from)."""
    found = shutil.which(name)
    if found is not None:
        return found
    message = f"{name} is not on PATH (Debian package {package!r}; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
