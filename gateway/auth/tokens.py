"""OAuth 2.1 access tokens (JWTs) of trusted issuers, verified and mapped to a `Principal`.

Who calls it: `gateway.auth.bearer.BearerAuth`, for a bearer credential that `looks_like_jwt` (an API key
starts ``csk_`` and never does). It answers a `TokenVerdict`: the principal, or the reason the
token is refused, which BearerAuth turns into a 401 and an audit event. It never stores a token.

The order of the checks, each refusing before the next runs:

1. the header: ``alg`` is asymmetric (`ASYMMETRIC_ALGORITHMS`: never ``none``, never HMAC, so a
   public key cannot serve as an HMAC secret) and the token names no key of its own (``jku``,
   ``x5u``, ``jwk``, ``x5c``) and no critical extension (``crit``);
2. the issuer: the unverified ``iss`` is a configured issuer, which mints for this surface and
   allows this ``alg``;
3. the key: the issuer's key of that ``kid`` (`gateway.auth.jwks`), which must fit the ``alg``;
4. PyJWT's verification: the signature, ``exp`` and ``nbf`` (with the issuer's clock skew),
   ``iss``, and ``aud``, which must name the surface's resource (RFC 8707: a token minted for
   another resource is refused); ``exp``, ``iss``, ``aud`` and the subject claim are required;
5. the mapping (`principal_from_claims`): subject, org, roles (a claim, and `scope_roles`),
   scopes, and the delegation chain of ``act`` (RFC 8693). A delegated token opens the MCP
   surface only: a person's decision on a card is never taken through an agent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from gateway.auth.jwks import JwksSource
from gateway.config.oauth import ASYMMETRIC_ALGORITHMS, IssuerSection, OAuthSection, Surface
from gateway.principal import TOKEN_KEY_PREFIX, KeyKind, Principal, normalize_subject
from gateway.printable import is_printable

__all__ = ["MAX_TOKEN_CHARS", "TokenVerdict", "TokenVerifier", "looks_like_jwt", "principal_from_claims"]

MAX_TOKEN_CHARS = 8192
"""Longer bearer credentials are refused unparsed."""
MAX_ACTORS = 8
"""The deepest ``act`` chain accepted: a longer one is refused, not cut."""

_MAX_BUILT_KEYS = 256
_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_KEY_NAMING_HEADERS = ("jku", "x5u", "jwk", "x5c", "crit")
_ROLE = re.compile(r"[A-Za-z0-9_-]+")
_FAILURES: tuple[tuple[type[jwt.InvalidTokenError], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidAudienceError, "token is for another resource"),
    (jwt.InvalidIssuerError, "token of another issuer"),
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.MissingRequiredClaimError, "token lacks a required claim"),
)


def looks_like_jwt(credential: str) -> bool:
    """Whether a bearer credential has the shape of a JWS: three base64url parts separated by dots."""
    return len(credential) <= MAX_TOKEN_CHARS and _JWT.fullmatch(credential) is not None


@dataclass(frozen=True, slots=True)
class TokenVerdict:
    """A verified token's principal, or None and the reason it was refused (for the 401 and the audit)."""

    principal: Principal | None
    reason: str = ""
    issuer: str = ""
    """The configured issuer's name when the token named a trusted one (audited), else empty."""


class TokenVerifier:
    """Verifies access tokens against the issuers of an `OAuthSection`."""

    def __init__(self, config: OAuthSection, *, sources: Mapping[str, JwksSource] | None = None) -> None:
        self.config = config
        self._by_issuer = {section.issuer: (name, section) for name, section in config.issuers.items()}
        self._keys: dict[tuple[str, str | None, str], tuple[Mapping[str, Any], jwt.PyJWK]] = {}
        self._sources = (
            dict(sources)
            if sources is not None
            else {
                name: JwksSource(
                    issuer=section.issuer,
                    jwks_url=section.jwks_url,
                    min_refresh_seconds=section.min_refresh_seconds,
                    max_age_seconds=section.max_key_age_seconds,
                )
                for name, section in config.issuers.items()
            }
        )

    def audience(self, surface: Surface) -> str | None:
        return self.config.resource if surface == "mcp" else self.config.admin_resource

    async def verify(self, token: str, surface: Surface) -> TokenVerdict:
        """Verify `token` for `surface` (``mcp`` or ``admin``). Never raises for a bad token."""
        try:
            # One unverified parse for the header and the issuer; PyJWT's parse is most of the CPU a token costs.
            parsed = jwt.decode_complete(token, options={"verify_signature": False})
            header, unverified = parsed["header"], parsed["payload"]
        except jwt.InvalidTokenError:
            return TokenVerdict(None, "malformed token")
        alg = header.get("alg")
        if alg not in ASYMMETRIC_ALGORITHMS:
            return TokenVerdict(None, "algorithm not allowed")
        if any(name in header for name in _KEY_NAMING_HEADERS):
            return TokenVerdict(None, "token names its own key or critical extensions")
        iss = unverified.get("iss")
        found = self._by_issuer.get(iss) if isinstance(iss, str) else None
        if found is None:
            return TokenVerdict(None, "untrusted issuer")
        name, issuer = found
        audience = self.audience(surface)
        if surface not in issuer.surfaces or audience is None:
            return TokenVerdict(None, f"issuer does not mint for {surface}", name)
        if alg not in issuer.algorithms:
            return TokenVerdict(None, "algorithm not allowed for this issuer", name)
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            return TokenVerdict(None, "malformed token", name)
        jwk = await self._sources[name].key(kid)
        if jwk is None:
            return TokenVerdict(None, "unknown signing key", name)
        key = self._key(name, kid, alg, jwk)
        if key is None:
            return TokenVerdict(None, "signing key does not fit the algorithm", name)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=audience,
                issuer=issuer.issuer,
                leeway=issuer.clock_skew_seconds,
                options={"require": ["exp", "iss", "aud", issuer.subject_claim]},
            )
        except jwt.InvalidTokenError as error:
            reason = next((text for kind, text in _FAILURES if isinstance(error, kind)), "invalid token")
            return TokenVerdict(None, reason, name)
        principal, refusal = principal_from_claims(name, issuer, claims, surface)
        return TokenVerdict(principal, refusal, name)

    def _key(self, name: str, kid: str | None, alg: str, jwk: Mapping[str, Any]) -> jwt.PyJWK | None:
        """The JWK as a key of `alg`, or None when it is not one (an RSA key named by an ES256 token).

        Built once per key set entry: loading a public key from its JWK cost more than verifying
        a signature with it. The entry is reused only while the source still serves the same
        JWK object, so a refreshed key set builds its keys anew.
        """
        cached = self._keys.get((name, kid, alg))
        if cached is not None and cached[0] is jwk:
            return cached[1]
        try:
            key = jwt.PyJWK(dict(jwk), algorithm=alg)
        except (jwt.PyJWKError, jwt.InvalidKeyError):
            return None
        if len(self._keys) >= _MAX_BUILT_KEYS:
            self._keys.clear()
        self._keys[(name, kid, alg)] = (jwk, key)
        return key


def principal_from_claims(
    name: str, issuer: IssuerSection, claims: Mapping[str, Any], surface: Surface
) -> tuple[Principal | None, str]:
    """The principal verified `claims` stand for, or None and why not.

    The subject is the person (RFC 8693: ``sub`` is whom the token is about); ``act`` names who
    acts for them, nearest first. The acting client is the nearest actor, else ``client_id`` or ``azp``.
    """
    subject = claims.get(issuer.subject_claim)
    org = issuer.org if issuer.org is not None else claims.get(issuer.org_claim)
    if not isinstance(subject, str) or not isinstance(org, str):
        return None, "token lacks a subject or an org"
    subject, org = normalize_subject(subject), org.strip()
    if not subject or not org or not is_printable(subject) or not is_printable(org):
        return None, "token lacks a subject or an org"
    actors = _actors(claims.get("act"))
    if actors is None:
        return None, "malformed act claim"
    if actors and surface == "admin":
        return None, "a delegated token does not open the admin API"
    scopes = _words(claims.get("scope", claims.get("scp")))
    roles = _words(claims.get(issuer.roles_claim)) if issuer.roles_claim else frozenset()
    roles |= {role for scope in scopes for role in issuer.scope_roles.get(scope, ())}
    client = claims.get("client_id", claims.get("azp"))
    acting = actors[0] if actors else (client if isinstance(client, str) and is_printable(client) else "")
    identity = "|".join([issuer.issuer, subject, org, acting, *actors])
    key_id = f"{TOKEN_KEY_PREFIX}{name}_{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    return (
        Principal(
            subject=subject,
            org=org,
            roles=frozenset(role for role in roles if _ROLE.fullmatch(role)),
            kind=KeyKind.AGENT if surface == "mcp" else KeyKind.ADMIN,
            key_id=key_id,
            scopes=scopes,
            acting_client=acting,
            actors=actors,
        ),
        "",
    )


def _actors(act: Any) -> tuple[str, ...] | None:
    """The ``act`` chain's subjects, nearest first; None when it is malformed or too deep."""
    chain: list[str] = []
    while act is not None:
        if not isinstance(act, dict) or len(chain) >= MAX_ACTORS:
            return None
        actor = act.get("sub")
        if not isinstance(actor, str) or not actor.strip() or not is_printable(actor):
            return None
        chain.append(normalize_subject(actor))
        act = act.get("act")
    return tuple(chain)


def _words(value: Any) -> frozenset[str]:
    """A claim holding words: a space-separated string (``scope``) or a list of strings (``scp``, roles)."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()
