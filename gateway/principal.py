"""Who is calling: the principal a bearer key stands for."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["KeyKind", "Principal"]


class KeyKind(StrEnum):
    """What a key may be used for. An agent key never opens the admin API, and the reverse."""

    AGENT = "agent"
    ADMIN = "admin"
    SERVICE = "service"


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """An authenticated caller.

    The bearer token itself is never part of a principal: once a request is authenticated, only
    the key id travels further, so nothing downstream can forward the token to a backend.
    """

    subject: str
    """Who the key was issued to, e.g. ``alice@acme.example``."""
    org: str
    """The organisation the caller belongs to; backends scope data by it."""
    roles: frozenset[str]
    """Roles granted to the key; access rules are written over these."""
    kind: KeyKind = KeyKind.AGENT
    """Which surface the key opens."""
    key_id: str = ""
    """Public identifier of the key (safe to log and audit)."""
