"""The usage ledger: one entry per model call, and never the prompt or the output.

What it records is what an operator needs to see cost and speed per purpose (which step of the
loop called the model): the model, the purpose, the tokens the provider counted, the latency, and
whether the call succeeded. Raw text stays out by construction: `Usage` has no field that could
hold it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Usage", "UsageLedger"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """One model call."""

    model: str
    purpose: str
    input_tokens: int
    """As the provider counted them (0 when it did not say)."""
    output_tokens: int
    latency_ms: float
    ok: bool


@dataclass(slots=True)
class UsageLedger:
    """An append-only list of `Usage`, with totals. One per agent run or evaluation."""

    entries: list[Usage] = field(default_factory=list)

    def record(self, usage: Usage) -> None:
        self.entries.append(usage)

    @property
    def input_tokens(self) -> int:
        return sum(entry.input_tokens for entry in self.entries)

    @property
    def output_tokens(self) -> int:
        return sum(entry.output_tokens for entry in self.entries)

    @property
    def calls(self) -> int:
        return len(self.entries)
