"""Per-principal limits and quotas: the ``[limits]`` section of the config, as data.

This module only says what the limits are; the store enforces the rate budgets (one atomic GCRA
script per check, shared by every gateway process on one Redis) and the ledger enforces the
open-card cap. The defaults, and why they are what they are:

- ``reads``: 1,200 per minute per principal, burst 100. A busy agent loop reads a few times a
  second; ten times that is a runaway, not a workload. The burst lets a planning step fan out.
- ``proposals``: 60 per minute, burst 10. Every proposal costs a person's attention: an agent
  that proposes more than one write a second is flooding the approval queue.
- ``open_cards_per_requester``: 50 PENDING or APPROVED cards. More than an approver can review in
  one sitting; past it the agent must wait for decisions, not file more.
- ``sessions_per_key``: 32 concurrent 2025-11-25 sessions per key. A client opens one; a fleet of
  workers sharing a key a few; each costs the gateway memory until it idles out.
- ``batch_decisions``: 50 cards per batch decision (``POST /admin/api/cards/decisions``). Each one
  was reviewed by a person; a longer list is a script deciding unseen cards, and one request
  holding that many transitions keeps the others waiting.
- ``session_idle_seconds``: 600. A session unused for ten minutes is closed.
- ``unauthenticated``: 600 requests per minute per client address, burst 60, counted before any
  key lookup, so a flood of bad or missing keys never reaches the key store.
- ``provenance_window_seconds``: 900. A card shows approvers the requester's reads this far back
  (its principal's, whatever session or era): long enough for an agent's plan from reading to
  proposing. The window decides nothing: taint has a period of its own.
- ``provenance_reads``: 20. The latest reads kept per principal; one agent turn reads a
  handful.
- ``taint_seconds``: 86,400. Once a read shows a principal's model third-party text, the principal
  is tainted for a day: an agent's context (a long conversation, its notes) holds text that long,
  and no later read shortens it. A 2025-11-25 session that was shown the text stays tainted for as
  long as it lives, even past the period.

Overrides: ``[limits.orgs.<org>]`` replaces any of ``reads``, ``proposals`` and
``open_cards_per_requester`` for that org's principals; ``[limits.tools.<tool>]`` adds a budget
of its own to one tool, checked besides the read or proposal budget.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Budget", "Limits", "OrgLimits"]


class Budget(BaseModel):
    """A rate: `per_minute` sustained, with up to `burst` calls at once (GCRA's tolerance)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    per_minute: float = Field(gt=0)
    burst: int = Field(ge=1)

    @property
    def interval_ms(self) -> float:
        """Milliseconds between two calls at the sustained rate (GCRA's emission interval)."""
        return 60_000.0 / self.per_minute


class OrgLimits(BaseModel):
    """What one org replaces of the defaults; None keeps the default."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    reads: Budget | None = None
    proposals: Budget | None = None
    open_cards_per_requester: int | None = Field(default=None, ge=1)


class Limits(BaseModel):
    """Every limit the gateway enforces per principal. The defaults are the module docstring's."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    reads: Budget = Budget(per_minute=1200, burst=100)
    proposals: Budget = Budget(per_minute=60, burst=10)
    open_cards_per_requester: int = Field(default=50, ge=1)
    sessions_per_key: int = Field(default=32, ge=1)
    batch_decisions: int = Field(default=50, ge=1, le=200)
    session_idle_seconds: float = Field(default=600.0, gt=0)
    unauthenticated: Budget = Budget(per_minute=600, burst=60)
    provenance_window_seconds: float = Field(default=900.0, gt=0)
    taint_seconds: float = Field(default=86_400.0, gt=0)
    provenance_reads: int = Field(default=20, ge=1, le=1000)
    orgs: dict[str, OrgLimits] = Field(default_factory=dict)
    tools: dict[str, Budget] = Field(default_factory=dict)

    def budget(self, kind: Literal["reads", "proposals"], org: str) -> Budget:
        """The read or proposal budget of a principal of `org`."""
        override = self.orgs.get(org)
        chosen = getattr(override, kind) if override is not None else None
        return chosen if chosen is not None else getattr(self, kind)  # type: ignore[no-any-return]

    def open_cards(self, org: str) -> int:
        """The open-card cap of a requester of `org`."""
        override = self.orgs.get(org)
        if override is not None and override.open_cards_per_requester is not None:
            return override.open_cards_per_requester
        return self.open_cards_per_requester
