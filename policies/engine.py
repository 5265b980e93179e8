"""The policy engine seam: what an operator's policy set answers about one tool and one caller.

`decide_access` (the one access function the catalog and the executor call) asks a `PolicyEngine`
in place of the tool's built-in `Access` rule when one is configured. The production engine is
Cedar (`gateway.cedar`); this module only says what any engine must answer, and holds no I/O.

An engine answers two questions with the same policies:

* *listing* (``arguments is None``): may any call of this tool by this caller be allowed? The
  catalog lists a tool exactly then, and the executor's first step asks the same question, so a
  hidden tool and a refused call agree. An engine must answer it soundly: "no" only when no
  arguments could make the call allowed.
* *calling* (the validated ``arguments``, and for a write whether the proposal is ``tainted``):
  is this call allowed; for a write, allowed means only that it may be *proposed*, and the answer
  says which approval the card needs. A write never executes without a card, whatever it says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.decision import Decision
from gateway.principal import Principal
from gateway.tools.declarations import Tool

__all__ = ["AUTO", "PolicyAnswer", "PolicyEngine"]

AUTO = 0
"""`PolicyAnswer.approvals` for a write a policy approves itself (``@approval("auto")``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyAnswer:
    """An engine's verdict, with the policies that decided it (for the audit entry and ``policy explain``)."""

    decision: Decision
    policy_ids: tuple[str, ...] = ()
    """The ids of the policies that decided, as the engine reports them (sorted)."""
    approvals: int | None = None
    """For an allowed write: distinct approvers the card needs, `AUTO` when a policy approves it;
    None when no policy said (the tool's own approval stands), and always None for a read."""
    approver_role: str | None = None
    """For an allowed write: the role an approver needs, when a policy named one."""
    auto_policy: str | None = None
    """The id of the policy that approves the card itself, when `approvals` is `AUTO`."""


class PolicyEngine(Protocol):
    """An operator's policy set, consulted by `policies.access.decide_access`.

    Implementations hold no per-call state, answer without I/O, and swap their policy set
    atomically, so one call sees one set.
    """

    @property
    def active(self) -> str:
        """A name for the policy set in force (shown by ``/readyz``)."""
        ...

    def decide(
        self, tool: Tool, principal: Principal, arguments: Mapping[str, Any] | None, *, tainted: bool
    ) -> PolicyAnswer:
        """The verdict on `principal` calling `tool`; `arguments` None asks the listing question."""
        ...
