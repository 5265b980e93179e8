"""Who is calling: the principal a bearer key or a verified token stands for."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["SESSION_KEY_PREFIX", "TOKEN_KEY_PREFIX", "KeyKind", "Principal", "normalize_subject"]

TOKEN_KEY_PREFIX = "tok_"
"""How the key id of a principal that a token (not an API key) stands for begins."""
SESSION_KEY_PREFIX = "ses_"
"""How the key id of a person signed in to the console through the identity provider begins: such a
principal is a person who passed the provider's sign-in, not a holder of a key."""


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
    """Public identifier of the key (safe to log and audit). A token's principal has a ``tok_`` id
    (`TOKEN_KEY_PREFIX`) derived from its issuer and identity, never from the token."""
    scopes: frozenset[str] | None = None
    """The scopes a token granted; None for an API key, which scopes do not limit."""
    acting_client: str = ""
    """The client (agent) acting for `subject`: a token's ``client_id``/``azp``, or its nearest actor."""
    actors: tuple[str, ...] = ()
    """The delegation chain of a token's ``act`` claim (RFC 8693), nearest actor first: who acts for
    `subject`. Separation of duties counts every one of them as the requester."""


def normalize_subject(subject: str) -> str:
    """The one spelling of an identity: what a key stores, and what every comparison of two subjects compares.

    NFKC folds compatibility forms into one (fullwidth ``ａｌｉｃｅ`` and mathematical letters are
    ``alice``; ``＠`` is ``@``); an email-like subject, one holding ``@`` once folded, is also
    case-folded, since nobody is told apart from another by the case of their mail address; any
    other subject (a service's name) keeps its case. Surrounding whitespace is trimmed. Normalizing
    twice changes nothing.

    Where it applies: `KeyStore` stores a key's subject normalized (and normalizes what it reads, for
    keys stored earlier), so every `Principal` it resolves carries the normal form, and so does every
    card, which copies its requester's subject from the key. That is why the ledger's approve script,
    which compares approver and requester (and approvers with each other) as plain strings, compares
    identities. `policies.approval.may_decide` normalizes both sides again, so a card stored before
    subjects were normalized still cannot be approved by its requester under another spelling.
    """
    text = unicodedata.normalize("NFKC", subject)
    if "@" in text:
        text = unicodedata.normalize("NFKC", text.casefold())
    return text.strip()
