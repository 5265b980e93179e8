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

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.text_safety import Flag, review_texts

__all__ = [
    "PLACEHOLDER",
    "AccessSpec",
    "AdapterManifest",
    "ApprovalSpec",
    "CredentialSpec",
    "EscalationSpec",
    "ToolSpec",
    "WriteContractSpec",
    "model_facing_texts",
    "review_manifest",
]

_NAME = r"^[a-z][a-z0-9]{1,30}$"
PLACEHOLDER = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)}")
"""``{arg}`` in path and summary templates; one pattern, so what is checked is what is filled."""
_TOOL_NAME = r"^[a-z][a-z0-9_]{1,62}$"
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


class WriteContractSpec(_Strict):
    dedupes_on_key: bool
    """Does the service apply a request at most once per `Idempotency-Key`?"""
    key_retention_seconds: Annotated[float, Field(gt=0)]
    status_path: Annotated[str, Field(pattern=_PATH)]
    """Status lookup by key, e.g. ``/idempotency/{key}``: 200 ``{"state": "applied"|"refused", ...}``
    or 404 ``{"state": "unknown"}``."""
    reference_field: str
    """Output field holding the service's id for the effect."""
    not_applied_statuses: tuple[Annotated[int, Field(ge=400, le=499)], ...] = (400, 404, 409, 422)

    @model_validator(mode="after")
    def _status_path_takes_the_key(self) -> WriteContractSpec:
        if "{key}" not in self.status_path:
            raise ValueError("status_path must contain {key}")
        return self


class ToolSpec(_Strict):
    name: Annotated[str, Field(pattern=_TOOL_NAME)]
    description: Annotated[str, Field(min_length=1, max_length=1024)]
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


class CredentialSpec(_Strict):
    """A reference to the gateway's own credential for the service, never the secret itself."""

    secret_env: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{1,63}$")]
    """Name of an environment variable on the gateway host that holds the credential."""


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
    tools: Annotated[tuple[ToolSpec, ...], Field(min_length=1, max_length=100)]


NAME_PATTERN = re.compile(_NAME)


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
        texts += _schema_texts(f"{where}.input_schema", tool.input_schema)
        texts += _schema_texts(f"{where}.output_schema", tool.output_schema)
        if tool.summary_template is not None:
            texts.append((f"{where}.summary_template", tool.summary_template))
    return texts


def _schema_texts(where: str, node: Any) -> list[tuple[str, str]]:
    """``(location, string)`` for each key and each string value anywhere under `node`."""
    if isinstance(node, str):
        return [(where, node)]
    if isinstance(node, Mapping):
        found: list[tuple[str, str]] = []
        for key, value in node.items():
            at = _entry(where, str(key))
            found.append((f"{at} (key)", str(key)))
            found += _schema_texts(at, value)
        return found
    if isinstance(node, list | tuple):
        return [text for index, item in enumerate(node) for text in _schema_texts(f"{where}[{index}]", item)]
    return []


def _entry(where: str, key: str) -> str:
    return f"{where}.{key}" if key.isidentifier() and key.isascii() else f"{where}[{json.dumps(key)}]"


def review_manifest(manifest: AdapterManifest, *, other_tool_names: frozenset[str]) -> tuple[Flag, ...]:
    """The safety review of every model-facing text of `manifest` (see `policies.text_safety`)."""
    own = frozenset(tool.name for tool in manifest.tools)
    return review_texts(model_facing_texts(manifest), own_tool_names=own, other_tool_names=other_tool_names)
