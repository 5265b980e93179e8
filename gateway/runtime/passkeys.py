"""The approvers' passkeys, built from the settings: the console's address is their relying party.

Who calls it: `gateway.runtime.approvers` (for the admin API's passkey routes and the card service's
passkey check) and the CLI (the card commands' passkey check, the operator's passkey commands). It is a
module of its own so a CLI command that checks a passkey loads no route, sign-in or admin API code.

The console's address (``[notifications] console_url``) is the relying party: its host is the RP id,
its origin the only origin an assertion may come from.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from gateway.audit.events import AuditSink
from gateway.config.console import console_origin
from gateway.config.settings import Settings
from gateway.passkeys.service import PasskeyService, Relying
from gateway.store.client import Connection
from gateway.store.passkeys import PasskeyStore

__all__ = ["passkey_service"]


def passkey_service(settings: Settings, redis: Connection, audit: AuditSink) -> PasskeyService:
    """The approvers' passkeys, for the console's address as relying party."""
    origin = console_origin(settings.notifications.console_url)
    host = urlsplit(origin).hostname or "localhost"
    return PasskeyService(
        PasskeyStore(redis.client),
        audit,
        relying=Relying(rp_id=host, origin=origin),
        keys_may_register=settings.demo,
        now_ms=lambda: int(time.time() * 1000),
    )
