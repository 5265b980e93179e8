"""The outputSchema of a tool covers every structured result the gateway can send for it."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from gateway.codes import Code
from gateway.envelope import Envelope
from gateway.errors import ToolDeclarationError
from gateway.tools.output_schema import Refusal, output_schema, success_model
from gateway.tools.toolbox import Toolbox
from tests.support.tools import EchoOut, NoteOut, read_tool, write_tool


def _valid(schema: dict[str, Any], instance: object) -> bool:
    Draft202012Validator.check_schema(schema)
    return bool(Draft202012Validator(schema).is_valid(instance))


@pytest.mark.parametrize("code", list(Code))
@pytest.mark.parametrize("extra", [{}, {"details": {"errors": [{"field": "x"}]}, "retry_after": 1.5}])
def test_every_refusal_the_gateway_can_send_conforms_to_every_tools_schema(code: Code, extra: dict[str, Any]) -> None:
    """Refusals are structured results too, and MCP makes no exception for isError."""
    refusal = Envelope.refused(code, **extra).for_model()
    for tool in (read_tool(), write_tool()):
        assert _valid(output_schema(tool), refusal)


def test_a_refusal_with_a_code_outside_the_vocabulary_does_not_conform() -> None:
    """The schema names the stable codes, so a client can rely on the list."""
    made_up = {"error": {"code": "TEAPOT", "message": "no", "retryable": False}}
    assert not _valid(output_schema(read_tool()), made_up)


def test_a_write_tool_is_listed_with_the_card_receipt_not_the_backends_answer() -> None:
    """A write never runs on an agent's call: what the agent gets is the approval card."""
    tool = write_tool()
    assert success_model(tool).__name__ == "AgentCard"
    assert not _valid(output_schema(tool), {"text": "hi"})


def test_a_projected_tool_is_listed_with_its_projection_model() -> None:
    """`model_view_output` declares what `model_view` answers; the raw output model is not promised."""
    tool = read_tool(output=EchoOut, model_view=lambda out: {"author": "a", "body": "b"}, model_view_output=NoteOut)
    assert success_model(tool) is NoteOut


def test_a_success_model_reusing_a_refusal_definition_name_is_refused_at_construction() -> None:
    """Hoisting both shapes' $defs to one root must not let one definition replace the other."""

    class RefusalBody(BaseModel):  # same name as the refusal's own definition, another shape
        other: int

    class Clashing(BaseModel):
        body: RefusalBody

    with pytest.raises(ToolDeclarationError) as caught:
        Toolbox([read_tool(output=Clashing)], lease_seconds=60)
    assert caught.value.code == "schema_clash"
    assert "RefusalBody" in Refusal.model_json_schema()["$defs"]
