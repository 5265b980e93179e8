"""An org's cards at a glance: the numbers the console's overview draws, computed from the cards themselves.

Who calls it: `gateway.approvals.service.CardService.overview`, with the org's cards it read from the
ledger (those created within the window, and every open one), the ledger's clock, and what the
gateway reports of its backends. `summarize` is a pure function: no I/O, the clock passed in. The
admin API sends its `Overview` as JSON, and the console draws each chart from it and shows the same
numbers as a table, so a chart can be checked against the API number for number.

What it does not know: who else looks, or anything the cards do not hold. Time to decision is
measured on approved cards (the card records when its quorum was reached, by the Redis clock); a
rejection's time is in its history, which this does not read. Worker lag is the age of the oldest
approved card not yet claimed, as the `/metrics` gauge reports it.
"""

from __future__ import annotations

import enum
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from gateway.canonical import iso_from_ms
from gateway.cards.card import Card, CardState
from gateway.cards.views import IsoTime

__all__ = [
    "HOUR_MS",
    "DecisionTime",
    "HourCount",
    "OpenAge",
    "Overview",
    "OverviewWindow",
    "Waiting",
    "WriteOutcome",
    "outcome_of",
    "summarize",
]

HOUR_MS = 3_600_000
MAX_LINKED = 25
"""Cards named per write outcome and among those expiring: the chart links to them, the list stays short."""


class OverviewWindow(enum.Enum):
    DAY = "24h"
    WEEK = "7d"

    @property
    def hours(self) -> int:
        return 24 if self is OverviewWindow.DAY else 24 * 7


OUTCOMES = ("waiting", "succeeded", "failed", "uncertain", "rejected", "expired", "cancelled")
"""What became of a card, in the order the charts stack them: still open, or how it ended."""

_OUTCOME_OF = {
    CardState.PENDING: "waiting",
    CardState.APPROVED: "waiting",
    CardState.EXECUTING: "waiting",
    CardState.SUCCEEDED: "succeeded",
    CardState.FAILED: "failed",
    CardState.UNKNOWN: "uncertain",
    CardState.NEEDS_RECONCILIATION: "uncertain",
    CardState.REJECTED: "rejected",
    CardState.EXPIRED: "expired",
    CardState.CANCELLED: "cancelled",
}

WRITE_STATES = (CardState.SUCCEEDED, CardState.FAILED, CardState.UNKNOWN, CardState.NEEDS_RECONCILIATION)
"""The states of a write that was sent; the last three link to their cards (someone should look)."""

OPEN_STATES = (CardState.PENDING, CardState.APPROVED)
"""The states an approver or the worker still has to act on."""

AGE_BUCKETS: tuple[tuple[str, int], ...] = (
    ("under 1 h", HOUR_MS),
    ("1–4 h", 4 * HOUR_MS),
    ("4–24 h", 24 * HOUR_MS),
    ("over 1 day", 1 << 62),
)
"""Open cards by age: a label and the age (ms) below which a card falls in it."""


def outcome_of(state: CardState) -> str:
    return _OUTCOME_OF[state]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class HourCount(_Model):
    """Cards created in one hour, by what became of them (every name of `OUTCOMES`, zeros included)."""

    start: IsoTime
    counts: dict[str, int]


class DecisionTime(_Model):
    """Time from a card's creation to its approval, over the approved cards of one tool or approver role."""

    name: str
    cards: int
    median_seconds: float
    p90_seconds: float


class OpenAge(_Model):
    """Open cards whose age falls in one bucket, by state."""

    age: str
    pending: int
    approved: int


class Waiting(_Model):
    """A PENDING card whose decision deadline is within the hour."""

    card_id: str
    tool: str
    summary: str
    decide_by: IsoTime


class WriteOutcome(_Model):
    """Writes sent within the window that ended (or wait) in one state, and the cards, for those to look at."""

    state: CardState
    count: int
    card_ids: list[str]


class Overview(_Model):
    """What the console's overview draws for one org, over the window ending at `generated_at`."""

    org: str
    window: OverviewWindow
    generated_at: IsoTime
    outcomes: list[str]
    """The names of `HourCount.counts`, in stacking order."""
    cards_per_hour: list[HourCount]
    decision_time_by_tool: list[DecisionTime]
    decision_time_by_role: list[DecisionTime]
    open_by_age: list[OpenAge]
    expiring_within_hour: list[Waiting]
    """Soonest first, at most `MAX_LINKED`; `expiring_count` counts them all."""
    expiring_count: int
    writes: list[WriteOutcome]
    worker_lag_seconds: float
    """Age of the oldest APPROVED card no worker has claimed yet (0: none waits)."""
    backends: dict[str, bool] | None
    """Each configured backend's health check (True: answering); None when not reported here."""


def _percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (the value at rank ceil(fraction * n)): one of the values, never a blend."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def _decision_times(groups: Mapping[str, list[float]]) -> list[DecisionTime]:
    times = []
    for name in sorted(groups):
        values = sorted(groups[name])
        times.append(
            DecisionTime(
                name=name,
                cards=len(values),
                median_seconds=round(_percentile(values, 0.5), 3),
                p90_seconds=round(_percentile(values, 0.9), 3),
            )
        )
    return times


def _newest_ids(cards: list[Card]) -> list[str]:
    newest = sorted(cards, key=lambda card: (-card.created_ms, card.card_id))
    return [card.card_id for card in newest[:MAX_LINKED]]


def summarize(
    cards: Iterable[Card],
    *,
    org: str,
    now_ms: int,
    window: OverviewWindow,
    backends: Mapping[str, bool] | None,
) -> Overview:
    """The overview of `cards` (the org's cards created within the window and its open ones; a card
    given twice counts once) at `now_ms`. Hours are whole UTC hours, the last one the current hour."""
    first_hour = (now_ms // HOUR_MS - window.hours + 1) * HOUR_MS
    seen = {card.card_id: card for card in cards}
    hours: dict[int, Counter[str]] = {first_hour + n * HOUR_MS: Counter() for n in range(window.hours)}
    by_tool: defaultdict[str, list[float]] = defaultdict(list)
    by_role: defaultdict[str, list[float]] = defaultdict(list)
    ages: dict[str, Counter[str]] = {label: Counter() for label, _ in AGE_BUCKETS}
    expiring: list[Card] = []
    writes: dict[CardState, list[Card]] = {state: [] for state in WRITE_STATES}
    approved_at: list[int] = []
    for card in seen.values():
        if card.requester_org != org:
            continue
        if card.state in OPEN_STATES:
            age = now_ms - card.created_ms
            label = next(label for label, below in AGE_BUCKETS if age < below)
            ages[label][card.state.value] += 1
            if card.state is CardState.PENDING and now_ms <= card.decide_by_ms < now_ms + HOUR_MS:
                expiring.append(card)
            if card.state is CardState.APPROVED and card.approved_ms is not None:
                approved_at.append(card.approved_ms)
        if card.created_ms < first_hour:
            continue
        hours[card.created_ms // HOUR_MS * HOUR_MS][outcome_of(card.state)] += 1
        if card.approved_ms is not None:
            seconds = max(card.approved_ms - card.created_ms, 0) / 1000
            by_tool[card.tool].append(seconds)
            by_role[card.approver_role].append(seconds)
        if card.state in writes:
            writes[card.state].append(card)
    expiring.sort(key=lambda card: (card.decide_by_ms, card.card_id))
    return Overview(
        org=org,
        window=window,
        generated_at=iso_from_ms(now_ms),
        outcomes=list(OUTCOMES),
        cards_per_hour=[
            HourCount(start=iso_from_ms(start), counts={name: counts[name] for name in OUTCOMES})
            for start, counts in sorted(hours.items())
        ],
        decision_time_by_tool=_decision_times(by_tool),
        decision_time_by_role=_decision_times(by_role),
        open_by_age=[
            OpenAge(age=label, pending=ages[label]["PENDING"], approved=ages[label]["APPROVED"])
            for label, _ in AGE_BUCKETS
        ],
        expiring_within_hour=[
            Waiting(card_id=c.card_id, tool=c.tool, summary=c.summary, decide_by=iso_from_ms(c.decide_by_ms))
            for c in expiring[:MAX_LINKED]
        ],
        expiring_count=len(expiring),
        writes=[
            WriteOutcome(
                state=state,
                count=len(group),
                card_ids=[] if state is CardState.SUCCEEDED else _newest_ids(group),
            )
            for state, group in writes.items()
        ],
        worker_lag_seconds=max(now_ms - min(approved_at), 0) / 1000 if approved_at else 0.0,
        backends=dict(sorted(backends.items())) if backends is not None else None,
    )
