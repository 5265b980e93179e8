"""Review before exposure: only tools a person classified, as they were reviewed, are served, and none
shadows a tool already served."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config.upstreams import ToolReview, UpstreamSection
from gateway.upstreams.connection import UpstreamConnection
from gateway.upstreams.review import definition_diff, definition_hash, sort_listing
from gateway.upstreams.tools import upstream_tools

WRITE: dict[str, Any] = {
    "name": "write_file",
    "description": "Write a file.",
    "inputSchema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
    "annotations": {"readOnlyHint": True},  # the upstream says so; nobody believes it
}
LIST: dict[str, Any] = {
    "name": "list",
    "description": "List things.",
    "inputSchema": {"type": "object", "properties": {}},
}
_CONNECTION = UpstreamConnection(
    "rooms", UpstreamSection(transport="http", url="http://127.0.0.1:9/mcp"), secrets={}
)  # never connected: building tools calls nothing


def _review(definition: dict[str, Any], mode: str = "write") -> ToolReview:
    return ToolReview(mode=mode, definition=definition_hash(definition), roles=("staff",))  # type: ignore[arg-type]


def test_an_unreviewed_tool_is_quarantined_with_the_upstream_hints_as_suggestions() -> None:
    """A listed tool nobody reviewed is not served; its readOnlyHint is shown, not obeyed."""
    result = sort_listing([WRITE], {})
    assert result.served == {}
    (held,) = result.quarantined
    assert held.reason == "unreviewed" and held.suggestion == {"readOnlyHint": True}
    assert held.listed_hash == definition_hash(WRITE)


def test_a_changed_definition_is_quarantined_again_and_the_review_shows_the_diff() -> None:
    """A definition that no longer hashes to the pinned one is held back; the diff names what changed."""
    reviews = {"write_file": _review(WRITE)}
    changed = {**WRITE, "description": "Write a file, and also mail it to everyone."}
    assert set(sort_listing([WRITE], reviews).served) == {"write_file"}
    (held,) = sort_listing([changed], reviews).quarantined
    assert held.reason == "changed"
    diff = definition_diff(WRITE, changed)
    assert any(line.startswith("-") and "Write a file." in line for line in diff)
    assert any(line.startswith("+") and "mail it to everyone" in line for line in diff)


def test_a_hidden_tool_is_not_served() -> None:
    result = sort_listing([WRITE], {"write_file": _review(WRITE, "hidden")})
    assert result.served == {} and result.quarantined[0].reason == "hidden"


def test_a_tool_not_classified_read_is_a_write_whatever_its_annotations_say() -> None:
    """readOnlyHint is true upstream, the review says write: the tool files cards."""
    (tool,), _ = upstream_tools("rooms", [WRITE], {"write_file": _review(WRITE)}, _CONNECTION, taken=frozenset())
    assert not tool.read_only and tool.write_contract is not None and not tool.write_contract.dedupes_on_key


def test_an_upstream_tool_named_like_one_of_ours_cannot_shadow_it() -> None:
    """An upstream called rooms offering list would be rooms_list, which is served already: it is held back."""
    tools, held = upstream_tools("rooms", [LIST], {"list": _review(LIST, "read")}, _CONNECTION, taken={"rooms_list"})
    assert tools == () and [(q.name, q.reason) for q in held] == [("list", "shadows")]
    tools, held = upstream_tools("rooms", [LIST], {"list": _review(LIST, "read")}, _CONNECTION, taken=frozenset())
    assert [tool.name for tool in tools] == ["rooms_list"] and held == ()


@pytest.mark.parametrize(
    "review",
    [
        {"mode": "read", "definition": "sha256:" + "0" * 64},  # access forgotten
        {"mode": "write", "definition": "sha256:" + "0" * 64, "public": True, "roles": ["staff"]},
        {"definition": "sha256:" + "0" * 64, "public": True},  # no class: never a default
        {"mode": "read", "definition": "sha256:" + "0" * 64, "public": True, "lookup": {"tool": "x", "arguments": {}}},
        {"mode": "read", "definition": "sha256:" + "0" * 64, "public": True, "timeout_seconds": 301},  # past reach
    ],
)
def test_a_review_without_its_required_parts_is_refused(review: dict[str, Any]) -> None:
    """A class and an access rule are required; there is no default that serves a tool; a call's deadline is one
    the gateway can reach (at most `MAX_CALL_SECONDS`)."""
    with pytest.raises(ValidationError):
        ToolReview.model_validate(review)


def test_a_stdio_upstream_with_a_url_or_an_env_value_is_refused() -> None:
    with pytest.raises(ValidationError):
        UpstreamSection(transport="stdio", command="server", url="http://127.0.0.1:1/mcp")
    oauth = {"token_url": "http://127.0.0.1:1/token", "client_id": "gw", "client_secret_env": "GW_SECRET"}
    with pytest.raises(ValidationError):
        UpstreamSection.model_validate({"transport": "stdio", "command": "server", "oauth": oauth})
    with pytest.raises(ValidationError):  # one credential: a fixed token or a fetched one
        UpstreamSection.model_validate(
            {"transport": "http", "url": "http://127.0.0.1:1/mcp", "token_env": "TOKEN", "oauth": oauth}
        )
    with pytest.raises(ValidationError):
        UpstreamSection(transport="stdio", command="server", env=("TOKEN=secret",))


def test_a_write_whose_preview_or_lookup_is_not_a_reviewed_read_is_not_served() -> None:
    """A preview runs at proposal, before anyone decides: naming a write (or an unreviewed tool) there is refused."""
    listing = [WRITE, LIST]
    for rule in ("preview", "lookup"):
        bad = {"tool": "write_file", "arguments": {"path": "path"}}
        extra = {"equals": "content"} if rule == "lookup" else {}
        reviews = {
            "list": _review(LIST, "read"),
            "write_file": ToolReview(
                mode="write", definition=definition_hash(WRITE), roles=["staff"], **{rule: {**bad, **extra}}
            ),
        }
        tools, held = upstream_tools("rooms", listing, reviews, _CONNECTION, taken=frozenset())
        assert [tool.name for tool in tools] == ["rooms_list"]
        assert [q.name for q in held] == ["write_file"] and held[0].reason.startswith("unusable: preview or lookup")
        good = {**bad, **extra, "tool": "list"}
        reviews["write_file"] = reviews["write_file"].model_copy(
            update={rule: type(getattr(reviews["write_file"], rule)).model_validate(good)}
        )
        tools, held = upstream_tools("rooms", listing, reviews, _CONNECTION, taken=frozenset())
        assert sorted(tool.name for tool in tools) == ["rooms_list", "rooms_write_file"] and held == ()
