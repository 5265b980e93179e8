"""Which rate budgets a tool call spends from, and whose they are. Pure functions.

A read (every tool that is not a write, the ``approvals_*`` tools included: following a card is
reading the ledger) spends from the read budget; a write proposal from the proposal budget, since
each one costs a person's attention. A tool named in ``[limits.tools.<name>]`` also spends from a
budget of its own. The org's override, when it has one, replaces the default class budget.

The owner is the requester, org and identity (`gateway.principal.identity_of`): every key and token of one
person, however their subject is spelled, spends from one budget, so minting more keys buys no more calls.
Principals of different orgs never share a budget.
"""

from __future__ import annotations

from typing import Literal

from gateway.limits.budgets import Limits
from gateway.limits.rate_limiter import Charge
from gateway.principal import Principal, identity_of
from gateway.tools.declarations import Mode, Tool

__all__ = ["budget_owner", "charges_for"]


def budget_owner(principal: Principal) -> str:
    """Whose budgets `principal`'s calls spend: its org and identity (not its key, nor its subject's spelling)."""
    return f"{principal.org}\n{identity_of(principal.subject)}"


def charges_for(tool: Tool, principal: Principal, limits: Limits) -> tuple[Charge, ...]:
    """The budgets one call of `tool` by `principal` spends from: its class budget, then the tool's own."""
    kind: Literal["reads", "proposals"] = "proposals" if tool.mode is Mode.WRITE else "reads"
    charges = [Charge(bucket=kind, budget=limits.budget(kind, principal.org))]
    own = limits.tools.get(tool.name)
    if own is not None:
        charges.append(Charge(bucket=f"tool:{tool.name}", budget=own))
    return tuple(charges)
