"""What a Cedar policy decision costs per call, at 100 policies, beside the built-in rules in the same run.

The gateway asks the access function twice on a call: the listing question (the catalog's, and the
executor's first step: Cedar's partial evaluation with the arguments unknown) and, once the arguments
are validated, the call question (Cedar's full evaluation). This measures, on the orders adapter's
real tools and the README's example policy set padded to 100 policies with role- and
argument-conditioned permits and forbids over every tool:

* ``builtin``: `decide_access` then `decide_call` with no engine (the tool's `Access` rule);
* ``cedar``: the same two calls with the Cedar engine.

Rounds are interleaved; the table shows the median per-call time of each, the difference (what a
policy set adds to a call; the issue's budget is 50 µs) and the ratio. The numbers move with
whatever else the machine runs.

Run: ``python bench/policy_cost.py [--rounds 7] [--calls 2000] [--policies 100]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.orders import TOOLS
from gateway.cedar.engine import CedarEngine, compile_policies
from gateway.config.org_adapters import OrgAdapters
from gateway.principal import Principal
from policies.access import decide_access, decide_call
from policies.engine import PolicyEngine

EXAMPLE = """
@id("refunds-over-500-forbidden")
forbid (principal, action == Action::"orders_refund_create", resource)
when { context.arguments.amount_cents > 50000 };
@id("small-refunds-by-support") @approval("auto")
permit (principal in Role::"support", action == Action::"orders_refund_create", resource)
when { context.arguments.amount_cents < 2000 };
@id("refunds-need-two-finance") @approval("2") @approver_role("finance")
permit (principal in Role::"support", action == Action::"orders_refund_create", resource)
when { context.arguments.amount_cents >= 2000 };
@id("viewers-never-see-refunds")
forbid (principal in Role::"viewer", action == Action::"orders_refund_create", resource);
"""


def policy_set(count: int) -> str:
    """The example set padded to `count` policies that Cedar must consider (real tools, real conditions)."""
    lines = [EXAMPLE]
    names = [tool.name for tool in TOOLS]
    for index in range(count - 4):
        tool = names[index % len(names)]
        effect = "forbid" if index % 3 == 0 else "permit"
        condition = (
            f"context.arguments.amount_cents > {100_000 + index}"
            if tool == "orders_refund_create"
            else f'principal.org == "org-{index}"'
        )
        lines.append(
            f'@id("pad-{index}") {effect} (principal in Role::"team-{index % 7}", action == Action::"{tool}", '
            f"resource) when {{ {condition} }};"
        )
    return "\n".join(lines)


def _round(engine: PolicyEngine | None, calls: int) -> float:
    refund = next(tool for tool in TOOLS if tool.name == "orders_refund_create")
    orgs = OrgAdapters({"acme": frozenset({"orders"})})
    who = Principal(subject="sam@acme.example", org="acme", roles=frozenset({"support", "team-3"}), key_id="key_s")
    arguments: dict[str, Any] = {"order_id": "ord-1001", "amount_cents": 30_000, "reason": "damaged"}
    started = time.perf_counter()
    for _ in range(calls):
        decide_access(refund, who, orgs, engine)
        decide_call(refund, who, orgs, engine, arguments, tainted=False)
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--policies", type=int, default=100)
    args = parser.parse_args()
    engine = CedarEngine(compile_policies(policy_set(args.policies), TOOLS, source="bench"))
    assert len(engine.compiled.ids) == args.policies
    builtin, cedar, ratios = [], [], []
    _round(engine, 200)  # warm up
    for _ in range(args.rounds):
        plain, policy = _round(None, args.calls), _round(engine, args.calls)
        builtin.append(plain)
        cedar.append(policy)
        ratios.append(policy / plain)
    b, c = statistics.median(builtin) * 1e6, statistics.median(cedar) * 1e6
    print(f"{args.policies} policies, {args.rounds} rounds of {args.calls} calls (listing + call question each)")
    print(f"{'variant':<10} {'µs/call':>10}")
    print(f"{'builtin':<10} {b:>10.1f}")
    print(f"{'cedar':<10} {c:>10.1f}")
    ratio = statistics.median(ratios)
    print(f"added per call: {c - b:.1f} µs (budget 50 µs); median ratio cedar/builtin: {ratio:.0f}x")


if __name__ == "__main__":
    main()
