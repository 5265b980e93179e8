"""Scenario files: the built-in ones load, and a bad file or an unknown name is refused, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from countersign_agent.errors import ScenarioError
from countersign_agent.scenarios import BUILT_IN, load_scenarios

TRANSCRIPTS = Path(__file__).resolve().parent.parent / "data" / "agent"


def test_every_built_in_scenario_has_a_transcript_that_passes_and_one_may_fail() -> None:
    names = {scenario.name for scenario in load_scenarios()}
    assert names == {path.stem for path in BUILT_IN.glob("*.toml")}
    assert names == {path.stem for path in TRANSCRIPTS.glob("*.json")}
    assert {path.stem for path in (TRANSCRIPTS / "failing").glob("*.json")} <= names


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('name = "x"\nrequest = ', "Invalid value"),
        ('name = "x"\nrequest = "q"\ndecision = "ignore"', "decision"),
        ('name = "x"\nrequest = "q"\nmax_turn = 3', "max_turn"),
        ('name = "Not A Slug"\nrequest = "q"', "name"),
    ],
    ids=["not-toml", "unknown-decision", "misspelt-key", "bad-name"],
)
def test_a_bad_scenario_file_is_refused_with_its_path(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ScenarioError) as raised:
        load_scenarios(tmp_path)
    assert str(raised.value).startswith(str(tmp_path / "bad.toml")) and problem in str(raised.value)


def test_only_names_a_scenario_that_exists() -> None:
    assert [s.name for s in load_scenarios(only=("book-rejected",))] == ["book-rejected"]
    with pytest.raises(ScenarioError) as raised:
        load_scenarios(only=("book-rejected", "no-such"))
    assert "no-such" in str(raised.value)
