"""Adapter manifests: how a service offers tools over HTTP without a gateway release.

A service registers a manifest (`PUT /registry/api/adapters/{name}` with a service key). It is
plain data, validated here with every problem listed at once. Nothing in it becomes a tool until
an admin accepts (pins) it; see `gateway.store.registrations`.

Input schemas must be closed JSON Schema objects of a small, explicit subset (see
`gateway.registry.schema`), so the gateway can build the same validator the catalog advertises.

Output strings are third-party text unless the output schema declares them trusted: a ``pattern``
(an id, a code), an ``enum``, or ``format: date``. The model gets every other string withheld; a
field the agent must read is declared in ``shown_untrusted_fields`` and reaches the model fenced as
untrusted (and taints its reader). The review lists what the model is shown of each tool's output
(`gateway.registry.views.AdapterRegistration.model_sees`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.tools.declarations import NOT_APPLIED_STATUSES
from policies.text_safety import Flag, review_texts, strings_in

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_MANIFEST_BYTES",
    "MAX_TOOLS",
    "MAX_TOOL_NAME_CHARS",
    "PLACEHOLDER",
    "SECRET_PARTS",
    "ArgumentPlace",
    "AccessSpec",
    "AdapterManifest",
    "ApprovalSpec",
    "CredentialSpec",
    "EscalationSpec",
    "StateCondition",
    "ToolSpec",
    "WriteContractSpec",
    "model_facing_texts",
    "review_manifest",
    "secret_namespace",
    "secret_references",
]

_NAME = r"^[a-z][a-z0-9]{1,30}$"
PLACEHOLDER = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)}")
"""``{arg}`` in path and summary templates; one pattern, so what is checked is what is filled."""
_TOOL_NAME = r"^[a-z][a-z0-9_]{1,62}$"
MAX_TOOL_NAME_CHARS = 63
"""The longest tool name `_TOOL_NAME` takes."""
MAX_DESCRIPTION_CHARS = 1024
"""The longest tool description."""
MAX_TOOLS = 100
"""Tools per adapter."""
MAX_MANIFEST_BYTES = 512 * 1024
"""The largest manifest body the registry API reads (its JSON, as sent)."""
_PATH = r"^/[A-Za-z0-9_\-./{}]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AccessSpec(_Strict):
    """Who may see and call the tool: `{"public": true}` or `{"roles": [...]}`. Required; no default."""

    public: bool = False
    roles: tuple[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")], ...] = ()

    @model_validator(mode="after")
    def _either_public_or_roles(self) -> AccessSpec:
        if self.public == bool(self.roles):
            raise ValueError('access must be {"public": true} or name at least one role, not both')
        return self


class EscalationSpec(_Strict):
    field: str
    above: float
    required: Annotated[int, Field(ge=1, le=10)]


class ApprovalSpec(_Strict):
    approver_role: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]
    required: Annotated[int, Field(ge=1, le=10)] = 1
    escalations: tuple[EscalationSpec, ...] = ()
    decide_within_seconds: Annotated[float, Field(gt=0, le=30 * 86400)] = 86400.0
    execute_within_seconds: Annotated[float, Field(gt=0, le=7 * 86400)] = 3600.0


_FIELD_PATH = r"^[A-Za-z_][A-Za-z0-9_]{0,63}(?:\[\])?(?:\.[A-Za-z_][A-Za-z0-9_]{0,63}(?:\[\])?){0,3}$"
_ARGUMENT = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]


class StateCondition(_Strict):
    """One thing a state lookup checks in the read of the write's target (`WriteContractSpec.state_match`).

    `field` is a path into the answer (``state``, ``merged``, ``labels[].name``: ``[]`` takes every item of a
    list; a list answer is read as ``{"items": [...]}``), checked by exactly one of: ``equals`` (a constant:
    ``true``, ``"closed"``), ``equals_argument`` (the value the approved write set: ``state``) or
    ``includes_argument`` (every item of an approved list argument is among the field's values: ``labels``);
    a field that is null matches nothing.
    A condition on an argument the write did not set is skipped; a lookup with every condition skipped
    settles nothing.
    """

    field: Annotated[str, Field(pattern=_FIELD_PATH)]
    equals: str | int | float | bool | None = None
    equals_argument: _ARGUMENT | None = None
    includes_argument: _ARGUMENT | None = None

    @model_validator(mode="after")
    def _one_check(self) -> StateCondition:
        checks = [key for key in ("equals", "equals_argument", "includes_argument") if getattr(self, key) is not None]
        if len(checks) != 1:
            raise ValueError("a state condition has one of equals, equals_argument, includes_argument")
        if ("[]" in self.field) != (checks[0] == "includes_argument"):
            raise ValueError("includes_argument reads a list field (with []), and equals a single one (without)")
        return self

    def argument(self) -> str | None:
        """The approved argument the condition reads, if any."""
        return self.equals_argument or self.includes_argument


class WriteContractSpec(_Strict):
    """Where the gateway's key travels with a write, and how a write whose answer was lost is looked up.

    The key travels (``key_in``) as the ``Idempotency-Key`` header (``header``, the default, for an API that
    dedupes on it), as the body field `key_field` that the API stores (``body_field``: an ``external_id`` or
    ``client_reference_id``), or as a marker ``<!-- countersign:KEY -->`` appended to the free-text input
    `key_field` that the API stores (``marker``: an issue's body). It is looked up by one of:

    * a status read (`status_path`, with ``{key}``);
    * a search read (`search_path`, a GET path template filled from the write's approved arguments, with
      `search_query`) whose answer, a list or an object holding one, has an item whose `match_field` equals
      the key (``body_field``) or contains the marker (``marker``): that item is the applied write, and its
      `reference_field` is the reference. No such item is "no record";
    * a state read (`state_path`, a GET path template filled from the approved arguments, with
      `search_query`) whose answer meets every `state_match` condition: the state the write asked for holds
      (a label present, an issue closed, a pull merged). For writes with nowhere to carry a key. A state
      proves less than a key: it may have held before the write, so the card compares it with the tool's
      preview read at proposal and says which. A state that does not match is no record, never "refused";
    * none (`settle_by_person`): no read can settle the write, and an uncertain outcome goes to a person
      after the settle period. Declared, never assumed: a write without a lookup is a problem until then.
    """

    dedupes_on_key: bool
    """Does the service apply a request at most once per key? (Only then is a keyed resend allowed.)"""
    key_retention_seconds: Annotated[float, Field(gt=0)]
    status_path: Annotated[str, Field(pattern=_PATH)] | None = None
    """Status lookup by key, e.g. ``/idempotency/{key}``: 200 ``{"state": "applied"|"refused", ...}``
    or 404 ``{"state": "unknown"}``."""
    reference_field: str | None = None
    """Output field holding the service's id for the effect; None when the effect has none of its own
    (labels added)."""
    not_applied_statuses: tuple[Annotated[int, Field(ge=400, le=499)], ...] = tuple(sorted(NOT_APPLIED_STATUSES))
    """Statuses by which the API says it did not apply the write: FAILED, never resent. Left out, the documented
    table (README, "Refusals"): 400, 403, 404, 405, 409, 410, 412, 422 (a 401 is sent again later, as a 429)."""
    applied_statuses: tuple[Annotated[int, Field(ge=400, le=499)], ...] = ()
    """Statuses by which the API says the write is already applied (a 409 "already exists" for a key it stores):
    SUCCEEDED. Take such a status out of `not_applied_statuses` when naming it here."""
    max_resends: Annotated[int, Field(ge=0, le=10)] = 3
    """How many times an uncertain write may be sent again with its key (only where `dedupes_on_key`)."""
    key_in: Literal["header", "body_field", "marker"] = "header"
    key_field: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")] | None = None
    """The input the key is written into (``body_field``) or appended to (``marker``)."""
    search_path: Annotated[str, Field(pattern=_PATH)] | None = None
    search_query: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-\[\]]{1,64}$")], str] = Field(default_factory=dict)
    """Fixed query parameters of the search or state read (``{"state": "all", "per_page": "100"}``)."""
    match_field: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")] | None = None
    """The field of each item of the search answer that holds the key or the marker."""
    state_path: Annotated[str, Field(pattern=_PATH)] | None = None
    """The GET path template of the write's target, read to settle it by its state (``/repos/{owner}/{repo}/
    issues/{issue_number}``)."""
    state_match: tuple[StateCondition, ...] = ()
    """What the state read must show, every condition (see `StateCondition`)."""
    settle_by_person: bool = False
    """No read can settle this write: an uncertain outcome goes to a person (in place of the three lookups)."""

    @model_validator(mode="after")
    def _one_lookup_that_can_find_the_write(self) -> WriteContractSpec:
        lookups = [path for path in (self.status_path, self.search_path, self.state_path) if path is not None]
        if len(lookups) + self.settle_by_person != 1:
            raise ValueError(
                "a write contract looks writes up by status_path, search_path or state_path, or declares"
                " settle_by_person (one of them)"
            )
        if self.status_path is not None and "{key}" not in self.status_path:
            raise ValueError("status_path must contain {key}")
        if self.key_in != "header" and self.key_field is None:
            raise ValueError(f"key_in {self.key_in} needs key_field")
        if self.search_path is not None and (self.key_in == "header" or self.match_field is None):
            raise ValueError(
                "a search lookup needs the key stored by the API (key_in body_field or marker) and a match_field"
            )
        if (self.state_path is None) == bool(self.state_match):
            raise ValueError("state_path and state_match go together")
        return self


_FORBIDDEN_HEADERS = frozenset(
    {"authorization", "cookie", "host", "content-length", "content-type", "accept", "idempotency-key", "traceparent"}
)


class ArgumentPlace(_Strict):
    """Where one argument travels, when not where the method puts it (see `ToolSpec.send_as`)."""

    # Stored as registered (``in``), so the registry reads back what it stored; a registration stored before
    # this (``into``) is read too.
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True, validate_by_name=True)

    into: Literal["path", "query", "header", "body"] = Field(alias="in")
    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-\[\]]+$")]
    """The name on the wire (``labels`` for an argument listed as ``body_labels``)."""

    @model_validator(mode="after")
    def _not_a_gateway_header(self) -> ArgumentPlace:
        lowered = self.name.lower()
        if self.into == "header" and (lowered in _FORBIDDEN_HEADERS or lowered.startswith("x-countersign")):
            raise ValueError(f"header {self.name} is the gateway's to send")
        return self


class ToolSpec(_Strict):
    name: Annotated[str, Field(pattern=_TOOL_NAME)]
    description: Annotated[str, Field(min_length=1, max_length=MAX_DESCRIPTION_CHARS)]
    mode: Literal["read", "write"]
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    path: Annotated[str, Field(pattern=_PATH)]
    """Path template; ``{arg}`` placeholders are filled (percent-encoded) from the arguments."""
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    access: AccessSpec
    approval: ApprovalSpec | None = None
    write_contract: WriteContractSpec | None = None
    summary_template: Annotated[str, Field(max_length=200)] | None = None
    """For writes: a one-line preview with ``{arg}`` placeholders; agent text fields may not appear."""
    send_as: dict[str, ArgumentPlace] = Field(default_factory=dict)
    """Arguments that do not travel where the method puts them: by default a ``{placeholder}`` of the
    path fills it, and the others go in the query (GET, DELETE) or the JSON body (POST, PUT, PATCH). An
    OpenAPI import declares here a query parameter of a POST, a header parameter, the body of a DELETE,
    and a body property renamed because a parameter has its name
    (``{"body_name": {"in": "body", "name": "name"}}``)."""
    output_check: Literal["refuse", "report"] = "refuse"
    """What an answer that does not fit `output_schema` becomes: ``refuse`` (UPSTREAM_ERROR, the default) or
    ``report``, for an API whose answers drift from its own description: the fields that fit are shown, the
    rest are withheld from the model, and the mismatch is logged with the tool's name (never the values)."""
    agent_text_fields: tuple[str, ...] = ()
    untrusted_output_fields: tuple[str, ...] = ()
    """Output fields written by third parties (``notes``, ``items[].comment``): withheld from the model. Every
    string field is withheld unless declared trusted (a ``pattern``, an ``enum``, ``format: date``); naming one
    here says so explicitly, and a person reading the review sees it."""
    shown_untrusted_fields: tuple[str, ...] = ()
    """Output string fields written by third parties that the agent must read (a document or a message body):
    shown to the model fenced as untrusted, and a result that shows one taints its reader (`gateway.provenance`)."""
    visible_fields: tuple[str, ...] = ()
    """For writes: input fields other people will see (an expense note); see `Tool.visible_fields`."""
    returns_private_data: bool = True
    """For reads: whether the answer holds private data. Left out, it does (`Tool.returns_private_data`)."""
    timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 10.0
    target_path: Annotated[str, Field(pattern=_PATH)] | None = None
    """For writes: a GET path template that must answer 2xx for the caller before a card is made
    (``/reports/{report_id}``), so a write can only target what this caller can see."""
    preview_path: Annotated[str, Field(pattern=_PATH)] | None = None
    """For writes, in place of `target_path`: a GET path template read when the write is proposed and
    again just before it is sent (``/reports/{report_id}``). It must answer 2xx for the caller (else
    NOT_FOUND and no card); the `preview_fields` of its answer are shown to approvers on the card, and
    a target gone by the time the write is due ends the card FAILED, PRECONDITION_CHANGED, unsent."""
    preview_fields: tuple[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], ...] = ()
    """Top-level fields of the preview answer to show approvers (``status``, ``total``), in this order."""
    destructive: bool | None = None
    """For writes: whether the write may destroy or overwrite (a withdrawal) rather than only add (a
    submission). Left out, agents' clients are told nothing and assume it may (`Tool.destructive`)."""
    open_world: bool | None = None
    """Whether the backend is a third party's service outside the company. Left out, clients assume it is."""

    @model_validator(mode="after")
    def _write_needs_its_contract(self) -> ToolSpec:
        problems = []
        if self.mode == "write":
            if self.approval is None:
                problems.append("a write tool needs an approval policy")
            if self.write_contract is None:
                problems.append("a write tool needs a write contract (idempotency and status lookup)")
            if not self.summary_template:
                problems.append("a write tool needs a summary_template")
            if self.preview_path and self.target_path:
                problems.append("preview_path checks the target itself; declare it instead of target_path")
        elif self.approval or self.write_contract or self.summary_template or self.target_path or self.preview_path:
            problems.append(
                "approval, write_contract, summary_template, target_path and preview_path are for write tools"
            )
        elif self.destructive is not None:
            problems.append("destructive is for write tools")
        placeholders = set(PLACEHOLDER.findall(self.summary_template or ""))
        if self.preview_fields and not self.preview_path:
            problems.append("preview_fields need a preview_path")
        if placeholders & set(self.agent_text_fields):
            problems.append("summary_template may not quote agent text fields")
        both = sorted(set(self.untrusted_output_fields) & set(self.shown_untrusted_fields))
        if both:
            problems.append(f"fields both withheld and shown to the model: {both}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


_ENV = r"^[A-Z][A-Z0-9_]{1,63}$"


class CredentialSpec(_Strict):
    """A reference to the gateway's own credential for the service, never the secret itself.

    ``scheme`` says how it is sent: ``bearer`` (the default: ``Authorization: Bearer <secret>``), ``header``
    (an API key in the header `name`), ``query`` (an API key in the query parameter `name`), ``basic``
    (HTTP Basic: the user name in `username_env`, the password in `secret_env`) or
    ``oauth2_client_credentials`` (the gateway fetches an access token from `token_url` with the client id
    in `client_id_env` and the client secret in `secret_env`, optionally for `scope`, and reuses it until
    shortly before it expires). Every variable must be in the adapter's own namespace, and `token_url` must
    pass the operator's base-URL allowlist, like `AdapterManifest.base_url`.
    """

    secret_env: Annotated[str, Field(pattern=_ENV)]
    """Name of an environment variable on the gateway host that holds the credential."""
    scheme: Literal["bearer", "header", "query", "basic", "oauth2_client_credentials"] = "bearer"
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")] | None = None
    """The header (``X-Api-Key``) or query parameter (``api_key``) of an API key."""
    username_env: Annotated[str, Field(pattern=_ENV)] | None = None
    """For ``basic``: the variable holding the user name."""
    client_id_env: Annotated[str, Field(pattern=_ENV)] | None = None
    """For ``oauth2_client_credentials``: the variable holding the client id."""
    token_url: Annotated[str, Field(max_length=512, pattern=r"^https?://")] | None = None
    """For ``oauth2_client_credentials``: the token endpoint."""
    scope: Annotated[str, Field(max_length=256)] | None = None

    @model_validator(mode="after")
    def _parts_of_the_scheme(self) -> CredentialSpec:
        needs = {
            "header": ("name",),
            "query": ("name",),
            "basic": ("username_env",),
            "oauth2_client_credentials": ("client_id_env", "token_url"),
        }.get(self.scheme, ())
        if missing := [part for part in needs if getattr(self, part) is None]:
            raise ValueError(f"a {self.scheme} credential needs {', '.join(missing)}")
        if self.scheme == "header" and self.name is not None:
            lowered = self.name.lower()
            if lowered in _FORBIDDEN_HEADERS - {"authorization"} or lowered.startswith("x-countersign"):
                raise ValueError(f"header {self.name} is the gateway's to send")
        return self

    def references(self) -> dict[str, str]:
        """``{where: variable}`` of every secret this credential names."""
        named = {part: getattr(self, part) for part in SECRET_PARTS}
        return {f"credential.{where}": variable for where, variable in named.items() if variable is not None}


SECRET_PARTS = ("secret_env", "username_env", "client_id_env")
"""The fields of a `CredentialSpec` that name a secret (an environment variable on the gateway host)."""


class AdapterManifest(_Strict):
    """What a service registers."""

    base_url: Annotated[str, Field(max_length=512)]
    credential: CredentialSpec | None = None
    signing_secret_env: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{1,63}$")] | None = None
    """Env var on the gateway host holding a key shared with the backend, to sign the identity header
    with (HS256): the transition for a backend that cannot yet verify with the gateway's JWKS.

    Absent, the identity header is signed with the gateway's own keys (EdDSA) and the backend verifies
    it with ``/.well-known/jwks.json`` (`gateway.signing.identity.verify_identity`): nothing is shared. Named,
    like every secret reference it must start with the adapter's own namespace
    (``EXPENSES_SIGNING_KEY`` for ``expenses``), and a pinned adapter whose variable is not set on the
    gateway is not served (its backend expects HS256 and could not verify anything else).
    """
    health_path: Annotated[str, Field(pattern=_PATH)] = "/_health"
    """A light GET the gateway polls to know the backend is up; never the path of a write tool."""
    health_interval_seconds: Annotated[float, Field(ge=5, le=3600)] = 30.0
    """The fewest seconds between two health checks of this backend (each gateway process)."""
    tools: Annotated[tuple[ToolSpec, ...], Field(min_length=1, max_length=MAX_TOOLS)]

    @model_validator(mode="after")
    def _health_never_on_a_write_path(self) -> AdapterManifest:
        # A health check is sent with no approval: it must never be able to change anything.
        written = {tool.path for tool in self.tools if tool.mode == "write"}
        if self.health_path.split("?")[0] in written:
            raise ValueError(f"health_path {self.health_path} is the path of a write tool")
        return self


NAME_PATTERN = re.compile(_NAME)


def secret_namespace(adapter: str) -> str:
    """The prefix every secret an adapter names must start with (``GITHUBISSUES_`` for ``githubissues``): a
    service can have the gateway send it only secrets named for its own adapter, never any other of the
    gateway's environment."""
    return f"{adapter.upper()}_"


def secret_references(manifest: AdapterManifest) -> dict[str, str]:
    """``{where: variable}`` of every secret `manifest` names (credential parts, the signing secret)."""
    found = manifest.credential.references() if manifest.credential is not None else {}
    if manifest.signing_secret_env is not None:
        found["signing_secret_env"] = manifest.signing_secret_env
    return found


def model_facing_texts(manifest: AdapterManifest) -> list[tuple[str, str]]:
    """``(location, text)`` of every string of `manifest` that reaches the model or an approver.

    That is each tool's name, description and summary template, and every key and every string value at
    every depth of its input and output schemas: property names, ``pattern``, ``format``, ``enum``,
    ``title``, ``description``, unknown keywords alike. Agents read the schemas in ``tools/list``, so
    nothing in them is exempt from review.

    A location reads like ``tools[2].input_schema.properties.amount.description``; a key that is not a plain
    ASCII identifier is quoted as JSON (``properties["\\u200bamount"]``), and the location of a key itself
    ends in `` (key)``.
    """
    texts: list[tuple[str, str]] = []
    for index, tool in enumerate(manifest.tools):
        where = f"tools[{index}]"
        texts.append((f"{where}.name", tool.name))
        texts.append((f"{where}.description", tool.description))
        texts += strings_in(f"{where}.input_schema", tool.input_schema)
        texts += strings_in(f"{where}.output_schema", tool.output_schema)
        if tool.summary_template is not None:
            texts.append((f"{where}.summary_template", tool.summary_template))
    return texts


def review_manifest(manifest: AdapterManifest, *, other_tool_names: frozenset[str]) -> tuple[Flag, ...]:
    """The safety review of every model-facing text of `manifest` (see `policies.text_safety`)."""
    own = frozenset(tool.name for tool in manifest.tools)
    return review_texts(model_facing_texts(manifest), own_tool_names=own, other_tool_names=other_tool_names)
