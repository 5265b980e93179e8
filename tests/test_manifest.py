"""Manifest validation: what a registered tool may not declare."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.registry.manifest import ToolSpec

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
