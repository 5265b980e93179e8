"""Drafting a manifest from an OpenAPI document: what becomes a tool, what is left out, what is reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.registry.manifest import AdapterManifest
from gateway.registry.openapi_import import ImportResult, draft_manifest
from gateway.registry.tools import tools_from_manifest

BILLING = json.loads((Path(__file__).parents[1] / "data" / "billing-openapi.json").read_text())
CLOSED = {"type": "object", "additionalProperties": False}
CURRENCY = {"type": "string", "enum": ["EUR", "USD", "GBP"]}
INVOICE_ID = {"type": "string", "pattern": "^inv_[A-Za-z0-9]+$", "description": "The invoice, e.g. inv_8Hk2."}


def _billing(**kwargs: Any) -> ImportResult:
    return draft_manifest(BILLING, name="billing", **kwargs)


def _tool(result: ImportResult, name: str) -> dict[str, Any]:
    return next(tool for tool in result.manifest["tools"] if tool["name"] == name)


@pytest.mark.parametrize(
    ("name", "mode", "method", "path", "required", "optional"),
    [
        (
            "billing_list_invoices",
            "read",
            "GET",
            "/invoices",
            [],
            ["status", "customer_id", "limit", "x_request_trace"],
        ),  # fmt: skip
        ("billing_get_invoice", "read", "GET", "/invoices/{invoice_id}", ["invoice_id"], []),
        (
            "billing_create_credit_note",
            "write",
            "POST",
            "/invoices/{invoice_id}/credit-notes",
            ["invoice_id", "amount_cents", "currency", "reason"],
            [],
        ),
        ("billing_void_invoice", "write", "POST", "/invoices/{invoice_id}/void", ["invoice_id", "reason"], []),
        (
            "billing_delete_attachment",
            "write",
            "DELETE",
            "/invoices/{invoice_id}/attachments/{attachment_id}",
            ["invoice_id", "attachment_id"],
            [],
        ),
        ("billing_get_customer_balance", "read", "GET", "/customers/{customer_id}/balance", ["customer_id"], []),
        (
            "billing_get_credit_notes_credit_note_id",
            "read",
            "GET",
            "/credit-notes/{credit_note_id}",
            ["credit_note_id"],
            [],
        ),
    ],
)
def test_each_operation_becomes_a_tool_with_a_closed_flat_input(
    name: str, mode: str, method: str, path: str, required: list[str], optional: list[str]
) -> None:
    """Path and query parameters and body properties become one closed object; GET reads, the rest write."""
    tool = _tool(_billing(), name)
    assert (tool["mode"], tool["method"], tool["path"]) == (mode, method, path)
    assert tool["input_schema"] | CLOSED == tool["input_schema"]
    assert tool["input_schema"]["required"] == required
    assert list(tool["input_schema"]["properties"]) == required + optional


def test_the_billing_spec_reports_exactly_what_it_leaves_undecided() -> None:
    """A write without a lookup, a write without approval (its 204 is a success), a read without access."""
    assert _billing().problems == (
        "billing_void_invoice: a write without a lookup (x-countersign.write_contract.status_path, search_path, "
        "state_path or settle_by_person); write_contract left out",
        "billing_delete_attachment: a write without approval (x-countersign.approval)",
        "billing_get_customer_balance: no access rule (x-countersign.access)",
    )


def test_the_billing_spec_lists_what_it_skipped_and_decided() -> None:
    """Idempotency keys, HEAD and readOnly fields are skipped; generated names and untrusted fields are noted."""
    result = _billing()
    assert result.skipped == (
        "HEAD /invoices/{invoice_id}: a manifest tool cannot call HEAD",
        "billing_create_credit_note: header Idempotency-Key dropped (the gateway mints and sends the key)",
        "billing_create_credit_note: body property 'credit_note_id' is readOnly",
        "billing_void_invoice: body property 'idempotency_key' looks like an idempotency key; dropped "
        "(the gateway mints keys)",
    )
    assert result.notes == (
        "base_url is servers[0] of 2: https://eu1.billing.internal.example/v2",
        "billing_list_invoices: 3 free-text output field(s) marked untrusted: invoices[].customer_id, "
        "invoices[].invoice_id, next_cursor",
        "billing_get_invoice: 2 free-text output field(s) marked untrusted: customer_id, invoice_id",
        "billing_get_customer_balance: 1 free-text output field(s) marked untrusted: customer_id",
        "GET /credit-notes/{credit_note_id}: no operationId; named billing_get_credit_notes_credit_note_id",
        "billing_get_credit_notes_credit_note_id: 3 free-text output field(s) marked untrusted: credit_note_id, "
        "invoice_id, reason",
    )


def test_a_complete_write_is_drafted_with_its_declared_contract() -> None:
    """The body $ref and allOf are resolved and flattened; root write_contract defaults merge with the operation's."""
    tool = _tool(_billing(), "billing_create_credit_note")
    assert (
        tool["description"]
        == "Issue a credit note against an invoice\n\nCredits part or all of an invoice's open balance."
    )
    assert tool["input_schema"]["properties"] == {
        "invoice_id": INVOICE_ID,
        "amount_cents": {"type": "integer", "minimum": 1, "examples": [2500]},
        "currency": CURRENCY,
        "reason": {"type": "string", "minLength": 1, "maxLength": 500, "description": "Why the customer is credited."},
    }
    assert {key: tool[key] for key in ("access", "approval", "write_contract", "summary_template")} == {
        "access": {"roles": ["billing_admin"]},
        "approval": {
            "approver_role": "finance",
            "escalations": [{"field": "amount_cents", "above": 100000, "required": 2}],
        },
        "write_contract": {
            "dedupes_on_key": True,
            "key_retention_seconds": 86400,
            "status_path": "/idempotency/{key}",
            "reference_field": "credit_note_id",
        },
        "summary_template": "Credit {amount_cents} {currency} on invoice {invoice_id}",
    }
    assert tool["agent_text_fields"] == ["reason"]
    assert tool["output_schema"]["required"] == ["credit_note_id", "invoice_id", "amount_cents", "currency", "reason"]


@pytest.mark.parametrize(
    ("name", "absent"),
    [
        ("billing_void_invoice", "write_contract"),
        ("billing_delete_attachment", "approval"),
        ("billing_get_customer_balance", "access"),
        ("billing_list_invoices", "approval"),
    ],
)
def test_an_undecided_part_is_left_out_so_the_draft_cannot_look_complete(name: str, absent: str) -> None:
    """The importer never fills in access, approval or a write contract the spec did not declare."""
    assert absent not in _tool(_billing(), name)


def test_output_schema_is_resolved_and_nullable_fields_are_optional() -> None:
    """Response $refs are inlined; a nullable field is not required, since the backend may send null."""
    output = _tool(_billing(), "billing_list_invoices")["output_schema"]
    invoice = output["properties"]["invoices"]["items"]
    assert output["required"] == ["invoices"]
    assert invoice["required"] == ["invoice_id", "customer_id", "status", "total_cents", "currency"]
    assert invoice["properties"]["voided_at"] == {"type": "string", "format": "date-time"}
    assert invoice["properties"]["currency"] == CURRENCY
    # The declared field first; then every string with no enum, format or pattern, marked by default.
    assert _tool(_billing(), "billing_list_invoices")["untrusted_output_fields"] == [
        "invoices[].memo",
        "invoices[].customer_id",
        "invoices[].invoice_id",
        "next_cursor",
    ]


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [(None, "https://eu1.billing.internal.example/v2"), ("http://127.0.0.1:9001/", "http://127.0.0.1:9001")],
)
def test_base_url_comes_from_the_argument_or_the_first_server(base_url: str | None, expected: str) -> None:
    """Server variables take their defaults; a trailing slash is dropped so paths join cleanly."""
    assert _billing(base_url=base_url).manifest["base_url"] == expected


def test_a_spec_with_every_decision_declared_drafts_a_valid_manifest() -> None:
    """With nothing undecided, the draft has no problems and validates as an `AdapterManifest`."""
    keep = ("/invoices", "/invoices/{invoice_id}/credit-notes")
    document = BILLING | {"paths": {path: BILLING["paths"][path] for path in keep}}
    result = draft_manifest(document, name="billing")
    assert result.problems == ()
    manifest = AdapterManifest.model_validate(result.manifest)
    assert [tool.name for tool in manifest.tools] == ["billing_list_invoices", "billing_create_credit_note"]
    assert manifest.credential is not None and manifest.credential.secret_env == "BILLING_BACKEND_TOKEN"
    assert manifest.health_path == "/healthz"
    assert manifest.signing_secret_env is None


def test_a_shared_signing_secret_is_kept_when_declared_and_never_drafted() -> None:
    """Without one the backend verifies identities with the gateway's JWKS; a declared one (the HS256
    transition) is kept."""
    assert "signing_secret_env" not in _billing().manifest
    declared = BILLING | {"x-countersign": {**BILLING.get("x-countersign", {}), "signing_secret_env": "BILLING_ID_KEY"}}
    assert draft_manifest(declared, name="billing").manifest["signing_secret_env"] == "BILLING_ID_KEY"


READ = {"x-countersign": {"access": {"public": True}}, "responses": {"200": {"$ref": "#/components/responses/Ok"}}}
WRITE = {
    "x-countersign": {
        "access": {"roles": ["staff"]},
        "approval": {"approver_role": "approver"},
        "write_contract": {
            "dedupes_on_key": True,
            "key_retention_seconds": 3600,
            "status_path": "/idempotency/{key}",
            "reference_field": "thing_id",
        },
        "summary_template": "Change {thing_id}",
    },
    "responses": {"200": {"$ref": "#/components/responses/Ok"}},
}
THING_ID = {"name": "thing_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _body(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required or list(properties)}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _draft(method: str, operation: dict[str, Any], **document: Any) -> ImportResult:
    """One operation on ``/things/{thing_id}`` in an otherwise complete document."""
    base = {
        "openapi": "3.1.0",
        "servers": [{"url": "https://things.internal.example"}],
        "paths": {"/things/{thing_id}": {"parameters": [THING_ID], method: operation}},
        "components": COMPONENTS,
    }
    return draft_manifest(base | document, name="things")


COMPONENTS = {
    "responses": {
        "Ok": {
            "description": "ok",
            "content": {
                "application/json": {"schema": {"type": "object", "properties": {"thing_id": {"type": "string"}}}}
            },
        }
    },
    "schemas": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}}}},
}


@pytest.mark.parametrize(
    ("method", "operation", "problem"),
    [
        (
            "post",
            WRITE | {"requestBody": _body({"size": {"not": {"type": "integer"}}})},
            "things_post_things_thing_id: input.size uses oneOf/anyOf/not, which a manifest schema cannot express",
        ),
        (
            "post",
            WRITE | {"requestBody": {"content": {"text/csv": {"schema": {"type": "string"}}}}},
            "things_post_things_thing_id: the request body is not a JSON object; it cannot become arguments",
        ),
        (
            "post",
            WRITE | {"requestBody": _body({"client_token": {"type": "string"}})},
            "things_post_things_thing_id: the service requires body property 'client_token'; the gateway sends "
            "keys only as Idempotency-Key",
        ),
        (
            "get",
            READ
            | {"parameters": [{"name": "session", "in": "cookie", "required": True, "schema": {"type": "string"}}]},
            "things_get_things_thing_id: cookie parameter 'session' is not sent by manifest tools",
        ),
        (
            "get",
            READ
            | {
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}},
                    }
                }
            },
            "things_get_things_thing_id: #/components/schemas/Node refers to itself; recursive schemas cannot be "
            "inlined",
        ),
        (
            "get",
            READ | {"parameters": [{"$ref": "other.yaml#/components/parameters/Limit"}]},
            "things_get_things_thing_id: other.yaml#/components/parameters/Limit is not a local reference",
        ),
        (
            "get",
            READ | {"x-countersign": {"access": {"public": True}, "aproval": {}}},
            "GET /things/{thing_id}: unknown x-countersign key(s) ['aproval']",
        ),
        (
            "get",
            READ | {"x-countersign": {"access": {"public": True}, "approval": {"approver_role": "approver"}}},
            "things_get_things_thing_id: ['approval'] are for write tools; left out",
        ),
        (
            "post",
            WRITE | {"x-countersign": WRITE["x-countersign"] | {"write_contract": {"status_path": "/keys/{key}"}}},
            "things_post_things_thing_id: write_contract lacks ['dedupes_on_key', 'key_retention_seconds']; left out",
        ),
        (
            "post",
            WRITE | {"x-countersign": WRITE["x-countersign"] | {"untrusted_output_fields": ["note"]}},
            "things_post_things_thing_id: untrusted_output_fields names 'note', not a string output",
        ),
        (
            "post",
            WRITE | {"x-countersign": WRITE["x-countersign"] | {"agent_text_fields": ["note"]}},
            "things_post_things_thing_id: agent_text_fields names 'note', which is not an input",
        ),
        (
            "post",
            WRITE
            | {"requestBody": _body({"note": {"type": "string"}})}
            | {
                "x-countersign": WRITE["x-countersign"]
                | {"summary_template": "Say {note}", "agent_text_fields": ["note"]}
            },
            "tools[0]: Value error, summary_template may not quote agent text fields",
        ),
    ],
)
def test_what_a_manifest_cannot_express_is_a_problem(method: str, operation: dict[str, Any], problem: str) -> None:
    """Each mismatch between the document and what the gateway can call is reported, naming the tool."""
    result = _draft(method, {"summary": "Do it"} | operation)
    assert problem in result.problems, result.problems


def test_a_complete_small_document_has_no_problems() -> None:
    """The base document of the problem table is itself clean, so each row's problem is its own."""
    result = _draft("post", {"summary": "Change a thing"} | WRITE)
    assert result.problems == ()
    assert _tool(result, "things_post_things_thing_id")["input_schema"] == CLOSED | {
        "properties": {"thing_id": {"type": "string"}},
        "required": ["thing_id"],
    }


@pytest.mark.parametrize(
    ("document", "name", "problem"),
    [
        ({"swagger": "2.0"}, "things", "not an OpenAPI 3 document (openapi: '')"),
        ({"servers": []}, "things", "no absolute base URL (servers[0].url is ''); pass base_url"),
        ({"servers": [{"url": "/v1"}]}, "things", "no absolute base URL (servers[0].url is '/v1'); pass base_url"),
        ({}, "Things", "adapter name 'Things' must match ^[a-z][a-z0-9]{1,30}$"),
        ({"paths": {}}, "things", "no operation became a tool"),
        (
            {"x-countersign": {"credentials": {}}},
            "things",
            "x-countersign (root): unknown x-countersign key(s) ['credentials']",
        ),
    ],
)
def test_document_level_problems_are_reported_not_raised(document: dict[str, Any], name: str, problem: str) -> None:
    """A wrong version, no usable server, a bad adapter name or no operations each come back as a problem."""
    base = {"openapi": "3.0.3", "servers": [{"url": "https://things.internal.example"}], "paths": {}}
    base["paths"] = {"/things": {"get": {"summary": "List", "responses": {}} | READ}}
    base["components"] = {"responses": {"Ok": {"description": "ok"}}}
    document = {key: value for key, value in (base | document).items() if key != "openapi" or "swagger" not in document}
    assert problem in draft_manifest(document, name=name).problems


@pytest.mark.parametrize(
    ("method", "operation", "inputs", "send_as"),
    [
        (
            "post",
            WRITE | {"parameters": [{"name": "dry_run", "in": "query", "schema": {"type": "boolean"}}]},
            {"thing_id": {"type": "string"}, "dry_run": {"type": "boolean"}},
            {"dry_run": {"in": "query", "name": "dry_run"}},
        ),
        (
            "delete",
            WRITE | {"requestBody": _body({"note": {"type": "string"}})},
            {"thing_id": {"type": "string"}, "note": {"type": "string"}},
            {"note": {"in": "body", "name": "note"}},
        ),
        (
            "post",
            WRITE | {"requestBody": _body({"thing_id": {"type": "string"}})},
            {"thing_id": {"type": "string"}, "body_thing_id": {"type": "string"}},
            {"body_thing_id": {"in": "body", "name": "thing_id"}},
        ),
        (
            "post",
            WRITE | {"parameters": [{"name": "X-Api-Version", "in": "header", "schema": {"type": "string"}}]},
            {"thing_id": {"type": "string"}, "x_api_version": {"type": "string"}},
            {"x_api_version": {"in": "header", "name": "X-Api-Version"}},
        ),
        (
            "post",
            WRITE | {"requestBody": _body({"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}})},
            {"thing_id": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
            {},
        ),
        (
            "post",
            WRITE | {"requestBody": _body({"size": {"oneOf": [{"type": "integer"}, {"type": "string"}]}})},
            {"thing_id": {"type": "string"}, "size": {"type": "integer"}},
            {},
        ),
        (
            "post",
            WRITE
            | {
                "requestBody": _body(
                    {"author": {"type": "object", "properties": {"name": {"type": "string", "default": "me"}}}}
                )
            },
            {
                "thing_id": {"type": "string"},
                "author": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "default": "me"}},
                    "required": [],
                    "additionalProperties": False,
                },
            },
            {},
        ),
    ],
)
def test_parameters_and_bodies_are_folded_into_one_input_without_collisions(
    method: str, operation: dict[str, Any], inputs: dict[str, Any], send_as: dict[str, Any]
) -> None:
    """A query parameter of a POST, the body of a DELETE, a header, a body property named like a path
    parameter, arrays, nested objects and a oneOf input all become inputs; `send_as` says where each travels
    when the method would put it elsewhere, and the draft is a valid manifest."""
    result = _draft(method, {"summary": "Do it"} | operation)
    assert result.problems == ()
    [tool] = result.manifest["tools"]
    assert tool["input_schema"]["properties"] == inputs
    assert tool.get("send_as", {}) == send_as
    assert [built.name for built in tools_from_manifest("things", AdapterManifest.model_validate(result.manifest))]


def test_a_large_output_schema_is_trimmed_to_the_budget_keeping_fields_named_like_keywords() -> None:
    """Descriptions go first, then nested objects; a field called ``title`` or ``description`` is the API's
    own and stays, and a note says what was trimmed."""
    wordy = {"type": "string", "description": "x" * 300}
    nested = {"type": "object", "properties": {f"field{i}": wordy for i in range(60)}}
    schema = {"type": "object", "properties": {"title": wordy, "description": wordy, "owner": nested}}
    ok = READ | {"responses": {"200": {"description": "ok", "content": {"application/json": {"schema": schema}}}}}
    result = _draft("get", {"summary": "Read it"} | ok, **{"x-countersign": {"output_schema_budget": 1024}})
    output = _tool(result, "things_get_things_thing_id")["output_schema"]
    assert set(output["properties"]) == {"title", "description"}
    assert len(json.dumps(output, separators=(",", ":"))) <= 1024
    assert any("output schema trimmed from" in note for note in result.notes)


def test_the_overlays_refusal_table_applies_to_every_write_of_the_adapter() -> None:
    """An API whose 409 means "already applied", said once in the overlay's root ``write_contract``: every
    write drafted carries it (merged with its own contract), and the draft builds into tools that classify so."""
    override = {"not_applied_statuses": [400, 403, 404, 410, 422], "applied_statuses": [409]}
    result = draft_manifest(BILLING, name="billing", overlay={"write_contract": override})
    tool = _tool(result, "billing_create_credit_note")
    assert tool["write_contract"]["applied_statuses"] == [409]
    assert tool["write_contract"]["not_applied_statuses"] == [400, 403, 404, 410, 422]
    assert tool["write_contract"]["reference_field"] == "credit_note_id"  # the operation's own keys kept
    document = {"base_url": "http://127.0.0.1:9", "tools": [tool]}
    [built] = tools_from_manifest("billing", AdapterManifest.model_validate(document))
    assert built.write_contract is not None and built.write_contract.applied_statuses == {409}


PERSON_BY_DEFAULT = {
    "access": {"roles": ["staff"]},
    "approval": {"approver_role": "approver"},
    "summary_template": "Change things ({thing_id})",
    "write_contract": {"dedupes_on_key": False, "key_retention_seconds": 3600, "settle_by_person": True},
}


def test_root_defaults_decide_every_write_and_an_operations_own_lookup_replaces_the_defaults() -> None:
    """An overlay's root summary and a contract that leaves uncertain writes to a person decide every write of a
    large selection; an operation that declares its own lookup (a state read) gets it whole, with the root's
    other contract keys, and not the root's person."""
    document = {
        "openapi": "3.1.0",
        "servers": [{"url": "https://things.internal.example"}],
        "paths": {
            "/things/{thing_id}": {
                "parameters": [THING_ID],
                "patch": {"summary": "Close it", "operationId": "close", "responses": WRITE["responses"]},
                "delete": {"summary": "Drop it", "operationId": "drop", "responses": WRITE["responses"]},
            }
        },
        "components": COMPONENTS,
    }
    state = {"state_path": "/things/{thing_id}", "state_match": [{"field": "state", "equals": "closed"}]}
    overlay = PERSON_BY_DEFAULT | {"operations": {"close": {"write_contract": state}}}
    result = draft_manifest(document, name="things", overlay=overlay)
    assert result.problems == ()
    close, drop = _tool(result, "things_close"), _tool(result, "things_drop")
    assert close["summary_template"] == drop["summary_template"] == "Change things ({thing_id})"
    assert close["write_contract"] == {"dedupes_on_key": False, "key_retention_seconds": 3600} | state
    assert drop["write_contract"] == PERSON_BY_DEFAULT["write_contract"]


def test_an_answer_that_is_one_of_several_objects_shows_what_they_share() -> None:
    """GitHub's issue events are one of 26 objects: the fields every form declares alike are the output, required
    where every form requires them; a field the forms declare differently, or only some declare, is withheld. A
    form that is no object leaves the answer unexpressed, as before."""
    labeled = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "event": {"type": "string"},
            "label": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
        "required": ["id", "event"],
    }
    renamed = {"type": "object", "properties": {"id": {"type": "integer"}, "event": {"type": "string"},
               "label": {"type": "string"}}, "required": ["id"]}  # fmt: skip
    events = {"type": "array", "items": {"anyOf": [labeled, renamed]}}
    ok = {"description": "ok", "content": {"application/json": {"schema": events}}}
    result = _draft("get", READ | {"summary": "Events", "responses": {"200": ok}})
    assert result.problems == ()
    [tool] = result.manifest["tools"]
    item = tool["output_schema"]["items"]  # the array as GitHub answers it (wrapped under items when served)
    assert set(item["properties"]) == {"id", "event"} and item["required"] == ["id"]
    assert any("is one of 2 object forms; the fields they share are shown" in note for note in result.notes)
    mixed = {"type": "array", "items": {"anyOf": [labeled, {"type": "string"}]}}
    mixed_ok = ok | {"content": {"application/json": {"schema": mixed}}}
    refused = _draft("get", READ | {"summary": "Events", "responses": {"200": mixed_ok}})
    assert any("cannot be expressed" in problem for problem in refused.problems)
