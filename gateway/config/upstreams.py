"""``[upstreams.<name>]``: an MCP server the gateway fronts, and a person's review of each of its tools.

The transport is Streamable HTTP (``url``, with the gateway's own bearer token read from a secret reference, or
fetched with its own OAuth client credentials; the agent's token is never forwarded) or stdio (``command``,
``args``, ``cwd``, and ``env``: the names of the only environment variables the child receives; the gateway's own
environment never reaches it, since a blocklist would miss secrets whose names look harmless).

``[upstreams.<name>.tools.<tool>]`` is the review: a person classifies each tool ``read``, ``write`` or
``hidden`` and pins the definition they reviewed by its hash (`gateway.upstreams.review`). A tool the
upstream lists that has no review, or whose definition no longer hashes to the pinned one, is
quarantined: not served. Upstream annotations (``readOnlyHint``) are never read here: only ``mode``
decides, and it has no default.

Who reads it: `gateway.config.file` (the section), `Settings.upstreams`, and `gateway.upstreams`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_SESSIONS",
    "MAX_CALL_SECONDS",
    "MAX_SESSIONS",
    "ArgumentMap",
    "OAuthClientSection",
    "EditRule",
    "LookupRule",
    "PreviewRule",
    "RenameRule",
    "ToolReview",
    "UpstreamSection",
    "check_upstream_name",
]

DEFAULT_SESSIONS = 4
"""Sessions kept open to an HTTP upstream when ``sessions`` is unset: enough that a slow call does not hold up the
others, few enough that a server counting sessions per client is not crowded."""
MAX_SESSIONS = 32

MAX_CALL_SECONDS = 300.0
"""The longest a review may give one call (`ToolReview.timeout_seconds`): over HTTP, a session's client ends a
response silent this long (`gateway.upstreams.connection`), so a longer deadline could never be reached."""

_CLOSED = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UPSTREAM_NAME = re.compile(r"^[a-z][a-z0-9]{0,31}$")

ArgumentMap = dict[str, str]
"""``{read tool's argument: the write's argument}``: which of the write's values a read is called with."""


class EditRule(BaseModel):
    """A write's list of replacements (``[{oldText, newText}, ...]``), each applied once, in order, for the preview."""

    model_config = _CLOSED
    argument: str = Field(min_length=1)
    """The write's argument holding the list (``edits``)."""
    old: str = Field(min_length=1)
    """The key of the text replaced in each item (``oldText``)."""
    new: str = Field(min_length=1)
    """The key of its replacement (``newText``)."""


class RenameRule(BaseModel):
    """A write that moves something: the arguments naming where from and where to."""

    model_config = _CLOSED
    source: str = Field(min_length=1)
    destination: str = Field(min_length=1)


class PreviewRule(BaseModel):
    """A read tool of the same upstream that shows what a write will change (the file as it is now)."""

    model_config = _CLOSED
    tool: str = Field(min_length=1)
    """The upstream's read tool, by its upstream name (``read_text_file``)."""
    arguments: ArgumentMap
    """How the read is called from the write's arguments (``{path = "path"}``)."""
    compare: str | None = None
    """The write's argument holding the new content, diffed against what the read answers (``content``)."""
    edits: EditRule | None = None
    """The write's argument holding text replacements, applied to what the read answers for the diff (``edits``)."""
    renames: RenameRule | None = None
    """The write's arguments naming what moves where, shown as a diff of the two names (``source``, ``destination``)."""

    @model_validator(mode="after")
    def _one_change(self) -> PreviewRule:
        if sum(rule is not None for rule in (self.compare, self.edits, self.renames)) > 1:
            raise ValueError("a preview diffs one way: compare, edits or renames")
        return self


class LookupRule(BaseModel):
    """How a write whose outcome is unknown is looked up: a read, and a match rule on its text.

    MCP has no idempotency key, so this is the only way an uncertain write settles without a person.
    """

    model_config = _CLOSED
    tool: str = Field(min_length=1)
    """The upstream's read tool (``read_text_file``, ``git_log``)."""
    arguments: ArgumentMap
    """How the read is called from the write's arguments."""
    equals: str | None = None
    """Applied when the read's text equals this argument of the write (the file holds the approved content)."""
    contains: str | None = None
    """Applied when the read's text contains this argument of the write (the commit message is in the log)."""

    @model_validator(mode="after")
    def _one_rule(self) -> LookupRule:
        if (self.equals is None) == (self.contains is None):
            raise ValueError("a lookup names exactly one match rule: equals or contains")
        return self


class ToolReview(BaseModel):
    """A person's review of one upstream tool: its class, the definition reviewed, who may call it."""

    model_config = _CLOSED
    mode: Literal["read", "write", "hidden"]
    """No default: a tool nobody classified is not served at all (quarantined)."""
    definition: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    """The hash of the definition reviewed (`gateway.upstreams.review.definition_hash`)."""
    public: bool = False
    """Every authenticated agent of an org granted this upstream may call it; else `roles`."""
    roles: list[str] = Field(default_factory=list)
    """Roles of which the caller needs one, when not public."""
    approver_role: str = "approver"
    """For writes: the role that countersigns."""
    trusted_output: bool = False
    """For reads: the output is not third-party text (the operator says so); otherwise it is withheld
    from the model and shown to people only."""
    preview: PreviewRule | None = None
    """For writes: the read shown on the card."""
    lookup: LookupRule | None = None
    """For writes: how an unknown outcome is settled; without one a person settles it."""
    timeout_seconds: float = Field(default=10.0, gt=0, le=MAX_CALL_SECONDS)

    @model_validator(mode="after")
    def _consistent(self) -> ToolReview:
        if self.mode != "hidden" and self.public == bool(self.roles):
            raise ValueError("a served tool names its access: public = true, or roles, not both")
        if self.mode != "write" and (self.preview is not None or self.lookup is not None):
            raise ValueError("preview and lookup are for writes")
        if self.mode != "read" and self.trusted_output:
            raise ValueError("trusted_output is for reads")
        return self


class OAuthClientSection(BaseModel):
    """The gateway's own OAuth client for an HTTP upstream: the client credentials grant (RFC 6749, section 4.4).

    The gateway fetches an access token from `token_url` with its client id and secret (HTTP Basic), caches it
    until shortly before it expires, and sends it as its bearer token; never the agent's.
    """

    model_config = _CLOSED
    token_url: str
    """The authorization server's token endpoint."""
    client_id: str = Field(min_length=1)
    client_secret_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The variable holding the client secret (a secret reference: the value never sits in the file)."""
    scope: str | None = None
    resource: str | None = None
    """RFC 8707 resource indicator, for an authorization server that binds tokens to the server they are for."""

    @model_validator(mode="after")
    def _url(self) -> OAuthClientSection:
        if not self.token_url.startswith(("http://", "https://")):
            raise ValueError("token_url must be an http:// or https:// URL")
        return self


class UpstreamSection(BaseModel):
    """``[upstreams.<name>]``: one MCP server, how the gateway reaches it, and the review of its tools."""

    model_config = _CLOSED
    transport: Literal["stdio", "http"]
    command: str | None = None
    """stdio: the executable."""
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    env: list[str] = Field(default_factory=list)
    """stdio: names of the gateway's environment variables passed to the child; nothing else is."""
    url: str | None = None
    """http: the server's Streamable HTTP endpoint."""
    token_env: str | None = None
    """http: the variable holding the gateway's own bearer token for this server."""
    oauth: OAuthClientSection | None = None
    """http: the gateway's own OAuth client for this server, instead of a fixed token."""
    sessions: int | None = Field(default=None, ge=1, le=MAX_SESSIONS)
    """http: how many sessions the gateway keeps open to the server, so concurrent calls do not queue on one
    (`DEFAULT_SESSIONS` when unset). stdio: one, the only value allowed (a stdio server is one process)."""
    protocol: Literal["auto", "legacy"] = "auto"
    """``auto`` negotiates (2026-07-28 stateless when offered, else the 2025-11-25 handshake); ``legacy``
    keeps the handshake era."""
    tools: dict[str, ToolReview] = Field(default_factory=dict)
    """The review, by the upstream's tool name."""

    @model_validator(mode="after")
    def _transport(self) -> UpstreamSection:
        if self.transport == "stdio" and (
            self.command is None or self.url is not None or self.token_env or self.oauth is not None
        ):
            raise ValueError("a stdio upstream names a command, and no url, token_env or oauth")
        if self.token_env and self.oauth is not None:
            raise ValueError("an http upstream names one credential: token_env or oauth")
        if self.transport == "http" and (self.url is None or self.command is not None or self.args or self.env):
            raise ValueError("an http upstream names a url, and no command, args or env")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must be an http:// or https:// URL")
        if self.transport == "stdio" and self.sessions not in (None, 1):
            raise ValueError("a stdio upstream is one process: one session")
        bad = [name for name in self.env if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"env names are variable names: {bad}")
        return self

    @property
    def pool_size(self) -> int:
        """How many sessions are kept open to the server: `sessions`, else one over stdio, `DEFAULT_SESSIONS` over
        HTTP."""
        if self.sessions is not None:
            return self.sessions
        return 1 if self.transport == "stdio" else DEFAULT_SESSIONS


def check_upstream_name(name: str) -> str:
    """`name`, if it can prefix tool names (lowercase letters and digits, no underscore, so the
    namespaced name ``<upstream>_<tool>`` splits one way only). Raises ValueError otherwise."""
    if not _UPSTREAM_NAME.fullmatch(name):
        raise ValueError(f"upstream name {name!r}: lowercase letters and digits, starting with a letter")
    return name
