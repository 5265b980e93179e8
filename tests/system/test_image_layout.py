"""The image's file layout offers the whole CLI: only what the Dockerfile copies, installed as the
Dockerfile installs it (``pip install .`` in its work directory) into a fresh venv, runs
``countersign agent eval --scripted`` against a real gateway. ``--help`` alone would pass with
``countersign_agent/`` left out of the image; running the agent does not."""

from __future__ import annotations

import shutil
import subprocess
import venv
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from gateway.principal import KeyKind
from tests.support.agents import make_key
from tests.support.deploy_tools import ROOT
from tests.support.processes import clean_environ

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TRANSCRIPTS = ROOT / "tests" / "data" / "agent"
INSTALL_SECONDS = 600
"""Bound on ``pip install .`` into the fresh venv (the dependencies come from the package index or pip's cache)."""


def _copies() -> list[tuple[list[str], str]]:
    """The Dockerfile's COPY instructions: (sources, destination relative to WORKDIR)."""
    copies = []
    for line in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines():
        words = line.split()
        if words and words[0].upper() == "COPY":
            *sources, destination = words[1:]
            copies.append((sources, destination))
    return copies


def _lay_out(app: Path) -> None:
    for sources, destination in _copies():
        for source in sources:
            if (ROOT / source).is_dir():
                target = app / destination
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(ROOT / source, target, ignore=ignore, dirs_exist_ok=True)
            else:
                target = app / destination / source if destination.endswith("/") else app / destination
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / source, target)


def test_the_dockerfile_copies_every_package_the_project_installs() -> None:
    """Each top-level package pyproject.toml installs is copied into the image."""
    copied = {source for sources, _ in _copies() for source in sources}
    packages = {"gateway", "adapters", "policies", "backends", "countersign_agent"}
    assert packages <= copied, packages - copied


async def test_the_agent_evaluation_runs_from_the_image_layout(redis: Redis, mcp_url: str, tmp_path: Path) -> None:
    app, environment = tmp_path / "app", tmp_path / "venv"
    _lay_out(app)
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    environ = {k: v for k, v in clean_environ().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "."],
            cwd=app,
            env=environ,
            capture_output=True,
            text=True,
            timeout=INSTALL_SECONDS,
        )  # fmt: skip
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    agent = await make_key(redis, subject="demo@acme.example", roles=("staff", "support"))
    admin = await make_key(redis, subject="root@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
    command = [str(environment / "bin" / "countersign"), "agent", "eval", "--url", mcp_url,
               "--scripted", str(TRANSCRIPTS), "--only", "book-rejected", "--follow-seconds", "20"]  # fmt: skip
    run_environ = environ | {"COUNTERSIGN_AGENT_KEY": agent, "COUNTERSIGN_ADMIN_KEY": admin}
    ran = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, cwd=tmp_path, env=run_environ, capture_output=True, text=True, timeout=120)
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["book-rejected", "total"]
    assert lines[-1].split()[-1] == "5/5"
    # It ran the installed copy, not this checkout.
    where = subprocess.run([str(python), "-c", "import countersign_agent; print(countersign_agent.__file__)"],
                           cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert where.stdout.startswith(str(environment)), where.stdout
