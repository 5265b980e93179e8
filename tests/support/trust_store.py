"""The test processes' TLS trust store: one certificate whose key was thrown away, so they trust no server.

No test reaches a server through TLS: every server the suite starts listens on loopback over plain HTTP. Yet
every HTTP client loads a trust store when it is built (httpx, httpcore2 and OpenSSL's defaults read
``SSL_CERT_FILE``, else the system's or certifi's bundle): some 140 CAs, 30-50 ms of CPU per client, and the
inner loop builds over a thousand clients (the gateway's, the MCP SDK's, the tests' own), which was about 45 s
of its CPU. `TRUST_NOTHING` loads in half a millisecond, and a test that ever did reach a TLS server would fail
to verify it rather than pass unnoticed.

The installers of the pinned tools (`tests.support.cached_install`) do reach registries over TLS: they run with
the machine's own settings (`machine_environ`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping
from pathlib import Path

__all__ = ["TRUST_NOTHING", "machine_environ", "trust_nothing"]

TRUST_NOTHING = Path(__file__).parents[1] / "data" / "trust-nothing.pem"
"""A self-signed CA certificate whose private key was discarded when it was made."""

_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")
_MACHINE = "COUNTERSIGN_TEST_MACHINE_TRUST"
"""Where `trust_nothing` keeps the machine's own values of `_VARIABLES` (JSON; null for unset)."""


def trust_nothing(environ: MutableMapping[str, str]) -> None:
    """Make `environ`'s trust store `TRUST_NOTHING`, keeping the machine's own settings for `machine_environ`. A
    process that inherited this from its parent keeps what the parent kept."""
    environ.setdefault(_MACHINE, json.dumps({name: environ.get(name) for name in _VARIABLES}))
    environ["SSL_CERT_FILE"] = str(TRUST_NOTHING)
    environ.pop("SSL_CERT_DIR", None)


def machine_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of `environ` with the machine's own trust settings back, as before `trust_nothing`."""
    restored = dict(environ)
    kept = restored.pop(_MACHINE, None)
    if kept is None:
        return restored
    for name, value in json.loads(kept).items():
        if value is None:
            restored.pop(name, None)
        else:
            restored[name] = value
    return restored
