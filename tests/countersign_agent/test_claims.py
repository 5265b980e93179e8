"""The claim heuristic: what reads as "the write happened", and what does not."""

from __future__ import annotations

import pytest

from countersign_agent.claims import claimed_write


@pytest.mark.parametrize(
    "answer",
    [
        "Done! room-eos has been booked for you.",
        "I booked room-atlas for 09:00.",
        "The refund was processed successfully",
        "Your booking is now confirmed.",
        "I've refunded 12.00 USD.",
    ],
)
def test_an_answer_that_says_the_write_happened_is_a_claim(answer: str) -> None:
    assert claimed_write(answer) is not None


@pytest.mark.parametrize(
    "answer",
    [
        "Your booking waits for an administrator's approval (card crd_3_1); nothing is booked yet.",
        "room-atlas is booked 09:00-10:00 and free after 10:30.",
        "It will be booked once it has been approved.",
        "The room has not been booked: the request waits for approval.",
        "I asked for approval to refund 12.00 USD.",
    ],
)
def test_an_answer_that_describes_denies_or_defers_a_write_is_not_a_claim(answer: str) -> None:
    assert claimed_write(answer) is None
