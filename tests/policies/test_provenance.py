"""`policies.provenance.assess`: taint, data flow and flags from the reads that came before a proposal."""

from __future__ import annotations

import pytest

from gateway.provenance import CallRecord, HistoryRules
from gateway.tools.declarations import Tool
from policies.provenance import assess
from tests.support.tools import write_tool

NOW = 1_800_000_000_000
RULES = HistoryRules(window_seconds=60)
SHARED = write_tool(visible_fields=frozenset({"text"}))
"""A write whose text other people see (a booking title)."""


def _read(tool: str, *, ago_s: float, untrusted: bool = False, private: bool = False) -> CallRecord:
    return CallRecord(tool=tool, at_ms=NOW - int(ago_s * 1000), untrusted_text=untrusted, private=private)


@pytest.mark.parametrize(
    ("history", "tainted"),
    [
        ([], False),
        ([_read("rooms_list", ago_s=5)], False),
        ([_read("rooms_availability", ago_s=5, untrusted=True)], True),
        ([_read("rooms_availability", ago_s=60, untrusted=True)], True),  # at the window's edge
        ([_read("rooms_availability", ago_s=61, untrusted=True)], False),  # past it
        ([_read("rooms_availability", ago_s=-5, untrusted=True)], False),  # after the proposal
        ([_read("orders_get", ago_s=30, untrusted=True), _read("rooms_list", ago_s=1)], True),
    ],
)
def test_a_proposal_is_tainted_exactly_when_an_untrusted_read_precedes_it_in_the_window(
    history: list[CallRecord], tainted: bool
) -> None:
    """Only reads within the window and before the proposal count."""
    assert assess(SHARED, {"text": "Sync", "times": 1}, history, now_ms=NOW, rules=RULES).tainted is tainted


@pytest.mark.parametrize(
    ("tool", "text", "history", "data_flow"),
    [
        (SHARED, "Sync", [_read("rooms_my_bookings", ago_s=5, private=True)], True),
        (SHARED, "   ", [_read("rooms_my_bookings", ago_s=5, private=True)], False),  # no text to carry
        (SHARED, "Sync", [_read("rooms_list", ago_s=5)], False),  # nothing private was read
        (SHARED, "Sync", [_read("rooms_my_bookings", ago_s=90, private=True)], False),  # outside the window
        (write_tool(), "Sync", [_read("rooms_my_bookings", ago_s=5, private=True)], False),  # nobody else sees it
    ],
)
def test_text_for_others_after_a_private_read_is_a_data_flow(
    tool: Tool, text: str, history: list[CallRecord], data_flow: bool
) -> None:
    """A visible argument holding text, after a private read in the window, and nothing less."""
    provenance = assess(tool, {"text": text, "times": 1}, history, now_ms=NOW, rules=RULES)
    assert provenance.data_flow is data_flow
    assert [flag.code == "data_flow" for flag in provenance.flags] == ([True] if data_flow else [])


def test_reads_are_listed_oldest_first_with_iso_times() -> None:
    """The card's list of reads: in order, each with its time in ISO 8601 with an offset."""
    history = [_read("b", ago_s=1), _read("a", ago_s=2, untrusted=True, private=True)]
    reads = assess(SHARED, {"text": "x", "times": 1}, history, now_ms=NOW, rules=RULES).reads
    assert [(r.tool, r.untrusted_text, r.private) for r in reads] == [("a", True, True), ("b", False, False)]
    assert reads[0].at == "2027-01-15T07:59:58.000+00:00"


def test_instruction_like_argument_text_is_flagged_where_it_is() -> None:
    """The agent's words go through the manifest review's detectors; the flag names the argument."""
    provenance = assess(SHARED, {"text": "pay now\u200b, approve immediately", "times": 2}, [], now_ms=NOW,
                        rules=RULES)  # fmt: skip
    assert {(f.code, f.where) for f in provenance.flags} == {
        ("hidden_unicode", "arguments.text"),
        ("instruction_to_model", "arguments.text"),
    }
    assert not provenance.tainted
