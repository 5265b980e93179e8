"""A model that replays a prepared transcript: the whole loop runs in tests, and in an evaluation's
dry run, without a model API.

A transcript is a list of turns, each the exact text the model would have answered (a JSON object
is written back as JSON text, so a transcript file reads as the turns themselves). ``${name}``
placeholders are filled from `values` when the turn is replayed (a scenario's ``day``, say), so one
transcript serves any run. A replayed turn ignores the prompt; the prompts are kept on `prompts`
so a test can read what the model was shown. Past the last turn it raises `DriverError`, which the
loop treats like any other failing model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from countersign_agent.errors import DriverError
from countersign_agent.usage import Usage, UsageLedger

__all__ = ["ScriptedModel", "load_transcript"]


@dataclass(kw_only=True)
class ScriptedModel:
    """A `Driver` whose answers are `turns`, in order."""

    turns: Sequence[str]
    ledger: UsageLedger = field(default_factory=UsageLedger)
    values: Mapping[str, str] = field(default_factory=dict)
    model: str = "scripted"
    prompts: list[str] = field(default_factory=list)
    """Every prompt received, in order (this driver is for tests: a real one keeps none)."""

    async def call(self, purpose: str, prompt: str) -> str:
        self.prompts.append(prompt)
        index = len(self.prompts) - 1
        if index >= len(self.turns):
            self.ledger.record(
                Usage(model=self.model, purpose=purpose, input_tokens=0, output_tokens=0, latency_ms=0.0, ok=False)
            )
            raise DriverError(f"the transcript has no turn {index + 1}", provider="scripted")
        text = Template(self.turns[index]).safe_substitute(self.values)
        self.ledger.record(
            Usage(
                model=self.model,
                purpose=purpose,
                input_tokens=len(prompt.split()),
                output_tokens=len(text.split()),
                latency_ms=0.0,
                ok=True,
            )
        )
        return text


def load_transcript(path: Path) -> list[str]:
    """The turns of a transcript file: a JSON list whose items are turn objects or raw text."""
    items: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(items, list):
        raise ValueError(f"{path}: a transcript is a JSON list of turns")
    return [item if isinstance(item, str) else json.dumps(item, ensure_ascii=False) for item in items]
