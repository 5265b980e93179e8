"""A write contract's state lookup: for writes with nowhere to carry a key (add labels, close an issue, merge a
pull), a read of the write's target settles it when it shows what the write asked for, and says whether it
showed that already when the card was proposed. Checked against a real HTTP service."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.outbound.backend_client import AiohttpUpstream
from gateway.principal import Principal
from gateway.registry.manifest import AdapterManifest, StateCondition, WriteContractSpec
from gateway.registry.tools import state_matches, tools_from_manifest
from gateway.tools.context import ToolContext
from gateway.tools.declarations import WriteStatus
from tests.support.planted import PlantedBackend

pytestmark = pytest.mark.anyio

ALICE = Principal(subject="alice@acme.example", org="acme", roles=frozenset({"staff"}), key_id="key_a")
CLOSED = {"field": "state", "equals_argument": "state"}
LABELLED = {"field": "labels[].name", "includes_argument": "labels"}
MERGED = {"field": "merged", "equals": True}


def _conditions(*raw: dict[str, Any]) -> tuple[StateCondition, ...]:
    return tuple(StateCondition.model_validate(condition) for condition in raw)


@pytest.mark.parametrize(
    ("conditions", "answer", "approved", "matched"),
    [
        ((CLOSED,), {"state": "closed"}, {"state": "closed"}, True),
        ((CLOSED,), {"state": "open"}, {"state": "closed"}, False),
        ((MERGED,), {"merged": True}, {}, True),
        ((MERGED,), {"merged": "true"}, {}, False),
        ((MERGED,), {}, {}, False),
        ((LABELLED,), {"labels": [{"name": "bug"}, {"name": "triage"}]}, {"labels": ["triage", "bug"]}, True),
        ((LABELLED,), {"labels": [{"name": "bug"}]}, {"labels": ["triage", "bug"]}, False),
        ((LABELLED,), {"labels": [{"name": "bug"}]}, {"labels": "bug"}, True),
        (({"field": "items[].name", "includes_argument": "labels"},), [{"name": "bug"}], {"labels": ["bug"]}, True),
        # A condition on an argument the write did not set asks nothing; with none left, nothing matched.
        ((CLOSED, {"field": "title", "equals_argument": "title"}), {"state": "closed"}, {"state": "closed"}, True),
        ((CLOSED,), {"state": "closed"}, {"title": "x"}, False),
        ((CLOSED, MERGED), {"state": "closed", "merged": False}, {"state": "closed"}, False),
    ],
)
def test_a_state_matches_only_when_every_condition_the_write_set_holds(
    conditions: tuple[dict[str, Any], ...], answer: Any, approved: dict[str, Any], matched: bool
) -> None:
    assert state_matches(_conditions(*conditions), answer, approved)[0] is matched


def test_what_a_state_read_saw_is_kept_per_field() -> None:
    """The evidence names each field read and its value (a list under ``[]``), for the approver."""
    answer = {"state": "closed", "labels": [{"name": "bug"}, "raw"]}
    _, saw = state_matches(_conditions(CLOSED, LABELLED), answer, {"state": "closed", "labels": ["bug"]})
    assert saw == {"state": "closed", "labels[].name": ["bug"]}


@pytest.mark.parametrize(
    "contract",
    [
        {"state_path": "/issues/{n}"},
        {"state_match": [MERGED]},
        {"state_path": "/issues/{n}", "state_match": [MERGED], "search_path": "/issues", "match_field": "body"},
        {"state_path": "/issues/{n}", "state_match": [{"field": "merged", "equals": True, "equals_argument": "m"}]},
        {"state_path": "/issues/{n}", "state_match": [{"field": "merged"}]},
        {"state_path": "/issues/{n}", "state_match": [{"field": "labels[].name", "equals": "bug"}]},
        {"state_path": "/issues/{n}", "state_match": [{"field": "state", "includes_argument": "labels"}]},
        {"state_path": "/issues/{n}", "state_match": [{"field": "a.b;c", "equals": 1}]},
    ],
    ids=["no-match", "no-path", "two-lookups", "two-checks", "no-check", "list-equals", "scalar-includes", "bad-path"],
)
def test_a_state_lookup_is_declared_whole_or_refused(contract: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        WriteContractSpec.model_validate({"dedupes_on_key": False, "key_retention_seconds": 60} | contract)


def test_a_state_contract_reads_back_as_stored() -> None:
    """A registration is stored as its model dumped, nulls and all, and served from that: it must validate again."""
    contract = WriteContractSpec.model_validate(
        {"dedupes_on_key": False, "key_retention_seconds": 60, "state_path": "/p/{n}", "state_match": [MERGED, CLOSED]}
    )
    assert WriteContractSpec.model_validate(contract.model_dump()) == contract


def _close_tool(contract: dict[str, Any]) -> Any:
    spec = {
        "name": "notes_close",
        "description": "Close an issue.",
        "mode": "write",
        "method": "PATCH",
        "path": "/repos/{owner}/issues/{number}",
        "input_schema": {
            "type": "object",
            "properties": {"owner": {"type": "string"}, "number": {"type": "integer"}, "state": {"type": "string"}},
            "required": ["owner", "number"],
            "additionalProperties": False,
        },
        "output_schema": {"type": "object", "properties": {"number": {"type": "integer"}}},
        "access": {"public": True},
        "approval": {"approver_role": "approver"},
        "summary_template": "Close {owner}#{number}",
        "write_contract": {"dedupes_on_key": False, "key_retention_seconds": 60} | contract,
    }
    [tool] = tools_from_manifest("notes", AdapterManifest.model_validate({"base_url": "http://x", "tools": [spec]}))
    return tool


def test_a_state_lookup_may_only_read_inputs() -> None:
    """Its path and its conditions are filled from the approved arguments: a name that is no input is refused."""
    for contract in (
        {"state_path": "/repos/{owner}/issues/{nope}", "state_match": [CLOSED]},
        {"state_path": "/repos/{owner}/issues/{number}", "state_match": [{"field": "x", "equals_argument": "nope"}]},
    ):
        with pytest.raises(Exception, match="not inputs"):
            _close_tool(contract)


@pytest.fixture
def backend(planted_backend: tuple[str, PlantedBackend]) -> Iterator[tuple[str, PlantedBackend]]:
    planted_backend[1].forget()
    yield planted_backend
    planted_backend[1].forget()


async def _look_up(
    backend: tuple[str, PlantedBackend], answer: Any, *, approved: dict[str, Any], before: dict[str, Any] | None
) -> WriteStatus:
    url, planted = backend
    planted.plant(answer)
    tool = _close_tool(
        {"state_path": "/repos/{owner}/issues/{number}", "state_match": [CLOSED], "reference_field": "number"}
    )
    http = AiohttpUpstream(url, service="notes")
    try:
        ctx = ToolContext(
            principal=ALICE,
            http=http,
            service="notes",
            identity={"x-countersign-identity": "i"},
            approved_arguments=approved,
            preview_facts=before,
        )
        status: WriteStatus = await tool.write_contract.status_lookup("cs-k", ctx)
    finally:
        await http.aclose()
    return status


@pytest.mark.parametrize(
    ("before", "held"),
    [({"target": "/repos/o/issues/7", "state": "open"}, False), ({"state": "closed"}, True), (None, None), ({}, None)],
    ids=["open-at-proposal", "closed-already-at-proposal", "no-preview", "preview-without-the-field"],
)
async def test_a_matching_state_settles_the_write_and_says_whether_it_held_at_proposal(
    backend: tuple[str, PlantedBackend], before: dict[str, Any] | None, held: bool | None
) -> None:
    """The issue reads closed, as the approved write asked: applied, by a state match, with what the read saw;
    compared with the card's preview, it either changed since proposal, held already (so the read cannot say
    this write made it), or cannot be compared."""
    approved = {"owner": "o", "number": 7, "state": "closed"}
    status = await _look_up(backend, {"number": 7, "state": "closed"}, approved=approved, before=before)
    assert (status.state, status.via, status.reference) == ("applied", "state_match", "7")
    assert status.detail == {
        "lookup": "/repos/o/issues/7", "saw": {"state": "closed"}, "matched": True, "held_at_proposal": held,
    }  # fmt: skip
    assert backend[1].raw_paths == [b"/repos/o/issues/7"]


async def test_a_state_that_does_not_match_is_no_record_never_a_refusal(backend: tuple[str, PlantedBackend]) -> None:
    """Still open: the write may not have landed, or landed and was undone since; nothing is proved either way."""
    approved = {"owner": "o", "number": 7, "state": "closed"}
    status = await _look_up(backend, {"number": 7, "state": "open"}, approved=approved, before={"state": "open"})
    assert (status.state, status.via, status.reference) == ("unknown", "state_match", None)
    assert status.detail == {"lookup": "/repos/o/issues/7", "saw": {"state": "open"}, "matched": False}


async def test_a_contract_that_leaves_writes_to_a_person_asks_the_backend_nothing(
    backend: tuple[str, PlantedBackend],
) -> None:
    """``settle_by_person``: no read is sent and nothing is settled, so an uncertain write goes to a person."""
    url, planted = backend
    tool = _close_tool({"settle_by_person": True})
    http = AiohttpUpstream(url, service="notes")
    try:
        ctx = ToolContext(principal=ALICE, http=http, service="notes", identity={"x-countersign-identity": "i"})
        status = await tool.write_contract.status_lookup("cs-k", ctx)
    finally:
        await http.aclose()
    assert (status.state, status.via) == ("unknown", "none") and planted.raw_paths == []
