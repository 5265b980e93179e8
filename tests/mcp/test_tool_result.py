"""A tool result as agent frameworks show it: the refusal's sentence first, the structured details after."""

from __future__ import annotations

import json

import mcp_types as types

from gateway.codes import Code
from gateway.envelope import Envelope
from gateway.mcp.tasks import tool_result


def test_a_refusals_text_opens_with_its_sentence_then_the_json() -> None:
    """A framework that shows only the text, or a repr of the result, shows the sentence before anything else."""
    result = tool_result(Envelope.refused(Code.PERMISSION_DENIED, details={"tool": "rooms_book"}))
    [block] = result.content
    assert isinstance(block, types.TextContent)
    sentence, blank, details = block.text.partition("\n\n")
    assert sentence == "This tool is not available to you." and blank
    assert json.loads(details) == result.structured_content
    assert repr(result).index("This tool is not available") < repr(result).index("PERMISSION_DENIED")
    assert result.structured_content is not None
    assert next(iter(result.structured_content["error"])) == "message"


def test_a_successful_results_text_is_its_json() -> None:
    result = tool_result(Envelope.ok({"rooms": []}))
    [block] = result.content
    assert isinstance(block, types.TextContent) and json.loads(block.text) == {"rooms": []}
