"""Manifest validation: what a registered tool may not declare."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from backends.expenses import expenses_manifest
from gateway.registry.manifest import AdapterManifest, ToolSpec
from gateway.registry.tools import tools_from_manifest

WRITE: dict[str, Any] = {
    "name": "svc_submit",
    "description": "Submit.",
    "mode": "write",
    "method": "POST",
    "path": "/things",
    "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
    "output_schema": {"type": "object"},
    "access": {"roles": ["staff"]},
    "approval": {"approver_role": "approver"},
    "write_contract": {
        "dedupes_on_key": True,
        "key_retention_seconds": 60,
        "status_path": "/k/{key}",
        "reference_field": "id",
    },  # fmt: skip
}


@pytest.mark.parametrize("field", ["title", "Title", "_note"])
def test_a_summary_may_not_quote_the_agents_own_words(field: str) -> None:
    """Whatever the spelling, a placeholder naming an agent text field is refused."""
    with pytest.raises(ValidationError):
        ToolSpec.model_validate({**WRITE, "summary_template": f"Submit {{{field}}}", "agent_text_fields": [field]})


def test_a_summary_of_other_fields_is_accepted() -> None:
    """Placeholders of fields the agent does not write freely are fine."""
    spec = ToolSpec.model_validate({**WRITE, "summary_template": "Submit {amount}", "agent_text_fields": ["title"]})
    assert spec.summary_template == "Submit {amount}"


def test_a_read_may_not_declare_itself_destructive() -> None:
    """destructive describes a write; on a read it is a mistake, refused at registration."""
    read = {key: WRITE[key] for key in ("name", "description", "method", "path", "input_schema", "output_schema")}
    with pytest.raises(ValidationError):
        ToolSpec.model_validate(
            {**read, "mode": "read", "method": "GET", "access": {"public": True}, "destructive": False}
        )


def test_the_demo_expenses_manifest_declares_what_its_tools_change_and_where_their_backend_is() -> None:
    """The registered tools carry the manifest's destructive and open_world into their declarations."""
    manifest = AdapterManifest.model_validate(expenses_manifest("http://127.0.0.1:1"))
    declared = {tool.name: (tool.destructive, tool.open_world) for tool in tools_from_manifest("expenses", manifest)}
    assert declared == {
        "expenses_list": (None, False),
        "expenses_get": (None, False),
        "expenses_submit": (False, False),
        "expenses_withdraw": (True, False),
    }
