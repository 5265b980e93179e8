"""The built-in rules as one Cedar policy set: what ``countersign policy show`` prints.

Who calls it: ``countersign policy show``, and the tests that hold the printed set equivalent to
the rules it translates. Three small languages become one document a security team can read:

* each tool's `Access` (public, or any of some roles) is a ``permit`` named ``access:<tool>``;
* each ``[approvals.policies.<name>]`` rule is an ``@approval("auto")`` permit named
  ``approvals:<name>`` (its tool, roles, orgs and argument bounds as the condition);
* ``[oauth] tool_scopes`` become a ``forbid`` per tool named ``scopes:<tool>``: a token without
  every scope the tool needs may not call it (API keys are not limited by scopes). As without a
  policy set, the catalog still lists the tool: the condition reads the call's context, which a
  listing does not know, so a client can learn the scope to ask for.

What stays outside the set, said in the printed text: a rule's ``hours`` (the request context
carries no clock), and each tool's own approval (quorum, approver role, escalations and the
tainted quorum), which applies to every card a permit without ``@approval`` lets through.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping

from gateway.config.approvals import PolicyRule
from gateway.tools.declarations import Tool

__all__ = ["builtin_policies", "builtin_text"]


def builtin_policies(
    tools: Iterable[Tool], rules: Mapping[str, PolicyRule], tool_scopes: Mapping[str, frozenset[str]]
) -> str:
    """The Cedar text of the built-in rules over `tools`: access, approval rules and, per tool, its scopes."""
    served = list(tools)
    blocks = ["// The built-in rules of this gateway, as Cedar (countersign policy show).", ""]
    blocks.append("// Access: who may see and call each tool.")
    for tool in served:
        blocks.append(_access(tool))
    by_name = {tool.name: tool for tool in served}
    names = set(by_name)
    if rules:
        blocks.append("")
        blocks.append("// [approvals] rules: a policy approves the card in a person's stead (never a tainted one).")
        for name in sorted(rules):
            if rules[name].tool in names:
                blocks.append(_rule(name, rules[name], by_name[rules[name].tool]))
    scoped = [(tool.name, tool_scopes[tool.name]) for tool in served if tool_scopes.get(tool.name)]
    if scoped:
        blocks.append("")
        blocks.append(
            "// [oauth] tool_scopes: a token needs every scope of the tool it calls. The catalog still lists the"
        )
        blocks.append("// tool (the condition reads the call's context), so a client learns which scope to ask for.")
        for name, scopes in scoped:
            wanted = ", ".join(_string(scope) for scope in sorted(scopes))
            blocks.append(
                f'@id("scopes:{name}")\nforbid (principal, action == Action::{_string(name)}, resource)\n'
                f"when {{ context has arguments && principal.token && !principal.scopes.containsAll([{wanted}]) }};"
            )
    return "\n".join(blocks) + "\n"


def builtin_text(
    rules: Mapping[str, PolicyRule], scopes_for: Callable[[str], frozenset[str]]
) -> Callable[[Iterable[Tool]], str]:
    """The built-in rules as Cedar over whichever tools are served (``policies = "builtin"``): regenerated as
    the catalog changes, so a registered tool is decided by its own access rule, as without a policy set."""

    def text(tools: Iterable[Tool]) -> str:
        served = list(tools)
        return builtin_policies(served, rules, {tool.name: scopes_for(tool.name) for tool in served})

    return text


def _access(tool: Tool) -> str:
    head = f'@id("access:{tool.name}")\npermit (principal, action == Action::{_string(tool.name)}, resource)'
    if tool.access.is_public:
        return head + ";"
    return f"{head}\nwhen {{ {_any_role(tool.access.any_of_roles)} }};"


def _any_role(roles: Iterable[str]) -> str:
    if not roles:
        return "false"
    return "(" + " || ".join(f"principal in Role::{_string(role)}" for role in sorted(roles)) + ")"


def _rule(name: str, rule: PolicyRule, tool: Tool) -> str:
    # A rule approves; it grants no access: its condition holds only where the tool's access does.
    conditions = [] if tool.access.is_public else [_any_role(tool.access.any_of_roles)]
    conditions += ["(" + " || ".join(f"principal in Role::{_string(role)}" for role in rule.requester_roles) + ")"]
    if "*" not in rule.orgs:
        conditions.append("(" + " || ".join(f"principal.org == {_string(org)}" for org in rule.orgs) + ")")
    for field, bound in sorted(rule.arguments.items()):
        if bound.min is not None:
            conditions.append(f"context.arguments.{field} >= {math.ceil(bound.min)}")
        if bound.max is not None:
            conditions.append(f"context.arguments.{field} <= {math.floor(bound.max)}")
    hours = f"\n// hours {rule.hours} at {rule.utc_offset}: kept by the TOML rule (no clock in the context)"
    return (
        f'@id("approvals:{name}") @approval("auto")\n'
        f"permit (principal, action == Action::{_string(rule.tool)}, resource)\n"
        f"when {{ {' && '.join(conditions)} }};" + (hours if rule.hours else "")
    )


def _string(text: str) -> str:
    """A Cedar string literal (its escapes are JSON's for every character a name can hold)."""
    return json.dumps(text)
