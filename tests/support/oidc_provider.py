"""A real OpenID provider for the console's sign-in tests: the npm ``oidc-provider`` package, pinned, on Node 22.

`install_provider` installs ``oidc-provider`` and the packaged Node 22 it supports (the machine's
Node may be older) once into ``$COUNTERSIGN_OIDC_CACHE`` (default ``~/.cache/countersign/oidc``)
with `tests.support.cached_install`, the suite's one installer routine. `running_provider` starts
``tests/data/oidc/provider.mjs`` with it on a free port: one confidential client (the console, with
`CLIENT_ID` and `CLIENT_SECRET` and the gateway's callback) and the users that script names, signed
in through the package's own login form. Without npm or the registry a test skips on a developer's
machine and fails in CI (`CI` set), where ``.ci/run`` installs it first.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.datastructures import Secret

from backends.serve import serve_app_in_thread
from gateway.config.approvals import PasskeyRequirement
from gateway.config.console import ConsoleSection, OidcSection
from gateway.runtime.app import create_app
from tests.support.cached_install import install_once, npm_install
from tests.support.conformance_suite import NODE_VERSION, _node_package
from tests.support.processes import end_process
from tests.support.redis_server import free_port
from tests.support.services import Backend, gateway_settings
from tests.support.signing import signing_key_before_start

__all__ = [
    "APPROVER",
    "CLIENT_ID",
    "CLIENT_SECRET",
    "PROVIDER_VERSION",
    "Provider",
    "ProviderUnavailableError",
    "install_provider",
    "running_provider",
    "signin_gateway",
]

PROVIDER_VERSION = "9.13.3"
CLIENT_ID = "countersign-console"
CLIENT_SECRET = "console-secret-for-tests-only"
APPROVER = "approver@acme.example"
"""A user of the provider: org ``acme``, roles ``approver`` (tests/data/oidc/provider.mjs)."""
INSTALL_TIMEOUT_SECONDS = 600.0
SCRIPT = Path(__file__).resolve().parents[1] / "data" / "oidc" / "provider.mjs"


class ProviderUnavailableError(RuntimeError):
    """The provider or its Node could not be installed (no npm, no registry, unknown platform)."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    process: subprocess.Popen[bytes]


def _cache_root() -> Path:
    configured = os.environ.get("COUNTERSIGN_OIDC_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "countersign" / "oidc"


def _parts(prefix: Path) -> tuple[Path, Path]:
    modules = prefix / "node_modules"
    return modules / _node_package() / "bin" / "node", modules / "oidc-provider" / "lib" / "index.js"


def install_provider() -> tuple[Path, Path]:
    """The packaged Node 22 and ``oidc-provider``'s entry module, installed first if the cache lacks them.

    Raises:
        ProviderUnavailableError: npm is missing, the install failed, or its result lacks either file.
    """
    prefix = _cache_root() / f"node-{NODE_VERSION}-oidc-provider-{PROVIDER_VERSION}"
    packages = [f"{_node_package()}@{NODE_VERSION}", f"oidc-provider@{PROVIDER_VERSION}"]
    install_once(
        prefix,
        lambda scratch: npm_install(scratch, packages, error=ProviderUnavailableError, timeout=INSTALL_TIMEOUT_SECONDS),
        lambda place: all(part.is_file() for part in _parts(place)),
        error=ProviderUnavailableError,
    )
    return _parts(prefix)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason}, and CI must run the sign-in tests (.ci/run installs oidc-provider)", pytrace=False)
    pytest.skip(reason)


@contextmanager
def running_provider(console_origin: str, log: Path) -> Iterator[Provider]:
    """``oidc-provider`` listening on a free loopback port, its client's callback at `console_origin`."""
    try:
        node, entry = install_provider()
    except ProviderUnavailableError as error:
        _unavailable(str(error))
        raise
    port = free_port()
    command = [
        str(node),
        str(SCRIPT),
        entry.as_uri(),
        str(port),
        f"{console_origin}/admin/signin/callback",
        f"{console_origin}/admin/",
        CLIENT_SECRET,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "ready " not in (text := log.read_text(errors="replace")):
            assert process.poll() is None, f"oidc-provider exited with {process.returncode}:\n{text}"
            assert time.monotonic() < deadline, f"oidc-provider did not start within 30 s:\n{text}"
            time.sleep(0.05)
        yield Provider(issuer=f"http://127.0.0.1:{port}", process=process)
    finally:
        end_process(process, grace_seconds=10)


@contextmanager
def signin_gateway(
    redis_url: str,
    backends: dict[str, Backend],
    log: Path,
    *,
    host: str = "127.0.0.1",
    require_passkey: PasskeyRequirement | None = None,
) -> Iterator[str]:
    """A production gateway (no pasted keys) whose console signs approvers in through a running oidc-provider;
    its origin, ``http://<host>:<port>`` (``localhost`` for WebAuthn, which takes no IP address as its RP id)."""
    # The origin is in the provider's client registration, so the port is chosen before the gateway binds it;
    # another process may take it in between (EADDRINUSE): then the pair starts again on a new port.
    for attempt in range(_PORT_ATTEMPTS):
        port = free_port()
        origin = f"http://{host}:{port}"
        serving = False
        try:
            with running_provider(origin, log) as provider:
                base = gateway_settings(redis_url, backends)
                oidc = OidcSection(
                    issuer=provider.issuer, client_id=CLIENT_ID, scopes=["openid", "email", "countersign"]
                )
                approvals = base.approvals.model_copy(
                    update={"require_passkey": require_passkey or PasskeyRequirement()}
                )
                settings = dataclasses.replace(
                    base,
                    demo=False,
                    approvals=approvals,
                    console=ConsoleSection(oidc=oidc),
                    console_client_secret=Secret(CLIENT_SECRET),
                    notifications=dataclasses.replace(base.notifications, console_url=origin),
                )
                signing_key_before_start(redis_url)
                with serve_app_in_thread(create_app(settings), port=port, lifespan=True):
                    serving = True
                    yield origin
                    return
        except OSError as error:
            if serving or error.errno != errno.EADDRINUSE or attempt == _PORT_ATTEMPTS - 1:
                raise


_PORT_ATTEMPTS = 3


if __name__ == "__main__":  # `.ci/run`: install ahead of the tests, and say where
    found_node, found_entry = install_provider()
    print(f"oidc-provider {PROVIDER_VERSION} on Node {NODE_VERSION}: {found_entry}")
