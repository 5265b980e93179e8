"""Who is calling: the principal a bearer key or a verified token stands for."""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

# ICU's spoof checker is Unicode's own implementation of UTS #39 (confusables.txt and the identifier
# profiles), kept in step with each Unicode version: no hand-made table of look-alikes to fall behind.
import icu  # type: ignore[import-untyped]

__all__ = ["TOKEN_KEY_PREFIX", "KeyKind", "Principal", "identity_of", "mixes_scripts", "normalize_subject"]

TOKEN_KEY_PREFIX = "tok_"
"""How the key id of a principal that a token (not an API key) stands for begins."""


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


@functools.lru_cache(maxsize=4096)
def identity_of(subject: str) -> str:
    """Who a subject names, for every comparison that keeps one person from counting as two.

    The UTS #39 confusable skeleton of the subject's normal form (`normalize_subject`): two subjects a
    reader cannot tell apart have the same identity, however they are spelled (``аlice`` with a Cyrillic
    ``а``, ``alice`` with a Latin one; ``rn`` and ``m``; ``l``, ``1`` and ``I``). A skeleton is for
    comparing, never for showing or storing: it is not meant to be read (``m`` becomes ``rn``).

    Where it applies: wherever a match *refuses* something, so a look-alike can never slip through: the
    requester and the actors of a card never approve it (`policies.approval.may_decide`), one person is
    one approver of a quorum (the ledger's approve script compares identities), and a revoked subject
    stops every spelling of itself. Where a match would *grant* something (whose cards a caller sees),
    the normal form is compared, since two people may have names a skeleton confuses. Rate budgets are
    an identity's (`policies.charges.budget_owner`): more spellings buy no more calls.

    Remembered per subject (a few thousand), since the budget of every call asks for it.
    """
    return str(_spoof_checker().getSkeleton(0, normalize_subject(subject)))


def mixes_scripts(subject: str) -> bool:
    """Whether `subject`'s normal form mixes writing systems beyond what UTS #39 calls *highly
    restrictive* (one script, or Latin with the scripts of Chinese, Japanese or Korean): Latin with
    Cyrillic or Greek is the classic look-alike, and a key is not minted for it unless an operator says
    so (`gateway.store.keys.KeyStore.create`)."""
    return bool(_spoof_checker().check(normalize_subject(subject)))


@functools.cache
def _spoof_checker() -> icu.SpoofChecker:
    """One checker for the process: built once (it loads ICU's data), read-only afterwards."""
    checker = icu.SpoofChecker()
    checker.setChecks(icu.USpoofChecks.RESTRICTION_LEVEL)
    checker.setRestrictionLevel(icu.URestrictionLevel.HIGHLY_RESTRICTIVE)
    return checker
