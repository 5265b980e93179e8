"""The key of the audit trail's hash chain, as every process that appends to or verifies the trail gets it.

Configured (``COUNTERSIGN_AUDIT_SECRET``, or the variable ``[gateway] audit_secret_env`` names) in
production, where nothing starts without it (a config file, ``COUNTERSIGN_REDIS_URL`` or the Docker
image; see `gateway.config.settings`); in demo mode generated once and kept in ``<data_dir>/audit.secret``
(0600), so `serve` and the CLI on one data directory share it. It is never printed or logged.
"""

from __future__ import annotations

import contextlib
import os
import secrets

from gateway.config.settings import Settings
from gateway.errors import ConfigError

__all__ = ["SECRET_FILE", "audit_secret"]

SECRET_FILE = "audit.secret"


def audit_secret(settings: Settings) -> bytes:
    """The chain key for `settings`.

    Raises:
        ConfigError: outside demo mode when none is configured: a made-up key would be one no other
            gateway process, and no later `audit verify`, could know.
    """
    if settings.audit_secret is not None and str(settings.audit_secret):
        return str(settings.audit_secret).encode()
    if not settings.demo:
        raise ConfigError(
            "production mode needs the audit secret: set COUNTERSIGN_AUDIT_SECRET (or the variable "
            "[gateway] audit_secret_env names), the same for every process on one Redis; or run the demo "
            "with countersign serve --demo"
        )
    path = settings.data_dir / SECRET_FILE
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{SECRET_FILE}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        # A hard link never replaces: two processes starting on one data directory keep the first key.
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
        draft.unlink()
    return path.read_bytes().strip()
