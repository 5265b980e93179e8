"""Approvals that need no person, and repeats that need no second card: the ``[approvals]`` section, as data.

This module only says what the settings are. `policies.policy_approval` decides whether a rule
admits a card (a pure function), the executor asks the ledger to record the approval, and the
ledger keeps the daily budget and the dedupe entries. The defaults, and why:

- ``policies``: none. Policy approvals are off until an operator writes a rule: every write waits
  for a person unless someone decided otherwise, in the config, by name.
- ``policy_daily_budget``: 20 policy approvals per requester (org and subject) per UTC day. A rule
  is written for the occasional low-risk write; an agent that needs more than that a day is doing
  something a person should look at. Past it the card simply waits for a person.
- ``repeat_window_seconds``: 3600. A write identical to one that SUCCEEDED less than an hour ago
  is answered with the finished card (``existing: true``) instead of a new card: an agent that
  retries or forgets what it did gets its answer, and no approver approves the same write twice.
  0 switches it off.

A rule (``[approvals.policies.<name>]``) admits a card when every one of its conditions holds: the
card's tool is its `tool`, the requester's org is one of `orgs`, the requester holds one of
`requester_roles` (as recorded on the card), every argument named in `arguments` is a number
within its bounds (inclusive), and, when `hours` is given, the card was made within those hours
at `utc_offset`. The approver it records is ``policy:<name>``.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["POLICY_PREFIX", "ApprovalSettings", "Bound", "PasskeyRequirement", "PolicyRule"]

POLICY_PREFIX = "policy:"
"""How a policy approver is named (``policy:<rule name>``); no person's subject may start so."""

_CLOSED = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
_RULE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_HOURS = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-3]|24):([0-5][0-9])")
_OFFSET = re.compile(r"([+-])(0[0-9]|1[0-4]):([0-5][0-9])")


class Bound(BaseModel):
    """Inclusive bounds on one numeric argument: ``{ max = 5000 }``, ``{ min = 1, max = 3 }``."""

    model_config = _CLOSED
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> Bound:
        if self.min is None and self.max is None:
            raise ValueError("a bound needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min is above max")
        return self


class PolicyRule(BaseModel):
    """``[approvals.policies.<name>]``: when a card is approved as ``policy:<name>``; see the module docstring."""

    model_config = _CLOSED
    tool: str = Field(min_length=1)
    """The one tool the rule is for, by its exact name."""
    requester_roles: list[str] = Field(min_length=1)
    """The requester must hold one of these roles (no rule admits every requester)."""
    orgs: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    arguments: dict[str, Bound] = Field(default_factory=dict)
    """Top-level arguments that must be numbers within their bounds; an absent or non-numeric one fails."""
    hours: str | None = None
    """``HH:MM-HH:MM`` at `utc_offset`, start included and end excluded; a start after the end spans
    midnight (``22:00-06:00``). Unset: any time."""
    utc_offset: str = "+00:00"

    @field_validator("hours")
    @classmethod
    def _hours(cls, hours: str | None) -> str | None:
        if hours is None:
            return None
        if _HOURS.fullmatch(hours) is None:
            raise ValueError("hours must be HH:MM-HH:MM (00:00 to 24:00)")
        start, end = _minutes(hours)
        if end > 24 * 60 or start == end:
            raise ValueError("hours must not end after 24:00, and start and end must differ (omit hours: any time)")
        return hours

    @field_validator("utc_offset")
    @classmethod
    def _offset(cls, offset: str) -> str:
        if _OFFSET.fullmatch(offset) is None:
            raise ValueError("utc_offset must be +HH:MM or -HH:MM (at most 14:00)")
        return offset

    @property
    def window_minutes(self) -> tuple[int, int] | None:
        """`hours` as minutes of the day ``(start, end)``, end exclusive; None: any time."""
        return _minutes(self.hours) if self.hours is not None else None

    @property
    def offset_minutes(self) -> int:
        """`utc_offset` in minutes east of UTC."""
        match = _OFFSET.fullmatch(self.utc_offset)
        if match is None:  # the validator makes this unreachable
            raise ValueError(self.utc_offset)
        sign, hours, minutes = match.groups()
        return (-1 if sign == "-" else 1) * (int(hours) * 60 + int(minutes))


class PasskeyRequirement(BaseModel):
    """``[approvals.require_passkey]``: which cards a person approves only with a passkey assertion.

    A card needs one when its tool matches a pattern of `tools` (fnmatch; ``"*"`` every write), when
    its org is one of `orgs` (``"*"`` every org), or, with `once_registered`, when the approver has a
    passkey registered. Policy approvals never need one (no person approves). Whatever requires it,
    an API key alone (REST, CLI, a batch) cannot approve such a card.
    """

    model_config = _CLOSED
    tools: list[str] = Field(default_factory=list)
    orgs: list[str] = Field(default_factory=list)
    once_registered: bool = True
    """An approver who registered a passkey approves only with it: on by default, so registering is
    the phase-in step, and an approver's key can no longer approve for them once they did."""


class ApprovalSettings(BaseModel):
    """``[approvals]``: policy approvals and the answer to a repeat of a finished write."""

    model_config = _CLOSED
    repeat_window_seconds: float = Field(default=3600.0, ge=0)
    """How long after a write SUCCEEDED an identical proposal is answered with its card; 0: never."""
    policy_daily_budget: int = Field(default=20, ge=1)
    """Policy approvals per requester per UTC day, over every rule."""
    policies: dict[str, PolicyRule] = Field(default_factory=dict)
    require_passkey: PasskeyRequirement = Field(default_factory=PasskeyRequirement)
    """Which cards need the approver's passkey (`PasskeyRequirement`)."""

    @field_validator("policies")
    @classmethod
    def _names(cls, policies: dict[str, PolicyRule]) -> dict[str, PolicyRule]:
        for name in policies:
            if _RULE_NAME.fullmatch(name) is None:
                raise ValueError(f"rule name {name!r}: lowercase letters, digits, '-' and '_', at most 63")
        return policies

    @property
    def repeat_window_ms(self) -> int:
        return int(self.repeat_window_seconds * 1000)


def _minutes(hours: str) -> tuple[int, int]:
    start, _, end = hours.partition("-")
    return _clock(start), _clock(end)


def _clock(text: str) -> int:
    hour, _, minute = text.partition(":")
    return int(hour) * 60 + int(minute)
