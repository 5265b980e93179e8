"""The card a write proposal files: every field of a `Proposal`, from the tool, its arguments and the caller.

A pure function (`gateway.executor.agent` is its one user, once the call passed access, budgets,
validation and its preview): which approvers it needs (`policies.approval.approvals_required`, with
the org's quorum for a tainted card), the summary and the agent's own words from the validated
arguments, its decision and execution windows from the tool's approval policy.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gateway.cards.contract import Proposal
from gateway.principal import Principal
from gateway.provenance import Provenance
from gateway.tools.declarations import Tool
from gateway.tools.preview import Preview
from policies.approval import approvals_required

__all__ = ["proposal_for"]


def proposal_for(
    tool: Tool,
    version: str,
    args: BaseModel,
    canonical: dict[str, Any],
    principal: Principal,
    *,
    args_hash: str,
    dedupe_key: str,
    preview: Preview | None,
    provenance: Provenance,
    tainted_approvals: int,
    awaits_policy: bool,
) -> Proposal:
    """The proposal of `tool` (a write) with `args` (`canonical`: their JSON form) by `principal`."""
    approval, summary = tool.approval, tool.summary
    if approval is None or summary is None:  # Tool construction makes this unreachable
        raise RuntimeError(f"write tool {tool.name} has no approval policy")
    return Proposal(
        tool=tool.name,
        tool_version=version,
        arguments=canonical,
        args_hash=args_hash,
        requester_subject=principal.subject,
        requester_org=principal.org,
        requester_key_id=principal.key_id,
        requester_roles=principal.roles,
        acting_client=principal.acting_client,
        actors=principal.actors,
        approvals_required=approvals_required(
            approval, canonical, tainted=provenance.tainted, tainted_approvals=tainted_approvals
        ),
        approver_role=approval.approver_role,
        summary=summary(args),
        agent_text={field: str(canonical[field]) for field in sorted(tool.agent_text_fields)},
        decide_within_ms=int(approval.decide_within_seconds * 1000),
        execute_within_ms=int(approval.execute_within_seconds * 1000),
        dedupe_key=dedupe_key,
        preview=preview,
        awaits_policy=awaits_policy,
        provenance=provenance,
    )
