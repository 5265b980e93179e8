"""`summarize`: an org's cards at a glance, a pure function of the cards and the clock."""

from __future__ import annotations

import pytest

from gateway.cards.card import Card, CardState
from gateway.cards.overview import HOUR_MS, OUTCOMES, Overview, OverviewWindow, summarize
from tests.support.cards import a_card

NOW = 1_000 * HOUR_MS + 30 * 60_000  # half past an hour
MINUTE = 60_000


def _summary(*cards: Card, window: OverviewWindow = OverviewWindow.DAY) -> Overview:
    return summarize(cards, org="acme", now_ms=NOW, window=window, backends={"rooms": True})


def test_cards_are_counted_in_the_hour_they_were_made_by_what_became_of_them() -> None:
    cards = [
        a_card(card_id="a", created_ms=NOW - 5 * MINUTE, state=CardState.PENDING, decide_by_ms=NOW + 3 * HOUR_MS),
        a_card(card_id="b", created_ms=NOW - 10 * MINUTE, state=CardState.SUCCEEDED),
        a_card(card_id="c", created_ms=NOW - 2 * HOUR_MS, state=CardState.UNKNOWN),
        a_card(card_id="d", created_ms=NOW - 2 * HOUR_MS, state=CardState.NEEDS_RECONCILIATION),
        a_card(card_id="e", created_ms=NOW - 30 * HOUR_MS, state=CardState.REJECTED),  # before the window
        a_card(card_id="f", created_ms=NOW - MINUTE, requester_org="other", state=CardState.FAILED),
    ]
    overview = _summary(*cards)
    hours = overview.cards_per_hour
    assert len(hours) == 24 and list(hours[-1].counts) == list(OUTCOMES)
    assert hours[-1].counts["waiting"] == 1 and hours[-1].counts["succeeded"] == 1
    assert hours[-3].counts["uncertain"] == 2
    assert sum(sum(hour.counts.values()) for hour in hours) == 4  # not the old one, not another org's
    writes = {w.state: (w.count, w.card_ids) for w in overview.writes}
    assert writes[CardState.SUCCEEDED] == (1, []) and writes[CardState.FAILED] == (0, [])
    assert writes[CardState.UNKNOWN] == (1, ["c"]) and writes[CardState.NEEDS_RECONCILIATION] == (1, ["d"])


def test_the_week_has_an_hour_for_every_hour_of_seven_days() -> None:
    old = a_card(created_ms=NOW - 100 * HOUR_MS, state=CardState.EXPIRED)
    overview = _summary(old, window=OverviewWindow.WEEK)
    assert len(overview.cards_per_hour) == 168
    assert sum(hour.counts["expired"] for hour in overview.cards_per_hour) == 1


@pytest.mark.parametrize(
    ("seconds", "median", "p90"),
    [([60], 60, 60), ([10, 20, 30, 40], 20, 40), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 5, 9)],
)
def test_time_to_approval_is_the_nearest_rank_median_and_90th_percentile(
    seconds: list[int], median: float, p90: float
) -> None:
    cards = [
        a_card(
            card_id=f"c{i}",
            created_ms=NOW - HOUR_MS,
            approved_ms=NOW - HOUR_MS + s * 1000,
            state=CardState.SUCCEEDED,
            approver_role="finance",
        )  # fmt: skip
        for i, s in enumerate(seconds)
    ]
    overview = _summary(*cards)
    [by_tool] = overview.decision_time_by_tool
    [by_role] = overview.decision_time_by_role
    assert (by_tool.name, by_tool.cards, by_tool.median_seconds, by_tool.p90_seconds) == (
        "rooms.book", len(seconds), median, p90,
    )  # fmt: skip
    assert by_role.name == "finance" and (by_role.median_seconds, by_role.p90_seconds) == (median, p90)


def test_open_cards_are_bucketed_by_age_and_those_expiring_within_the_hour_are_named_soonest_first() -> None:
    cards = [
        a_card(card_id="soon", created_ms=NOW - 30 * MINUTE, decide_by_ms=NOW + 20 * MINUTE),
        a_card(card_id="sooner", created_ms=NOW - 5 * HOUR_MS, decide_by_ms=NOW + 5 * MINUTE),
        a_card(card_id="later", created_ms=NOW - 2 * HOUR_MS, decide_by_ms=NOW + 2 * HOUR_MS),
        a_card(card_id="run", created_ms=NOW - 3 * HOUR_MS, state=CardState.APPROVED, approved_ms=NOW - 90_000),
        a_card(card_id="old", created_ms=NOW - 3 * 24 * HOUR_MS, decide_by_ms=NOW + 50 * MINUTE),
    ]
    overview = _summary(*cards)
    ages = {row.age: (row.pending, row.approved) for row in overview.open_by_age}
    assert ages == {"under 1 h": (1, 0), "1–4 h": (1, 1), "4–24 h": (1, 0), "over 1 day": (1, 0)}
    assert [w.card_id for w in overview.expiring_within_hour] == ["sooner", "soon", "old"]
    assert overview.expiring_count == 3
    assert overview.worker_lag_seconds == 90.0
    assert overview.backends == {"rooms": True}
