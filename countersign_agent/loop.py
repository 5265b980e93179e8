"""The agent loop: turns until ``final`` or ``max_turns``, then following the cards it filed.

`converse` is the seeds' loop on the client side. Each turn it renders the prompt from scratch,
asks the driver, and parses exactly one turn. A ``tool_calls`` turn runs each call whose name the
gateway listed to this key (any other name runs nothing and is fed back as refused); a ``final``
turn ends it, unless it claims a write that was only proposed: that answer is sent back, as is an
answer that is not one valid turn, each costing its turn. A model
that cannot be asked, or ``max_turns`` without a final, ends in a degraded answer marked as such.

The agent's own words about cards come from the gateway's data, not from the model: after the
conversation it tells the user which cards wait for a decision (`waiting_notices`), `follow`
polls each until it is final, and `report` says what the gateway reports came of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from countersign_agent.claims import claimed_write
from countersign_agent.drivers import Driver
from countersign_agent.errors import DriverError, TurnParseError
from countersign_agent.gateway_session import CardRef, GatewaySession, Outcome
from countersign_agent.prompt import Completed, render_prompt
from countersign_agent.turns import ToolCall, parse_turn

__all__ = ["DEGRADED_MARK", "OWN_ANSWER", "Conversation", "converse", "follow", "report", "waiting_notices"]

DEGRADED_MARK = "[degraded]"
"""Opens every fallback answer, so neither a person nor a check mistakes it for the model's."""
PURPOSE = "agent.turn"
OWN_ANSWER = "(your previous answer)"
"""The name a fed-back answer of the model's own goes under in the completed calls (no tool ran)."""
MAX_CALLS_PER_TURN = 8


@dataclass(slots=True)
class Conversation:
    """One request, from the first turn to the answer given before any card's outcome."""

    request: str
    answer: str = ""
    degraded: bool = False
    failure: str | None = None
    """Why the answer is degraded: the driver's error, or ``max_turns``."""
    turns_used: int = 0
    completed: list[Completed] = field(default_factory=list)
    cards: list[CardRef] = field(default_factory=list)
    parse_errors: list[TurnParseError] = field(default_factory=list)
    withdrawn_claims: list[str] = field(default_factory=list)
    """Final answers the loop sent back because they claimed a write that was only proposed."""


async def converse(
    driver: Driver, session: GatewaySession, request: str, *, max_turns: int, today: str | None = None
) -> Conversation:
    """Run the loop for `request` until the model's final answer, a dead driver, or `max_turns`.
    `today` (an ISO date) is shown to the model, so it can read relative dates."""
    run = Conversation(request=request)
    for turn in range(max_turns):
        run.turns_used = turn + 1
        prompt = render_prompt(request, session.tools, run.completed, max_turns - turn, today=today)
        try:
            output = await driver.call(PURPOSE, prompt)
        except DriverError as error:
            return _degraded(run, f"the model could not be asked ({error})")
        try:
            parsed = parse_turn(PURPOSE, output)
        except TurnParseError as error:
            run.parse_errors.append(error)
            _send_back(run, f"it was not one valid turn: {error.reason}")
            continue
        if parsed.final is None:
            await _run_calls(session, run, parsed.tool_calls or [])
            continue
        claim = claimed_write(parsed.final) if run.cards else None
        if claim is None:
            run.answer = parsed.final
            return run
        # Only a card was filed: an answer that says the write happened would mislead the user.
        run.withdrawn_claims.append(parsed.final)
        _send_back(run, f"it says {claim!r}, but nothing has been written: each write only filed an approval "
                        "card. Answer again: say the request waits for approval.")  # fmt: skip
    return _degraded(run, f"no final answer within max_turns={max_turns}")


def _send_back(run: Conversation, why: str) -> None:
    run.completed.append(Completed(name=OWN_ANSWER, arguments={}, refused=why))


async def _run_calls(session: GatewaySession, run: Conversation, calls: list[ToolCall]) -> None:
    """Run each proposed call whose name the gateway listed; any other name runs nothing and is refused."""
    for index, call in enumerate(calls):
        if index >= MAX_CALLS_PER_TURN:
            run.completed.append(Completed(call.name, call.arguments, refused="too many calls in one turn"))
        elif session.tool(call.name) is None:
            refused = "unlisted_tool: no tool of that name is offered to you"
            run.completed.append(Completed(call.name, call.arguments, refused=refused))
        else:
            result = await session.call(call.name, call.arguments)
            run.completed.append(Completed(call.name, call.arguments, result=result))
            if result.card is not None and all(card.card_id != result.card.card_id for card in run.cards):
                run.cards.append(result.card)


def _degraded(run: Conversation, why: str) -> Conversation:
    run.degraded, run.failure = True, why
    filed = f" {len(run.cards)} approval card(s) were filed and wait for an administrator." if run.cards else ""
    run.answer = f"{DEGRADED_MARK} I could not finish this request: {why}. Nothing was written.{filed}"
    return run


def waiting_notices(run: Conversation) -> list[str]:
    """What the agent tells the user about each card before its outcome: it waits, nothing is written."""
    return [
        f"Approval card {card.card_id} ({card.tool}) is waiting for an administrator; nothing has been written yet."
        for card in run.cards
    ]


async def follow(
    session: GatewaySession, run: Conversation, *, timeout_seconds: float, max_poll_seconds: float = 2.0
) -> list[Outcome]:
    """Follow every card of `run` (as a task where it is one) until final, each within `timeout_seconds`."""
    return [
        await session.follow(card, timeout_seconds=timeout_seconds, max_poll_seconds=max_poll_seconds)
        for card in run.cards
    ]


def report(outcome: Outcome) -> str:
    """The outcome in the gateway's terms; a write is said to have happened only when it SUCCEEDED."""
    head = f"Approval card {outcome.card_id} ({outcome.tool}):"
    if not outcome.settled:
        return f"{head} still waiting ({outcome.said or outcome.state}); nothing is known to be written."
    if outcome.state == "SUCCEEDED":
        reference = f", reference {outcome.reference}" if outcome.reference else ""
        return f"{head} SUCCEEDED{reference}. The write was made."
    if outcome.state == "NEEDS_RECONCILIATION":
        return f"{head} NEEDS_RECONCILIATION: the outcome is unknown and an administrator must confirm it."
    return f"{head} {outcome.state}: {outcome.said or 'nothing was written'}."
