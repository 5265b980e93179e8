"""Runs scenarios against a gateway and scores them: the agent under test, a stand-in admin, checks.

For each scenario: open a session with the agent's key, run the loop with the driver the caller
supplies for it (a real model, or a scripted transcript), decide each card it filed as the scenario
says (`countersign_agent.approver`), follow the cards to their outcome, and run every check of
`countersign_agent.checks`. The table says, per scenario and check, pass, FAIL, or ``-`` (the
scenario gives the check no occasion to fail).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from string import Template

import httpx2

from countersign_agent.approver import Approver
from countersign_agent.checks import CHECKS, Check, Observed, run_checks
from countersign_agent.drivers import Driver
from countersign_agent.gateway_session import Outcome, connect
from countersign_agent.loop import Conversation, converse, follow, report, waiting_notices
from countersign_agent.scenarios import Scenario
from countersign_agent.usage import UsageLedger

__all__ = ["DriverFor", "ScenarioRun", "Target", "evaluate", "future_days", "score_table", "usage_lines"]

DriverFor = Callable[[Scenario, Mapping[str, str]], Driver]
"""The driver for one scenario, given the values its templates are filled with (``day``)."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """The gateway under evaluation and the two keys it takes: the agent's and the stand-in admin's."""

    mcp_url: str
    agent_key: str = field(repr=False)
    admin_key: str = field(repr=False)
    follow_seconds: float = 120.0
    max_poll_seconds: float = 2.0
    tasks: bool = True
    mode: str = "auto"


@dataclass(frozen=True, slots=True)
class ScenarioRun:
    scenario: Scenario
    conversation: Conversation
    notices: list[str]
    outcomes: list[Outcome]
    reports: list[str]
    checks: list[Check]

    @property
    def score(self) -> tuple[int, int]:
        counted = [check for check in self.checks if check.applies or not check.passed]
        return sum(check.passed for check in counted), len(counted)


def future_days(rng: random.Random | None = None) -> Iterator[str]:
    """Distinct days in 2029-2034 in random order: a booking scenario's slot is free on a backend that
    kept earlier runs' bookings, with no state kept between runs."""
    rng = rng or random.Random()
    first, span = date(2029, 1, 1), (date(2034, 12, 31) - date(2029, 1, 1)).days
    for offset in rng.sample(range(span), span):
        yield (first + timedelta(days=offset)).isoformat()


async def run_scenario(
    scenario: Scenario, driver_for: DriverFor, target: Target, http: httpx2.AsyncClient, day: str
) -> ScenarioRun:
    values = {"day": day}
    request = Template(scenario.request).safe_substitute(values)
    driver = driver_for(scenario, values)
    async with connect(target.mcp_url, target.agent_key, tasks=target.tasks, mode=target.mode) as session:
        run = await converse(driver, session, request, max_turns=scenario.max_turns, today=date.today().isoformat())
        notices = waiting_notices(run)
        approver = Approver(target.mcp_url, target.admin_key, http)
        for card in run.cards:
            await approver.decide(card.card_id, scenario.decision)
        outcomes = await follow(
            session, run, timeout_seconds=target.follow_seconds, max_poll_seconds=target.max_poll_seconds
        )
        writes = frozenset(tool.name for tool in session.tools if not tool.read_only)
    observed = Observed(conversation=run, write_tools=writes, outcomes=outcomes)
    return ScenarioRun(scenario, run, notices, outcomes, [report(o) for o in outcomes], run_checks(scenario, observed))


async def evaluate(
    scenarios: Sequence[Scenario], driver_for: DriverFor, target: Target, *, days: Iterator[str] | None = None
) -> list[ScenarioRun]:
    """Run every scenario in order, each on its own day and session."""
    days = days or future_days()
    async with httpx2.AsyncClient(timeout=30) as http:
        return [await run_scenario(scenario, driver_for, target, http, next(days)) for scenario in scenarios]


def score_table(runs: Sequence[ScenarioRun]) -> str:
    """A fixed-width table: one row per scenario, one column per check, the score, and a total."""
    names = [check.__name__ for check in CHECKS]
    width = max([len("scenario"), *(len(run.scenario.name) for run in runs)])
    lines = ["  ".join(["scenario".ljust(width), *names, "score"])]
    passed = total = 0
    for run in runs:
        cells = []
        for name in names:
            check = next(check for check in run.checks if check.name == name)
            mark = "FAIL" if not check.passed else ("pass" if check.applies else "-")
            cells.append(mark.ljust(len(name)))
        got, out_of = run.score
        passed, total = passed + got, total + out_of
        lines.append("  ".join([run.scenario.name.ljust(width), *cells, f"{got}/{out_of}"]))
    lines.append("  ".join(["total".ljust(width), *(" " * len(name) for name in names), f"{passed}/{total}"]))
    return "\n".join(line.rstrip() for line in lines)


def usage_lines(ledger: UsageLedger) -> list[str]:
    """The usage ledger summed up: calls, tokens, median latency, per purpose and model."""
    latencies = [entry.latency_ms for entry in ledger.entries if entry.ok]
    median = f"{statistics.median(latencies):.0f} ms" if latencies else "-"
    failed = sum(not entry.ok for entry in ledger.entries)
    models = sorted({f"{entry.model} ({entry.purpose})" for entry in ledger.entries})
    return [
        f"model calls: {ledger.calls} ({failed} failed) by {', '.join(models) or 'none'}",
        f"tokens: {ledger.input_tokens} in, {ledger.output_tokens} out; median latency {median}",
    ]
