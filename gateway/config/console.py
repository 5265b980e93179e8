"""The ``[console]`` section of the config, as data: how approvers sign in to the console.

This module only says what is configured; `gateway.signin` runs the sign-in with it. The shape::

    [console]
    idle_minutes = 15          # a session unused this long is over
    absolute_hours = 8         # and every session is over this long after sign-in

    [console.oidc]             # approvers sign in with the company's OpenID provider
    issuer = "https://login.example.com"
    client_id = "countersign"
    client_secret_env = "COUNTERSIGN_OIDC_SECRET"   # the secret is read from this variable
    scopes = ["openid", "profile", "email"]
    org = "acme"               # or org_claim = "org": as [oauth.issuers] maps claims
    roles_claim = "roles"

The console's own address (its origin, and the passkeys' relying party id, its host) is
``[notifications] console_url``: the address approvers open, which the notifications link to.
Without ``[console.oidc]`` nobody signs in to the console with a session; in demo mode the console
takes a pasted admin key instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.config.oauth import ClaimMapping, IssuerSection

__all__ = ["ConsoleSection", "OidcSection", "console_origin"]

_CLOSED = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class OidcSection(ClaimMapping):
    """``[console.oidc]``: the OpenID provider approvers sign in with (authorization code flow with PKCE),
    and how its ID token's claims map to the admin (`ClaimMapping`, as ``[oauth.issuers]`` maps them)."""

    issuer: str
    """The provider's issuer identifier; its metadata is read from ``<issuer>/.well-known/openid-configuration``."""
    client_id: str = Field(min_length=1)
    client_secret_env: str | None = None
    """The variable holding the client secret; unset: a public client (PKCE alone)."""
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"], min_length=1)
    logout_at_provider: bool = True
    """Signing out also ends the session at the provider, when its metadata has an ``end_session_endpoint``."""

    @field_validator("scopes")
    @classmethod
    def _openid(cls, scopes: list[str]) -> list[str]:
        if "openid" not in scopes:
            raise ValueError("scopes must include openid")
        return scopes

    def claims(self) -> IssuerSection:
        """The claim mapping as an issuer of the admin surface, checked as `[oauth.issuers]` are."""
        mapping = {name: getattr(self, name) for name in ClaimMapping.model_fields}
        return IssuerSection(issuer=self.issuer, surfaces=["admin"], **mapping)


class ConsoleSection(BaseModel):
    """``[console]``: console sessions, and the provider they are opened with."""

    model_config = _CLOSED
    idle_minutes: float = Field(default=15.0, gt=0, le=24 * 60)
    absolute_hours: float = Field(default=8.0, gt=0, le=7 * 24)
    oidc: OidcSection | None = None

    @property
    def idle_ms(self) -> int:
        return int(self.idle_minutes * 60_000)

    @property
    def absolute_ms(self) -> int:
        return int(self.absolute_hours * 3_600_000)


def console_origin(console_url: str) -> str:
    """The origin (``scheme://host[:port]``) of the console's address."""
    parts = urlsplit(console_url)
    return f"{parts.scheme}://{parts.netloc}"
