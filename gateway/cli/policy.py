"""``countersign policy``: show the built-in rules as Cedar, validate a policy set, test it, explain a decision.

Who calls it: `gateway.cli.main` (``show``, ``validate``, ``test``: no store) and
`gateway.cli.commands` (``explain``, which reads the key it explains from the store). The policy
set a command reads is ``--policies`` when given, else the configured one (`Settings.policies`),
else the built-in rules translated (`gateway.cedar.builtin`). Everything is validated against the
schema of the tools the settings enable, as the gateway does at load.

A test directory holds a policy set (``*.cedar``) and ``cases.toml``, a list of ``[[case]]``
tables (the README's "Policies" section shows one):

```toml
[[case]]
name = "refunds over 500.00 are refused"
principal = { subject = "sam@acme.example", org = "acme", roles = ["support"] }  # also key_id, scopes
tool = "orders_refund_create"
arguments = { order_id = "ord-1001", amount_cents = 60000, reason = "damaged" }
tainted = false     # for a write: whether its requester was tainted (shown third-party text)
expect = "deny"     # deny | allow | auto | 1 | 2 | 3 (a write's approvals); "allow" for a write: the tool's own
listed = true       # optional: whether the catalog lists the tool for this principal
approver_role = "finance"  # optional
```
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.cedar.builtin import builtin_text
from gateway.cedar.engine import CedarEngine, compile_policies
from gateway.cedar.files import read_policy_text
from gateway.config.settings import BUILTIN, Settings
from gateway.errors import ConfigError
from gateway.principal import Principal
from gateway.tools.declarations import Tool
from policies.access import decide_access, decide_call
from policies.engine import AUTO, PolicyAnswer

__all__ = ["answer_words", "explain", "policy_set", "run_offline", "show_builtin"]


def _tools(settings: Settings) -> list[Tool]:
    from gateway.runtime.app import tools_for

    return tools_for(settings)


def show_builtin(settings: Settings, tools: list[Tool]) -> str:
    """The built-in rules of `settings` over `tools`, as Cedar."""
    return builtin_text(settings.approvals.policies, settings.oauth.scopes_for)(tools)


def policy_set(settings: Settings, tools: list[Tool], path: Path | None) -> CedarEngine:
    """The engine a command reads: `path`, else the configured set, else the built-in rules as Cedar.

    Raises:
        ConfigError: the set cannot be read or does not validate (Cedar's message).
    """
    chosen = path or settings.policies
    if chosen is None or chosen == BUILTIN:
        return CedarEngine(compile_policies(show_builtin(settings, tools), tools, source="builtin"))
    return CedarEngine(compile_policies(read_policy_text(chosen), tools, source=str(chosen)))


def answer_words(answer: PolicyAnswer) -> str:
    """One decision as ``countersign policy explain`` and ``test`` print it."""
    if not answer.decision.allowed:
        outcome = "deny"
    elif answer.approvals == AUTO:
        outcome = f"approve: auto (as policy:{answer.auto_policy})"
    elif answer.approvals is not None:
        outcome = f"approve: {answer.approvals} approver(s)"
    else:
        outcome = "allow"
    role = f", approver role {answer.approver_role}" if answer.approver_role else ""
    ids = ", ".join(answer.policy_ids) or "none (no policy permits it)"
    return f"{outcome}{role}\ndeciding policies: {ids}\nreason: {answer.decision.reason}"


def explain(
    settings: Settings,
    principal: Principal,
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    tainted: bool,
    path: Path | None,
    registered: list[Tool] | None = None,
) -> int:
    """Print the decision on `principal` calling `tool_name` with `arguments`, and the policies that decided.

    `registered`: the tools the store knows beyond the configured adapters' (registered adapters pinned, and the
    fronted MCP servers' reviewed tools as a gateway last listed them), served and validated against with them:
    the catalog the gateway decides with.
    """
    tools = _tools(settings)
    tools += registered or []
    engine = policy_set(settings, tools, path)
    tool = next((tool for tool in tools if tool.name == tool_name), None)
    if tool is None:
        print(f"countersign: no tool {tool_name!r} is served", file=sys.stderr)
        return 1
    validated = tool.arguments.model_validate(dict(arguments)).model_dump(mode="json")
    listed = decide_access(tool, principal, settings.org_adapters, engine).allowed
    answer = decide_call(tool, principal, settings.org_adapters, engine, validated, tainted=tainted)
    print(f"policy set: {engine.active}\nlisted: {'yes' if listed else 'no'}\n{answer_words(answer)}")
    return 0


def run_offline(settings: Settings, args: argparse.Namespace) -> int:
    """``policy show``, ``validate`` and ``test``: no store."""
    tools = _tools(settings)
    if args.policy_command == "show":
        print(show_builtin(settings, tools), end="")
        return 0
    if args.policy_command == "validate":
        engine = policy_set(settings, tools, args.file)
        print(f"valid: {engine.active} ({len(engine.compiled.ids)} policies)")
        return 0
    return _test(settings, tools, args.dir)


def _test(settings: Settings, tools: list[Tool], directory: Path) -> int:
    engine = policy_set(settings, tools, directory)
    try:
        cases = tomllib.loads((directory / "cases.toml").read_text(encoding="utf-8")).get("case", [])
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{directory / 'cases.toml'}: {error}") from error
    by_name = {tool.name: tool for tool in tools}
    failed = 0
    for index, case in enumerate(cases):
        name = case.get("name", f"case {index + 1}")
        got = _outcome(engine, settings, by_name, case)
        wanted = {key: case[key] for key in ("expect", "listed", "approver_role") if key in case}
        mismatch = {key: (value, got.get(key)) for key, value in wanted.items() if got.get(key) != value}
        if mismatch:
            failed += 1
            detail = "; ".join(f"{key}: expected {want!r}, got {have!r}" for key, (want, have) in mismatch.items())
            print(f"FAIL {name}: {detail} (policies: {got['policies']})")
        else:
            print(f"ok   {name} (policies: {got['policies']})")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _outcome(
    engine: CedarEngine, settings: Settings, tools: Mapping[str, Tool], case: Mapping[str, Any]
) -> dict[str, Any]:
    tool = tools.get(str(case.get("tool", "")))
    if tool is None:
        raise ConfigError(f"case {case.get('name')!r}: no tool {case.get('tool')!r} is served")
    who = case.get("principal", {})
    principal = Principal(
        subject=who.get("subject", "someone@example.com"),
        org=who.get("org", "acme"),
        roles=frozenset(who.get("roles", ())),
        key_id=who.get("key_id", "key_case"),
        scopes=frozenset(who["scopes"]) if "scopes" in who else None,
    )
    arguments = tool.arguments.model_validate(case.get("arguments", {})).model_dump(mode="json")
    answer = decide_call(tool, principal, settings.org_adapters, engine, arguments, tainted=bool(case.get("tainted")))
    if not answer.decision.allowed:
        expect = "deny"
    elif answer.approvals == AUTO:
        expect = "auto"
    elif answer.approvals is not None:
        expect = str(answer.approvals)
    else:
        expect = "allow"
    return {
        "expect": expect,
        "listed": decide_access(tool, principal, settings.org_adapters, engine).allowed,
        "approver_role": answer.approver_role,
        "policies": ", ".join(answer.policy_ids) or "none",
    }


def parse_arguments(text: str) -> dict[str, Any]:
    """``--args``: a JSON object.

    Raises:
        ConfigError: it is not one.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"--args is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise ConfigError("--args must be a JSON object")
    return value
