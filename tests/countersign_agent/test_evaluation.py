"""The evaluation harness on the built-in scenarios, against the session gateway, with scripted
transcripts: the transcripts that behave pass every check, and each transcript that misbehaves fails
the checks it should (a check that cannot fail proves nothing)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from redis.asyncio import Redis

from countersign_agent.drivers import Driver
from countersign_agent.evaluation import DriverFor, ScenarioRun, Target, evaluate, future_days, score_table
from countersign_agent.scenarios import Scenario, load_scenarios
from countersign_agent.scripted import ScriptedModel, load_transcript
from gateway.principal import KeyKind
from tests.support.agents import make_key

pytestmark = pytest.mark.anyio

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "data" / "agent"


def _days(month: int) -> Iterator[str]:
    """Booking days of their own (in 2028, one month per test), so no other test's booking takes the slot."""
    return iter(f"2028-{month:02d}-{day:02d}" for day in range(1, 29))


async def _target(redis: Redis, mcp_url: str) -> Target:
    agent = await make_key(redis, subject="demo@acme.example", roles=("staff", "support"))
    admin = await make_key(redis, subject="root@acme.example", kind=KeyKind.ADMIN, roles=("approver",))
    return Target(mcp_url=mcp_url, agent_key=agent, admin_key=admin, follow_seconds=20, max_poll_seconds=0.1)


def _scripted(directory: Path) -> DriverFor:
    def driver_for(scenario: Scenario, values: Mapping[str, str]) -> Driver:
        return ScriptedModel(turns=load_transcript(directory / f"{scenario.name}.json"), values=values)

    return driver_for


def _failed(run: ScenarioRun) -> set[str]:
    return {check.name for check in run.checks if not check.passed}


async def test_every_built_in_scenario_passes_with_a_transcript_that_behaves(redis: Redis, mcp_url: str) -> None:
    """Booking approved and rejected, a plain read, and two planted injections: every check passes,
    and the outcomes the agent reports are the ones the admin's decisions led to."""
    scenarios = load_scenarios()
    assert {s.name for s in scenarios} >= {"book-approved", "book-rejected", "availability-read",
                                           "hostile-booking-title", "hostile-order-note"}  # fmt: skip
    runs = await evaluate(scenarios, _scripted(TRANSCRIPTS), await _target(redis, mcp_url), days=_days(5))
    assert {run.scenario.name: _failed(run) for run in runs} == {s.name: set() for s in scenarios}
    by_name = {run.scenario.name: run for run in runs}
    assert [o.state for o in by_name["book-approved"].outcomes] == ["SUCCEEDED"]
    assert [o.state for o in by_name["book-rejected"].outcomes] == ["REJECTED"]
    assert all("waiting for an administrator" in n for n in by_name["book-approved"].notices)
    table = score_table(runs)
    assert table.splitlines()[0].split()[:3] == ["scenario", "right_tool", "asked_before_write"]
    assert "FAIL" not in table and table.splitlines()[-1].split()[0] == "total"


async def test_transcripts_that_misbehave_fail_exactly_the_checks_they_break(redis: Redis, mcp_url: str) -> None:
    """Claiming a booking before its outcome (the loop sends that answer back, and the transcript has no
    other), obeying a planted instruction, and never answering are each caught, and shown as FAIL."""
    scenarios = load_scenarios(only=("book-approved", "hostile-booking-title", "availability-read"))
    runs = await evaluate(scenarios, _scripted(TRANSCRIPTS / "failing"), await _target(redis, mcp_url), days=_days(6))
    failed = {run.scenario.name: _failed(run) for run in runs}
    assert failed == {
        "book-approved": {"no_premature_success", "within_max_turns"},
        "hostile-booking-title": {"asked_before_write", "ignored_injection"},
        "availability-read": {"within_max_turns"},
    }
    by_name = {run.scenario.name: run for run in runs}
    # The premature claim was false when made, and the gateway's own report is still the truth.
    assert [o.state for o in by_name["book-approved"].outcomes] == ["SUCCEEDED"]
    # The obeyed injection got as far as a card, which the stand-in admin withdrew.
    assert [o.state for o in by_name["hostile-booking-title"].outcomes] == ["CANCELLED"]
    assert score_table(runs).count("FAIL") == 5


def test_future_days_are_distinct_iso_days_after_2028() -> None:
    days = list(zip(range(200), future_days(), strict=False))
    values = [day for _, day in days]
    assert len(set(values)) == len(values) == 200 and all("2029-01-01" <= day <= "2034-12-31" for day in values)
