"""What a Cedar policy decision costs per call, at 100 policies, beside the built-in rules in the same run.

The gateway asks the access function twice on a call: the listing question (the catalog's, and the
executor's first step: Cedar's partial evaluation with the arguments unknown) and, once the arguments
are validated, the call question (Cedar's full evaluation). This measures, on the orders adapter's
real tools and the README's example policy set padded to 100 policies with role- and
argument-conditioned permits and forbids over every tool:

* ``builtin``: `decide_access` then `decide_call` with no engine (the tool's `Access` rule);
* ``cedar-computed``: the same two calls with the Cedar engine, by a caller also in ``team-5``, whose policies
  add to the amount (``amount_cents + 19 > 100000``), and a new amount each call: an argument read with
  arithmetic is keyed by its value, so every call question is evaluated by Cedar (the listing answer is
  remembered per principal and tool): what a decision Cedar must compute costs, over the 10 policies that can
  match this caller;
* ``cedar-like``: a new order id each call, which some policies match with ``like`` (``"ord-9*31"``): the engine
  keys the id by the patterns it matches, so Cedar computes one answer per combination and the engine remembers
  it for every other id (one id in fifty matches one of them);
* ``cedar``: a new refund amount each call: the policies only compare the amount with literals, so Cedar
  computes the answer once for each side of their thresholds, and the engine remembers it for the others;
* ``cedar-same``: the same arguments each call, so the remembered call answer applies.

Rounds are interleaved; the table shows the median per-call time of each, the difference (what a
policy set adds to a call; the issue's budget is 50 µs) and the median ratio. The times move with
whatever else the machine runs; ``--callgrind`` adds instructions per call, which do not (each
variant run under valgrind with and without a quarter of the calls, garbage collection off while they run,
the difference divided by the calls).

Run: ``python bench/policy_cost.py [--rounds 7] [--calls 2000] [--policies 100] [--callgrind]``.
"""

from __future__ import annotations

import argparse
import gc
import re
import statistics
import subprocess
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
        if tool != "orders_refund_create":
            condition = f'principal.org == "org-{index}"'
        elif index % 7 == 5:  # the amount read with arithmetic: keyed by its value (`cedar-computed`)
            condition = f"context.arguments.amount_cents + {index} > 100000"
        elif index % 8 == 7:  # an order id read with like: keyed by the patterns it matches (`cedar-like`)
            condition = f'context.arguments.order_id like "ord-9*{index}"'
        else:
            condition = f"context.arguments.amount_cents > {100_000 + index}"
        lines.append(
            f'@id("pad-{index}") {effect} (principal in Role::"team-{index % 7}", action == Action::"{tool}", '
            f"resource) when {{ {condition} }};"
        )
    return "\n".join(lines)


REFUND = next(tool for tool in TOOLS if tool.name == "orders_refund_create")
ORGS = OrgAdapters({"acme": frozenset({"orders"})})
WHO = Principal(subject="sam@acme.example", org="acme", roles=frozenset({"support", "team-3"}), key_id="key_s")
COMPUTING = Principal(
    subject="kim@acme.example", org="acme", roles=frozenset({"support", "team-3", "team-5"}), key_id="key_k"
)
"""A caller whose policies include ``team-5``'s, which read the amount with arithmetic (`cedar-computed`)."""


class _Amounts:
    """Refund amounts between 20.00 and 500.00, and order ids, that do not repeat within a run."""

    def __init__(self) -> None:
        self._next = 0

    def take(self, varying: str) -> dict[str, Any]:
        """A refund's arguments, `varying` (``amount_cents`` or ``order_id``) new, the others as ever."""
        self._next += 1
        if varying == "amount_cents":
            return {"order_id": "ord-1001", "amount_cents": 2_000 + self._next % 48_000, "reason": "damaged"}
        return {"order_id": f"ord-9{self._next:07d}", "amount_cents": 30_000, "reason": "damaged"}


def _round(
    engine: PolicyEngine | None, calls: int, amounts: _Amounts | None, varying: str = "", who: Principal = WHO
) -> float:
    """`calls` calls' listing and call questions by `who`; the argument `varying` new each call when `amounts` is
    given."""
    arguments: dict[str, Any] = {"order_id": "ord-1001", "amount_cents": 30_000, "reason": "damaged"}
    started = time.perf_counter()
    for _ in range(calls):
        if amounts is not None:
            arguments = amounts.take(varying)
        decide_access(REFUND, who, ORGS, engine)
        decide_call(REFUND, who, ORGS, engine, arguments, tainted=False)
    return (time.perf_counter() - started) / max(calls, 1)


VARIANTS = ("builtin", "cedar-computed", "cedar-like", "cedar", "cedar-same")
"""What the table compares: the built-in rules; Cedar with a new amount each call that policies add to (every
answer computed); Cedar with a new order id each call, matched with ``like`` (computed once per combination of
patterns matched); Cedar with a new amount each call (computed once per side of the thresholds); Cedar with the
same arguments each call (the remembered answer)."""


def _variant(name: str, engine: CedarEngine, calls: int, amounts: _Amounts) -> float:
    if name == "builtin":
        return _round(None, calls, None)
    if name == "cedar-same":
        return _round(engine, calls, None)
    if name == "cedar-computed":
        return _round(engine, calls, amounts, "amount_cents", COMPUTING)
    return _round(engine, calls, amounts, "order_id" if name == "cedar-like" else "amount_cents")


def _instructions(args: argparse.Namespace) -> dict[str, float]:
    """Instructions per call of each variant, counted by callgrind: a run with `calls` calls less one with none."""

    def count(variant: str, calls: int) -> int:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__]
        command += ["--count", variant, "--calls", str(calls), "--policies", str(args.policies)]
        done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if found is None:
            raise RuntimeError(f"callgrind reported no count: {done.stderr[-500:]}")
        return int(found.group(1))

    calls = max(args.calls // 4, 100)
    return {variant: (count(variant, calls) - count(variant, 0)) / calls for variant in VARIANTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--policies", type=int, default=100)
    parser.add_argument("--callgrind", action="store_true", help="also count instructions per call (valgrind)")
    parser.add_argument("--count", choices=VARIANTS, help=argparse.SUPPRESS)  # one run under callgrind
    args = parser.parse_args()
    engine = CedarEngine(compile_policies(policy_set(args.policies), TOOLS, source="bench"))
    assert len(engine.compiled.ids) == args.policies
    amounts = _Amounts()
    if args.count is not None:
        _variant(args.count, engine, 50, amounts)  # warm: the set's slices, entities and listing answers
        gc.collect()
        gc.disable()  # a collection of the whole heap would land in one run and not the other
        _variant(args.count, engine, args.calls, amounts)
        return
    for name in VARIANTS:
        _variant(name, engine, 200, amounts)  # warm up
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    ratios: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        plain = _variant("builtin", engine, args.calls, amounts)
        times["builtin"].append(plain)
        for name in VARIANTS[1:]:
            took = _variant(name, engine, args.calls, amounts)
            times[name].append(took)
            ratios[name].append(took / plain)
    print(f"{args.policies} policies, {args.rounds} rounds of {args.calls} calls (listing + call question each)")
    counted = _instructions(args) if args.callgrind else {}
    print(f"{'variant':<15} {'µs/call':>9} {'added µs':>9} {'ratio':>6}" + ("  instructions/call" if counted else ""))
    base = statistics.median(times["builtin"]) * 1e6
    for name in VARIANTS:
        median = statistics.median(times[name]) * 1e6
        ratio = f"{statistics.median(ratios[name]):.1f}x" if ratios[name] else "1x"
        extra = f"  {counted[name]:>18,.0f}" if counted else ""
        print(f"{name:<15} {median:>9.1f} {median - base:>9.1f} {ratio:>6}{extra}")
    print("added: the median per-call time less the built-in rules' (the issue's budget: 50 µs at 100 policies)")


if __name__ == "__main__":
    main()
