"""Provenance: what a requester read before it proposed a write, as a card carries it. Vocabulary only.

Who uses it: the executor's agent path appends one `CallRecord` to a `CallHistory` per answered read
and, at a proposal, hands the history it finds to `policies.provenance.assess`, which returns the
card's `Provenance`. The card stores it (``provenance`` field, JSON) and every surface that shows a
card shows it in this shape, under these names (the admin API, ``countersign cards show``, the
proposal's audit event, notifications):

``{"tainted": bool, "data_flow": bool, "reads": [{"tool", "at", "untrusted_text", "private"}],
"flags": [{"code", "where", "detail"}]}``

A history belongs to one principal (org and subject), whatever MCP session or protocol era its calls
came in; it keeps the last `HistoryRules.max_reads` reads and forgets a read once it is older than
`HistoryRules.window_seconds`. The reads are what an approver is shown; they decide nothing.

Taint is apart from the reads, and sticky. A read taints its principal only when third-party text
actually reached the model-visible result (a `gateway.untrusted.ShownUntrusted` field, fenced; text
withheld from the model does not count). From then on the principal is tainted for
`HistoryRules.taint_seconds` (24 h by default): its model may still hold the text, and no number of
later reads, and no new session, shortens that. A later tainting read may lengthen it, never shorten
it. A 2025-11-25 session that was shown the text stays tainted past the period, for as long as it
lives (the gateway process that serves it remembers it until it closes). Every card the principal
proposes meanwhile is tainted, and no rule approves it in a person's stead
unless the rule says so explicitly (`policies.policy_approval`, `gateway.cedar.engine`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from gateway.audit.events import AuditEvent

__all__ = [
    "CallHistory",
    "CallRecord",
    "HistoryRules",
    "InMemoryCallHistory",
    "Provenance",
    "ProvenanceFlag",
    "ProvenanceRead",
    "ProvenanceTaint",
    "Taint",
    "history_owner",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallRecord:
    """One answered read, as the history keeps it: small, and nothing of its arguments or its result."""

    tool: str
    at_ms: int
    """Wall-clock time of the answer, in milliseconds since the epoch."""
    untrusted_text: bool
    """Third-party text reached the model in this read's result, fenced (`gateway.untrusted.shows_fenced`): the
    read taints its principal."""
    private: bool
    """The tool declares its output private (`gateway.tools.declarations.Tool.returns_private_data`)."""

    def to_json(self) -> str:
        return json.dumps([self.tool, self.at_ms, int(self.untrusted_text), int(self.private)], separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> CallRecord:
        tool, at_ms, untrusted, private = json.loads(raw)
        return cls(tool=str(tool), at_ms=int(at_ms), untrusted_text=bool(untrusted), private=bool(private))


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryRules:
    """How much of a requester's history a card looks back on, and who must countersign a tainted card."""

    window_seconds: float = 900.0
    """A read older than this is not shown on a card (and the stored history expires after it)."""
    max_reads: int = 20
    """The history keeps this many of the latest reads."""
    taint_seconds: float = 86400.0
    """How long a read that showed the model third-party text taints its principal; no later read shortens it."""
    tainted_approvals: Mapping[str, int] = field(default_factory=dict)
    """Per org, the distinct approvers a tainted card needs (absent: the tool's own number)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Taint:
    """A principal's standing taint: the read that showed its model third-party text, and until when it holds."""

    tool: str
    at_ms: int
    """Wall-clock time of that read, in milliseconds since the epoch."""
    until_ms: int
    """The taint holds until then (the store forgets it at about the same time, by its own clock)."""

    @classmethod
    def of(cls, record: CallRecord, rules: HistoryRules) -> Taint:
        """The taint `record` (a read that showed third-party text) leaves under `rules`."""
        return cls(tool=record.tool, at_ms=record.at_ms, until_ms=record.at_ms + taint_ms(rules))

    def to_json(self) -> str:
        return json.dumps([self.tool, self.at_ms, self.until_ms], separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Taint:
        tool, at_ms, until_ms = json.loads(raw)
        return cls(tool=str(tool), at_ms=int(at_ms), until_ms=int(until_ms))


def taint_ms(rules: HistoryRules) -> int:
    """The taint period of `rules`, in whole milliseconds (at least one)."""
    return max(1, int(rules.taint_seconds * 1000))


def history_owner(org: str, subject: str) -> str:
    """Whose history a call belongs to: its principal's (org and subject), whatever MCP session or protocol
    era it came in. Not the session's: an agent that read untrusted text in one session must not shed
    the taint by proposing from a new one (a 2025-11-25 client opens sessions at will, and the
    2026-07-28 era has none), so every read of a principal within the window counts."""
    return f"{org}|{subject}"


class CallHistory(Protocol):
    """Where reads are remembered between calls. Methods raise `StoreUnavailableError` when the store fails."""

    async def append(self, owner: str, record: CallRecord, *, rules: HistoryRules) -> None:
        """Remember `record` for `owner`: one round trip, bounded to `rules.max_reads`, expiring after the window.
        A record that showed third-party text (``untrusted_text``) taints `owner` for `rules.taint_seconds`
        in the same step, unless a taint that lasts longer is already there."""
        ...

    async def recent(self, owner: str, *, rules: HistoryRules) -> Sequence[CallRecord]:
        """`owner`'s remembered reads, oldest first (not yet filtered by the window)."""
        ...

    async def taint(self, owner: str) -> Taint | None:
        """`owner`'s standing taint; None when it has none (never tainted, or its period is over)."""
        ...


class AuditedCallHistory(Protocol):
    """A history that remembers an answered read and appends its audit event in one step where it can
    (`gateway.store.call_history`: one round trip on a single Redis node)."""

    async def append_audited(self, owner: str, record: CallRecord, *, rules: HistoryRules, event: AuditEvent) -> bool:
        """Remember `record` for `owner` and audit `event`: whether the event is in the trail (when not,
        the read was not remembered either, or it was first and the trail alone failed).

        Raises:
            StoreUnavailableError: the read could not be remembered; nothing was audited.
        """
        ...


class InMemoryCallHistory:
    """`CallHistory` in one process: the same bound, and an expiry by the caller's clock at read time."""

    def __init__(self) -> None:
        self._calls: dict[str, list[CallRecord]] = {}
        self._taints: dict[str, Taint] = {}

    async def append(self, owner: str, record: CallRecord, *, rules: HistoryRules) -> None:
        self._calls[owner] = [*self._calls.get(owner, []), record][-rules.max_reads :]
        if record.untrusted_text:
            taint, held = Taint.of(record, rules), self._taints.get(owner)
            if held is None or held.until_ms < taint.until_ms:
                self._taints[owner] = taint

    async def recent(self, owner: str, *, rules: HistoryRules) -> Sequence[CallRecord]:
        return tuple(self._calls.get(owner, ()))

    async def taint(self, owner: str) -> Taint | None:
        """The taint as remembered; whether it still holds is the policy's to say, by the caller's clock."""
        return self._taints.get(owner)


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ProvenanceRead(_Shape):
    """One read that preceded the proposal within the window."""

    tool: str
    at: str
    """ISO 8601 with its offset (UTC)."""
    untrusted_text: bool
    """It returned text written by a third party."""
    private: bool
    """It returned private data."""


class ProvenanceTaint(_Shape):
    """The read that tainted the requester: it showed the requester's model third-party text."""

    tool: str
    at: str
    """ISO 8601 with its offset (UTC)."""
    until: str
    """The requester stays tainted until then, whatever it reads meanwhile."""
    until_session_ends: bool = False
    """The period is over, but the 2025-11-25 session that was shown the text (and proposed this card) is
    still open: its model may still hold the text, so it stays tainted for as long as it lives."""


class ProvenanceFlag(_Shape):
    """Something in the agent's argument values an approver should look at (`policies.text_safety`)."""

    code: str
    """A `policies.text_safety.FlagCode` value, or ``data_flow``."""
    where: str
    """``arguments.<json path>``."""
    detail: str
    """An excerpt with hidden characters spelled out, or what flows where."""


class Provenance(_Shape):
    """What the requester did before proposing a card, and what an approver should make of it."""

    tainted: bool
    """The requester's model may hold third-party text: a read showed it some within the taint period."""
    data_flow: bool
    """Argument values go where other people will see them, after a read of private data."""
    reads: list[ProvenanceRead] = Field(default_factory=list)
    """Oldest first."""
    flags: list[ProvenanceFlag] = Field(default_factory=list)
    taint: ProvenanceTaint | None = None
    """The read that tainted the requester, when `tainted` (None on cards stored before it was recorded)."""

    def to_stored(self) -> str:
        """The JSON a card stores, and an audit event or a notification carries."""
        return self.model_dump_json()

    @classmethod
    def from_stored(cls, raw: str | None) -> Provenance | None:
        """A card's provenance from its stored JSON; None for a card stored without one."""
        return cls.model_validate_json(raw) if raw else None

    def to_audit(self) -> dict[str, str]:
        """The proposal's audit fields, one per part, so no value outgrows an audit field's bound:
        ``provenance.tainted`` and ``provenance.data_flow`` (``true``/``false``), and each read and flag
        as the JSON of its object under ``provenance.reads[<i>]`` and ``provenance.flags[<i>]``."""
        fields = {"provenance.tainted": _word(self.tainted), "provenance.data_flow": _word(self.data_flow)}
        fields |= {f"provenance.reads[{i}]": read.model_dump_json() for i, read in enumerate(self.reads)}
        fields |= {f"provenance.flags[{i}]": flag.model_dump_json() for i, flag in enumerate(self.flags)}
        if self.taint is not None:
            fields["provenance.taint"] = self.taint.model_dump_json()
        return fields

    @classmethod
    def from_audit(cls, extra: Mapping[str, str]) -> Provenance | None:
        """The provenance an audit event's fields hold (`to_audit`); None when they hold none."""
        if "provenance.tainted" not in extra:
            return None

        def parts(name: str) -> list[str]:
            count = sum(1 for key in extra if key.startswith(f"provenance.{name}["))
            return [extra[f"provenance.{name}[{i}]"] for i in range(count)]

        taint = extra.get("provenance.taint")
        return cls(
            tainted=extra["provenance.tainted"] == "true",
            data_flow=extra.get("provenance.data_flow") == "true",
            reads=[ProvenanceRead.model_validate_json(raw) for raw in parts("reads")],
            flags=[ProvenanceFlag.model_validate_json(raw) for raw in parts("flags")],
            taint=None if taint is None else ProvenanceTaint.model_validate_json(taint),
        )


def _word(value: bool) -> str:
    return "true" if value else "false"
