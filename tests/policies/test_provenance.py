"""`policies.provenance.assess`: taint, data flow and flags from the reads that came before a proposal."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.provenance import CallRecord, HistoryRules, Taint
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
def test_without_a_standing_taint_a_read_that_showed_text_in_the_window_taints(
    history: list[CallRecord], tainted: bool
) -> None:
    """Where the store holds no taint, only reads within the window and before the proposal count."""
    assert assess(SHARED, {"text": "Sync", "times": 1}, history, now_ms=NOW, rules=RULES).tainted is tainted


DAY_MS = 86_400_000
LETTER = Taint(tool="demo_letter", at_ms=NOW - DAY_MS // 2, until_ms=NOW + DAY_MS // 2)


@pytest.mark.parametrize(
    ("taint", "session_taint", "tainted", "until_session_ends"),
    [
        (None, None, False, False),
        (LETTER, None, True, False),  # half a day on, whatever was read since
        (dataclasses.replace(LETTER, until_ms=NOW + 1), None, True, False),  # the last millisecond
        (dataclasses.replace(LETTER, until_ms=NOW), None, False, False),  # the period is over
        (dataclasses.replace(LETTER, at_ms=NOW + 5_000), None, True, False),  # a clock that moved back
        (dataclasses.replace(LETTER, until_ms=NOW), LETTER, True, True),  # over, but its session is open
        (None, dataclasses.replace(LETTER, until_ms=NOW - DAY_MS), True, True),  # a session lives past any period
    ],
)
def test_a_standing_taint_holds_for_its_period_and_a_session_taint_while_the_session_lives(
    taint: Taint | None, session_taint: Taint | None, tainted: bool, until_session_ends: bool
) -> None:
    """Twenty harmless reads in the window change nothing: the standing taint decides, and names its read."""
    harmless = [_read("rooms_list", ago_s=i) for i in range(20)]
    provenance = assess(
        SHARED, {"text": "Sync", "times": 1}, harmless, now_ms=NOW, rules=RULES, taint=taint,
        session_taint=session_taint,
    )  # fmt: skip
    assert provenance.tainted is tainted
    assert (provenance.taint is not None) is tainted
    if provenance.taint is not None:
        assert provenance.taint.tool == "demo_letter" and provenance.taint.until_session_ends is until_session_ends


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
