"""The agent path's memory of reads, for the provenance of the cards that follow them.

Who calls it: `gateway.executor.agent.AgentPath`, once per answered read (`remember_audited`) and once
per write proposal (`beside`, then `assess`): an answered read whose model-visible result showed
third-party text taints its owner for the taint period (`gateway.provenance`). What it asks of its
collaborators: a `CallHistory` (the store), an `AuditedCallHistory` that remembers a read together
with its audit event (the same Redis history, in one round trip; `AuditAfter` for any other), the
`HistoryRules` of this gateway and a wall clock. What it decides: nothing; the verdict is
`policies.provenance.assess`, and the quorum `policies.approval.approvals_required`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.audit.events import AuditEvent, AuditSink
from gateway.provenance import AuditedCallHistory, CallHistory, CallRecord, HistoryRules, Provenance, Taint
from gateway.tools.declarations import Tool
from policies.provenance import assess

__all__ = ["AuditAfter", "ReadMemory", "Recall", "audit_fields"]

T = TypeVar("T")


class ReadMemory:
    """Remembers answered reads per owner, and assesses a proposal against them."""

    def __init__(
        self,
        history: CallHistory,
        rules: HistoryRules,
        *,
        audited: AuditedCallHistory,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._history = history
        self.rules = rules
        self._audited = audited
        """Where an answered read is remembered and audited, in one step where the store can."""
        self._wall_clock = wall_clock
        self._sessions: dict[str, Taint] = {}
        """Per open 2025-11-25 session of this process that was shown third-party text, the read that
        showed it first: such a session stays tainted past the period, until it closes (`forget_session`)."""

    async def remember_audited(self, tool: Tool, owner: str, event: AuditEvent, *, shown: bool) -> bool:
        """Remember this answered read of `tool` for `owner` and audit it with `event`; `shown`: its
        model-visible result carries third-party text (`gateway.untrusted.shows_fenced`), so it taints
        `owner`. Returns whether the event is in the trail; the read must not be answered otherwise.

        Raises:
            StoreUnavailableError: the read could not be remembered; nothing was audited.
        """
        record = self._record(tool, shown)
        return await self._audited.append_audited(owner, record, rules=self.rules, event=event)

    def _record(self, tool: Tool, shown: bool) -> CallRecord:
        return CallRecord(
            tool=tool.name,
            at_ms=int(self._wall_clock() * 1000),
            untrusted_text=shown,
            private=tool.returns_private_data,
        )

    async def reads(self, owner: str) -> Recall:
        """`owner`'s remembered reads and standing taint, for `assess` (read apart so a proposal can overlap
        it with its preview).

        Raises:
            StoreUnavailableError: the history could not be read (the caller files no card).
        """
        reads, taint = await asyncio.gather(self._history.recent(owner, rules=self.rules), self._history.taint(owner))
        return Recall(reads=reads, taint=taint)

    async def beside(self, owner: str, work: Awaitable[T]) -> tuple[T | Exception, Recall | Exception]:
        """`work` awaited while `owner`'s reads are read (`reads`, in one task of its own): what each
        gave or raised. Both finish before this returns; cancelled, it cancels the reads too."""
        reading = asyncio.ensure_future(self.reads(owner))
        try:
            done: T | Exception = await work
        except Exception as error:
            done = error
        except BaseException:
            reading.cancel()
            raise
        try:
            return done, await reading
        except Exception as error:
            return done, error

    def assess(
        self, tool: Tool, arguments: Mapping[str, Any], recall: Recall, *, session: str | None = None
    ) -> Provenance:
        """The provenance of a proposal of `tool` with canonical `arguments`, after `recall` (`reads`), now, made
        in 2025-11-25 session `session` (None: none, or another era)."""
        now_ms = int(self._wall_clock() * 1000)
        held = self._sessions.get(session) if session is not None else None
        return assess(
            tool, arguments, recall.reads, now_ms=now_ms, rules=self.rules, taint=recall.taint, session_taint=held
        )

    def hold_session(self, session: str, tool: Tool) -> None:
        """Session `session` was shown third-party text by a read of `tool`: it stays tainted until it closes."""
        if session not in self._sessions:
            self._sessions[session] = Taint.of(self._record(tool, True), self.rules)

    def forget_session(self, session: str) -> None:
        """Session `session` closed: nothing of it is held any more."""
        self._sessions.pop(session, None)

    def tainted_approvals(self, org: str) -> int:
        """The distinct approvers a tainted card of `org` needs at least (1: the tool's own number)."""
        return self.rules.tainted_approvals.get(org, 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class Recall:
    """What a proposal reads back of its requester: its recent reads (oldest first) and its standing taint."""

    reads: Sequence[CallRecord]
    taint: Taint | None


class AuditAfter:
    """An `AuditedCallHistory` in two steps: `history` remembers the read, then `audit` records its event (for a
    history that cannot write the trail itself, such as `gateway.provenance.InMemoryCallHistory`)."""

    def __init__(self, history: CallHistory, audit: AuditSink) -> None:
        self._history = history
        self._audit = audit

    async def append_audited(self, owner: str, record: CallRecord, *, rules: HistoryRules, event: AuditEvent) -> bool:
        """Remember `record`, then audit `event`: whether the event is in the trail.

        Raises:
            StoreUnavailableError: the read could not be remembered; nothing was audited.
        """
        await self._history.append(owner, record, rules=rules)
        return await self._audit.record(event)


def audit_fields(provenance: Provenance | None) -> dict[str, str]:
    """A proposal's audit fields: its provenance, one field per part (`Provenance.to_audit`)."""
    return {} if provenance is None else provenance.to_audit()
