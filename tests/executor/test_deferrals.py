"""Which deferrals of an approved card are audited (gateway/executor/deferrals.py): the first for each
reason, then one per interval while it goes on; a card that ran, or was forgotten, is audited anew."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.executor.deferrals import DeferralLog


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_deferral_is_audited_once_per_reason_and_again_after_the_interval() -> None:
    clock = _Clock()
    log = DeferralLog(every_seconds=300, clock=clock)
    assert log.due("crd_1", "no signing key")
    clock.now = 299.9
    assert not log.due("crd_1", "no signing key")
    assert log.due("crd_2", "no signing key")  # another card is its own
    assert log.due("crd_1", "adapter rooms is unhealthy")  # a new reason is told at once
    assert log.due("crd_1", "no signing key")  # and so is the old one coming back
    clock.now = 599.9
    assert log.due("crd_1", "no signing key")  # an interval after it was last audited
    log.forget("crd_1")
    assert log.due("crd_1", "no signing key")  # it ran: a later wait is new


def test_the_memory_is_bounded_and_a_forgotten_card_is_audited_again() -> None:
    log = DeferralLog(max_cards=2, clock=_Clock())
    for card in ("a", "b", "c"):
        assert log.due(card, "r")
    assert not log.due("c", "r") and not log.due("b", "r")
    assert log.due("a", "r")  # the least recently deferred went first


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["x", "y"]), st.floats(0, 400)), max_size=40))
def test_every_new_reason_and_every_interval_is_audited_whatever_the_order(
    steps: list[tuple[str, str, float]],
) -> None:
    """Against a plain model: due exactly when the card's last audited deferral had another reason or is an
    interval old (the clock only goes forward)."""
    clock = _Clock()
    log = DeferralLog(every_seconds=300, clock=clock)
    last: dict[str, tuple[str, float]] = {}
    for card, reason, step in steps:
        clock.now += step
        expected = card not in last or last[card][0] != reason or clock.now - last[card][1] >= 300
        assert log.due(card, reason) is expected
        if expected:
            last[card] = (reason, clock.now)
