"""The ``[oauth]`` section of the config, as data: the resource the gateway is, and whom it trusts.

This module only says what is configured; `gateway.auth.tokens` verifies tokens with it and
`gateway.auth.oauth_resource` publishes it (RFC 9728). The shape::

    [oauth]
    resource = "https://gateway.example/mcp"        # the audience of agents' tokens (RFC 8707)
    admin_resource = "https://gateway.example/admin/api"  # of admins' tokens; unset: admins use keys only
    tool_scopes = { "rooms_*" = ["rooms"], "orders_cancel" = ["orders:write"] }

    [oauth.issuers.corp]
    issuer = "https://login.example"                # the exact ``iss`` of its tokens
    jwks_url = "https://login.example/jwks"         # unset: discovered from the issuer's metadata
    algorithms = ["RS256", "ES256"]                 # asymmetric only
    surfaces = ["mcp"]                              # which audiences it may mint for: mcp, admin
    roles_claim = "roles"                           # and/or scope_roles = { "rooms" = ["staff"] }

A token's audience names the surface it opens: an agent's token is for `resource`, an admin's for
`admin_resource`, so a token minted for one never opens the other. Algorithms are asymmetric by
construction: ``none`` and every HMAC algorithm are refused when the file is read, so a public key
can never be used as an HMAC secret.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "ClaimMapping",
    "IssuerSection",
    "OAuthSection",
    "Surface",
    "asymmetric_only",
    "metadata_url",
]

ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""Every algorithm an issuer may be configured with: signatures a public key verifies and cannot make."""

Surface = Literal["mcp", "admin"]

_CLOSED = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no setting is infinite or NaN


def asymmetric_only(algorithms: list[str]) -> list[str]:
    """`algorithms`, when every one is in `ASYMMETRIC_ALGORITHMS`.

    Raises:
        ValueError: naming the others.
    """
    refused = sorted(set(algorithms) - ASYMMETRIC_ALGORITHMS)
    if refused:
        raise ValueError(f"only asymmetric algorithms ({', '.join(sorted(ASYMMETRIC_ALGORITHMS))}); not {refused}")
    return algorithms


def _https_or_loopback(url: str) -> str:
    if url.startswith("https://") or url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
        return url
    raise ValueError("must be an https:// URL (http:// only on loopback)")


class ClaimMapping(BaseModel):
    """How a trusted issuer's signed claims map to a principal: ``[oauth.issuers.<name>]`` and ``[console.oidc]``."""

    model_config = _CLOSED
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"], min_length=1)
    clock_skew_seconds: float = Field(default=30.0, ge=0, le=300)
    subject_claim: str = "sub"
    org_claim: str = "org"
    org: str | None = None
    """The org of every token of this issuer (one issuer per org); unset, the `org_claim` claim."""
    roles_claim: str | None = "roles"
    """A claim holding a list of roles (or a space-separated string); unset, roles come only from `scope_roles`."""
    scope_roles: dict[str, list[str]] = Field(default_factory=dict)
    """Roles a granted scope gives: ``{ "rooms" = ["staff"] }``."""

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, algorithms: list[str]) -> list[str]:
        return asymmetric_only(algorithms)


class IssuerSection(ClaimMapping):
    """``[oauth.issuers.<name>]``: one trusted authorization server and how its claims map to a principal."""

    issuer: str
    """The issuer identifier, compared with a token's ``iss`` exactly."""
    jwks_url: str | None = None
    """Where its keys are; unset, ``jwks_uri`` of its metadata (``/.well-known/oauth-authorization-server``,
    then ``/.well-known/openid-configuration``). Never a URL a token names (``jku``, ``x5u``)."""
    surfaces: list[Surface] = Field(default_factory=lambda: list[Surface](["mcp"]), min_length=1)
    """Which resources its tokens may name as audience: ``mcp`` (agents), ``admin`` (admins)."""
    min_refresh_seconds: float = Field(default=30.0, ge=0)
    """The least time between two fetches of its keys for an unknown ``kid``: a flood of made-up
    ``kid`` values costs the issuer at most one request per this many seconds."""
    max_key_age_seconds: float = Field(default=3600.0, gt=0)
    """Keys are fetched again after this long, so a key the issuer withdrew stops verifying."""

    @field_validator("issuer", "jwks_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return None if url is None else _https_or_loopback(url)


class OAuthSection(BaseModel):
    """``[oauth]``: the gateway as an OAuth 2.1 resource server. No issuer: tokens are not accepted."""

    model_config = _CLOSED
    resource: str | None = None
    """The MCP endpoint's resource URL (``https://host/mcp``): the audience of agents' tokens, and the
    ``resource`` of the protected-resource metadata. Required once an issuer is configured."""
    admin_resource: str | None = None
    """The admin API's resource URL, the audience of admins' tokens; unset, the admin API takes keys only."""
    tool_scopes: dict[str, list[str]] = Field(default_factory=dict)
    """Scopes a token needs to call a tool, by tool-name pattern (``rooms_*``, ``orders_cancel``; fnmatch):
    the union of every matching entry. A tool no pattern matches needs no scope."""
    issuers: dict[str, IssuerSection] = Field(default_factory=dict)

    @field_validator("resource", "admin_resource")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return None if url is None else _https_or_loopback(url)

    @model_validator(mode="after")
    def _resource_for_each_surface(self) -> OAuthSection:
        for name, issuer in self.issuers.items():
            if "mcp" in issuer.surfaces and self.resource is None:
                raise ValueError(f"issuer {name} mints for mcp: [oauth] resource is required")
            if "admin" in issuer.surfaces and self.admin_resource is None:
                raise ValueError(f"issuer {name} mints for admin: [oauth] admin_resource is required")
        return self

    def scopes_for(self, tool: str) -> frozenset[str]:
        """The scopes a token needs to call `tool`: those of every pattern that matches its name."""
        return frozenset(
            scope for pattern, scopes in self.tool_scopes.items() if fnmatchcase(tool, pattern) for scope in scopes
        )

    def issuers_for(self, surface: Surface) -> list[str]:
        """The issuer identifiers whose tokens may open `surface`, in configuration order."""
        return [issuer.issuer for issuer in self.issuers.values() if surface in issuer.surfaces]


def metadata_url(resource: str) -> str:
    """Where the protected-resource metadata of `resource` is (RFC 9728 section 3.1: the well-known
    name inserted between the host and the path): ``https://gw/mcp`` -> ``https://gw/.well-known/oauth-protected-resource/mcp``."""
    scheme, _, rest = resource.partition("://")
    host, slash, path = rest.partition("/")
    suffix = f"/{path}".rstrip("/") if slash else ""
    return f"{scheme}://{host}/.well-known/oauth-protected-resource{suffix}"
